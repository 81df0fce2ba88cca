#!/usr/bin/python3
"""PyTorch peer of the gpt3 plugin: the same GPT-3 model and Adam(W) optimiser.

The model mirrors plugins/gpt3/model.hpp parameter by parameter (same names, so a benchhost
weight file loads with load_state_dict): token embedding wte, learned positions wpe, pre-LN
transformer blocks (the Block of bert_peer.py with pre_ln=True, LayerNorm eps 1e-5, tanh GELU,
causal attention), final LayerNorm ln_f and the output projection tied to wte. Loss = mean CE
over all tokens. torch.optim.AdamW with decay on matrices and embeddings only (biases and
LayerNorm parameters excluded, as the plugin's Parameter::weight_decay flags say), after
clipping the global gradient norm.

  check:  --input FILE (weights + "batch.<k>.tokens"/"batch.<k>.targets" + "lr" [K]) --config JSON
          --steps K: print JSON {"losses": [...]} (tests/gpt3 compares with the plugin).
  bench:  --config JSON --batch B --steps N --threads T [--device cpu|cuda[:N]]
          [--amp none|bf16|fp16] [--tf32]: random tokens of the config's shapes, print JSON
          {"samples_per_second": ...} (tools/bench_lm.sh on CPU, tools/device/bench_gpu.sh on
          CUDA); the options, autocast and timing are bert_peer.py's.

Use Debian's /usr/bin/python3 (torch 1.13, numpy).
"""

import argparse
import json
import os
import sys

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weights  # noqa: E402
from bert_peer import Block, add_bench_args, bench_device, decays, timed_bench, train_step  # noqa: E402


class Gpt(nn.Module):
    def __init__(self, c):
        super().__init__()
        H = c["hidden"]
        self.wte = nn.Embedding(c["vocab"], H)
        self.wpe = nn.Embedding(c["max_positions"], H)
        self.layer = nn.ModuleList([Block(H, c["heads"], c["ffn"], True, 1e-5, True) for _ in range(c["layers"])])
        self.ln_f = nn.LayerNorm(H, eps=1e-5)

    def forward(self, tokens, targets):
        B, T = tokens.shape
        x = self.wte(tokens) + self.wpe(torch.arange(T, device=tokens.device))
        keep = torch.ones(T, T, dtype=torch.bool, device=tokens.device).tril()[None, None]
        for layer in self.layer:
            x = layer(x, keep)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1), ignore_index=-100)


def make_optimizer(model, c):
    named = list(model.named_parameters())
    groups = [{"params": [p for n, p in named if decays(n)], "weight_decay": c["weight_decay"]},
              {"params": [p for n, p in named if not decays(n)], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=1.0, betas=(c["beta1"], c["beta2"]), eps=c["eps"])


def check(args, c):
    tensors = weights.load(args.input)
    model = Gpt(c)
    state = {k: torch.from_numpy(np.array(v)) for k, v in tensors.items() if not k.startswith("batch.") and k != "lr"}
    model.load_state_dict(state, strict=True)
    lrs = [float(x) for x in tensors["lr"]]
    opt = make_optimizer(model, c)
    losses = []
    for k in range(args.steps):
        tokens = torch.from_numpy(np.array(tensors[f"batch.{k}.tokens"])).long()
        targets = torch.from_numpy(np.array(tensors[f"batch.{k}.targets"])).long()
        loss = model(tokens, targets)
        loss.backward()
        if c.get("clip", 0) > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), c["clip"])
        for g in opt.param_groups:
            g["lr"] = lrs[k]
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    print(json.dumps({"losses": losses}))


def bench(args, c):
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    device = bench_device(args)
    model = Gpt(c).to(device)
    opt = make_optimizer(model, {"weight_decay": 0.1, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8})
    for g in opt.param_groups:
        g["lr"] = 1e-3
    params = list(model.parameters())
    gen = torch.Generator().manual_seed(2)
    data = [torch.randint(0, c["vocab"], (args.batch, c["seq_len"] + 1), generator=gen).to(device) for _ in range(4)]

    def step(i):
        d = data[i % 4]
        train_step(lambda: model(d[:, :-1], d[:, 1:]), params, opt.step, args, device)
        opt.zero_grad(set_to_none=True)

    timed_bench(step, args, device, {"model": "gpt3", "seq_len": c["seq_len"]})


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=["check", "bench"])
    p.add_argument("--input")
    p.add_argument("--config", required=True, help="JSON with layers, hidden, heads, ffn, vocab, max_positions, seq_len")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    add_bench_args(p)
    args = p.parse_args(argv)
    c = json.loads(args.config)
    if args.mode == "check":
        torch.set_num_threads(args.threads)
        check(args, c)
    else:
        bench(args, c)


if __name__ == "__main__":
    main(sys.argv[1:])
