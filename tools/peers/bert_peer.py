#!/usr/bin/python3
"""PyTorch peer of the bert plugin: the same BERT pre-training model and LAMB optimiser.

The model mirrors plugins/bert/model.hpp parameter by parameter (same names, so a benchhost
weight file loads with load_state_dict): token + position + segment embeddings, LayerNorm
(eps 1e-12), post-LN transformer blocks (fused qkv Linear(C, 3C) laid out [3, heads, head_dim],
exact-erf GELU FFN), the masked-LM head on the masked positions only (dense + GELU + LayerNorm,
decoder tied to the token embedding, output bias) and the NSP head on each sequence's [CLS]
(tanh pooler + Linear(C, 2)). Loss = mean CE over masked tokens + mean CE over NSP labels.
LAMB exactly as sdk/include/benchhost/optim/optimizer.hpp states it (trust ratio ||w||/||u||,
decoupled weight decay inside u, biases and LayerNorm parameters in the skip list), after
clipping the global gradient norm.

  check:  --input FILE (a benchhost weight file holding the model's weights, the batches
          "batch.<k>.<field>" and the learning rates "lr" [K]) --config JSON --steps K:
          train K steps and print JSON {"losses": [...]} (tests/bert compares with the plugin).
  bench:  --config JSON --batch B --steps N --threads T [--device cpu|cuda[:N]]
          [--amp none|bf16|fp16] [--tf32]: random batches of the config's shapes, print JSON
          {"samples_per_second": ...} (tools/bench_lm.sh on CPU, tools/device/bench_gpu.sh on
          CUDA). --amp runs the forward pass under torch.autocast (fp32 master weights and
          optimizer; fp16 with a static loss scale, unscaled before clipping); --tf32 lets fp32
          matmuls use TF32 on CUDA. The device is synchronised before and after the timed steps.

Use Debian's /usr/bin/python3 (torch 1.13, numpy).
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weights  # noqa: E402


class Block(nn.Module):
    """The SDK's TransformerBlock (sdk/include/benchhost/nn/transformer.hpp)."""

    def __init__(self, hidden, heads, ffn, pre_ln, eps, tanh_gelu):
        super().__init__()
        self.heads, self.pre_ln, self.tanh_gelu = heads, pre_ln, tanh_gelu
        self.attn = nn.Module()
        self.attn.qkv = nn.Linear(hidden, 3 * hidden)
        self.attn.out = nn.Linear(hidden, hidden)
        self.ln1 = nn.LayerNorm(hidden, eps=eps)
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden)
        self.ln2 = nn.LayerNorm(hidden, eps=eps)

    def attention(self, x, keep):
        B, T, C = x.shape
        H, D = self.heads, C // self.heads
        qkv = self.attn.qkv(x).view(B, T, 3, H, D).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = q @ k.transpose(-1, -2) / math.sqrt(D)
        scores = scores.masked_fill(~keep, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        return self.attn.out((probs @ v).permute(0, 2, 1, 3).reshape(B, T, C))

    def ffn(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh" if self.tanh_gelu else "none"))

    def forward(self, x, keep):
        if self.pre_ln:
            h = x + self.attention(self.ln1(x), keep)
            return h + self.ffn(self.ln2(h))
        h = self.ln1(x + self.attention(x, keep))
        return self.ln2(h + self.ffn(h))


class Bert(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, V = c["hidden"], c["vocab"]
        self.embeddings = nn.Module()
        self.embeddings.word = nn.Embedding(V, H)
        self.embeddings.position = nn.Embedding(c["max_positions"], H)
        self.embeddings.segment = nn.Embedding(2, H)
        self.embeddings.ln = nn.LayerNorm(H, eps=1e-12)
        self.encoder = nn.Module()
        self.encoder.layer = nn.ModuleList(
            [Block(H, c["heads"], c["ffn"], False, 1e-12, False) for _ in range(c["layers"])])
        self.pooler = nn.Linear(H, H)
        self.mlm = nn.Module()
        self.mlm.dense = nn.Linear(H, H)
        self.mlm.ln = nn.LayerNorm(H, eps=1e-12)
        self.mlm.bias = nn.Parameter(torch.zeros(V))
        self.nsp = nn.Linear(H, 2)

    def forward(self, b):
        e = self.embeddings
        x = e.word(b["input_ids"]) + e.position(b["position_ids"]) + e.segment(b["segment_ids"])
        x = e.ln(x)
        if "packed_mask" in b:
            keep = b["packed_mask"].bool()[:, None, :, :]
        else:
            keep = b["key_padding"].bool()[:, None, None, :]
        for layer in self.encoder.layer:
            x = layer(x, keep)
        flat = x.reshape(-1, x.shape[-1])
        # .float(): a no-op in fp32; under CPU autocast (bf16) LayerNorm does not cast its input.
        t = self.mlm.ln(F.gelu(self.mlm.dense(flat[b["mlm_index"]])).float())
        logits = t @ e.word.weight.t() + self.mlm.bias
        mlm = F.cross_entropy(logits, b["mlm_labels"], ignore_index=-100)
        pooled = torch.tanh(self.pooler(flat[b["cls_index"]]))
        nsp = F.cross_entropy(self.nsp(pooled), b["nsp_labels"], ignore_index=-100)
        return mlm + nsp


def decays(name):
    """Weight decay (and the LAMB trust ratio) for matrices and embeddings, not biases/norms."""
    parts = name.split(".")
    return not (parts[-1] == "bias" or parts[-2].startswith("ln"))


class Lamb:
    def __init__(self, named_params, beta1, beta2, eps, weight_decay):
        self.params = list(named_params)
        self.b1, self.b2, self.eps, self.wd = beta1, beta2, eps, weight_decay
        self.m = [torch.zeros_like(p) for _, p in self.params]
        self.v = [torch.zeros_like(p) for _, p in self.params]
        self.t = 0

    @torch.no_grad()
    def step(self, lr):
        self.t += 1
        c1, c2 = 1 - self.b1 ** self.t, 1 - self.b2 ** self.t
        for (name, p), m, v in zip(self.params, self.m, self.v):
            g = p.grad
            m.mul_(self.b1).add_(g, alpha=1 - self.b1)
            v.mul_(self.b2).addcmul_(g, g, value=1 - self.b2)
            u = (m / c1) / ((v / c2).sqrt() + self.eps)
            if decays(name):
                u = u + self.wd * p
                # The trust ratio stays on the device: no host round trip per parameter on a GPU.
                wn, un = p.norm(), u.norm()
                ratio = torch.where((wn > 0) & (un > 0), wn / un, torch.ones_like(wn))
                p.sub_(u * (ratio * lr))
            else:
                p.add_(u, alpha=-lr)

    def zero_grad(self):
        for _, p in self.params:
            p.grad = None


def batches_from(tensors):
    out = {}
    for name, arr in tensors.items():
        if name.startswith("batch."):
            _, k, field = name.split(".", 2)
            t = torch.from_numpy(np.ascontiguousarray(arr))
            if t.dtype == torch.int32 and field not in ("mlm_labels", "nsp_labels"):
                t = t.long()
            elif field in ("mlm_labels", "nsp_labels"):
                t = t.long()
            out.setdefault(int(k), {})[field] = t
    return [out[k] for k in sorted(out)]


def check(args, config):
    tensors = weights.load(args.input)
    model = Bert(config)
    state = {k: torch.from_numpy(np.array(v)) for k, v in tensors.items() if not k.startswith("batch.") and k != "lr"}
    model.load_state_dict(state, strict=True)
    lrs = [float(x) for x in tensors["lr"]]
    opt = Lamb(model.named_parameters(), config["beta1"], config["beta2"], config["eps"], config["weight_decay"])
    losses = []
    for step, b in enumerate(batches_from(tensors)[: args.steps]):
        loss = model(b)
        loss.backward()
        if config.get("clip", 0) > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config["clip"])
        opt.step(lrs[step])
        opt.zero_grad()
        losses.append(loss.item())
    print(json.dumps({"losses": losses}))


def random_batch(config, B, gen):
    T, P, V = config["seq_len"], config["max_predictions"], config["vocab"]
    ids = torch.randint(5, V, (B, T), generator=gen)
    seg = torch.zeros(B, T, dtype=torch.long)
    seg[:, T // 2:] = 1
    pos = torch.arange(T).expand(B, T).contiguous()
    n = max(1, min(P, T * 15 // 100))
    stride = max(1, (T - 2) // n)
    index = torch.tensor([b * T + 1 + k * stride for b in range(B) for k in range(n)])
    return {"input_ids": ids, "segment_ids": seg, "position_ids": pos,
            "key_padding": torch.ones(B, T, dtype=torch.uint8), "mlm_index": index,
            "mlm_labels": ids.reshape(-1)[index], "cls_index": torch.arange(B) * T,
            "nsp_labels": torch.randint(0, 2, (B,), generator=gen)}


# The bench options and timing shared with gpt3_peer.py (the same flags as resnet50_peer.py's bench).
AMP_DTYPES = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}
FP16_LOSS_SCALE = 2.0 ** 12


def add_bench_args(p):
    p.add_argument("--device", default="cpu", help="bench: cpu or cuda[:N]")
    p.add_argument("--amp", choices=sorted(AMP_DTYPES), default="none",
                   help="bench: torch.autocast mixed precision for the forward pass (fp16 with a static loss scale)")
    p.add_argument("--tf32", action="store_true", help="bench: allow TF32 for fp32 matmuls on CUDA")


def bench_device(args):
    """The bench's device, checked, with TF32 set as asked (PyTorch's default for matmuls is off)."""
    device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            sys.exit("bench: --device %s but torch %s sees no CUDA device" % (args.device, torch.__version__))
        if device.index is not None:  # "cuda" alone: the current device
            torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
        torch.backends.cudnn.allow_tf32 = args.tf32
    elif args.amp == "fp16":
        sys.exit("bench: --amp fp16 needs --device cuda (CPU autocast is bf16)")
    return device


def train_step(model_loss, params, optimizer_step, args, device):
    """One step: forward under autocast as --amp says, backward (fp16: scaled, then unscaled),
    global gradient-norm clip 1.0, then the optimizer."""
    amp_dtype = AMP_DTYPES[args.amp]
    with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
        loss = model_loss()
    if args.amp == "fp16":
        (loss * FP16_LOSS_SCALE).backward()
        with torch.no_grad():
            for p in params:
                if p.grad is not None:
                    p.grad.mul_(1.0 / FP16_LOSS_SCALE)
    else:
        loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer_step()


def timed_bench(step, args, device, extra):
    """Run `step(i)` warm-up times, then time args.steps steps with the device synchronised before
    and after; print the JSON line bench_lm.sh and bench_gpu.sh read."""
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    for i in range(args.warmup):
        step(i)
    sync()
    start = time.perf_counter()
    for i in range(args.steps):
        step(i)
    sync()
    elapsed = time.perf_counter() - start
    out = {"peer": "pytorch %s" % torch.__version__, "torch": torch.__version__, "device": str(device),
           "amp": args.amp, "tf32": args.tf32, "threads": args.threads, "batch_size": args.batch,
           "ms_per_step": elapsed / args.steps * 1e3, "samples_per_second": args.batch * args.steps / elapsed}
    out.update(extra)
    if device.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(device)
    print(json.dumps(out))


def bench(args, config):
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    device = bench_device(args)
    model = Bert(config).to(device)
    opt = Lamb(model.named_parameters(), 0.9, 0.999, 1e-6, 0.01)
    params = [p for _, p in opt.params]
    gen = torch.Generator().manual_seed(2)
    batches = [{k: t.to(device) for k, t in random_batch(config, args.batch, gen).items()} for _ in range(4)]

    def step(i):
        train_step(lambda: model(batches[i % 4]), params, lambda: opt.step(1e-3), args, device)
        opt.zero_grad()

    timed_bench(step, args, device, {"model": "bert", "seq_len": config["seq_len"]})


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=["check", "bench"])
    p.add_argument("--input")
    p.add_argument("--config", required=True, help="JSON with layers, hidden, heads, ffn, vocab, max_positions, ...")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    add_bench_args(p)
    args = p.parse_args(argv)
    config = json.loads(args.config)
    if args.mode == "check":
        torch.set_num_threads(args.threads)
        check(args, config)
    else:
        bench(args, config)


if __name__ == "__main__":
    main(sys.argv[1:])
