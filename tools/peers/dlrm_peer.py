#!/usr/bin/python3
"""PyTorch peer of the dlrm_dcnv2 plugin: the same DLRM-DCNv2 model, data and optimiser.

The model mirrors plugins/dlrm_dcnv2/model.hpp parameter by parameter (same names, so a benchhost
weight file loads with load_state_dict): bottom MLP (ReLU after every layer), one EmbeddingBag
(sum, sparse gradients) per categorical feature, the concatenation, low-rank DCN-v2 cross layers
x_{l+1} = x0 * (W_l (V_l x_l) + b_l) + x_l, the top MLP (ReLU but after the last layer), BCE with
logits (mean). Adagrad for everything (epsilon 1e-10, no decay), as MLPerf's reference.

Batches are read from MLPerf's Criteo multi-hot layout exactly as the plugin reads them: training
sample s of step t is row t * batch + s of days 0..num_days-2 in order, ids modulo table size.

  check:  start from --weights, train --steps steps, print JSON {"losses": [...],
          "param_abs_sums": {name: sum |w|}} (the C++ test compares them with the plugin's).
  bench:  train steps on --data-dir batches (or random ones without it) with --threads threads
          and print JSON {"samples_per_second": ...} (tools/bench_dlrm.sh). --device cuda
          [--amp bf16] for the GPU comparison (MLPerf shape at --batch 65536, tables scaled).

Use Debian's /usr/bin/python3 (torch 1.13, numpy).
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weights  # noqa: E402

NUM_DENSE = 13
NUM_SPARSE = 26


def int_list(s):
    return [int(x) for x in s.split(",") if x]


class CrossLayer(nn.Module):
    def __init__(self, dim, rank):
        super().__init__()
        self.down = nn.Linear(dim, rank, bias=False)
        self.up = nn.Linear(rank, dim, bias=True)


class Dlrm(nn.Module):
    def __init__(self, a):
        super().__init__()
        dim = a.embedding_dim
        self.bottom = nn.ModuleList()
        n_in = NUM_DENSE
        for n_out in a.bottom_mlp:
            self.bottom.append(nn.Linear(n_in, n_out))
            n_in = n_out
        self.emb = nn.ModuleList(
            nn.EmbeddingBag(rows, dim, mode=a.pooling, sparse=True) for rows in a.table_sizes)
        d = dim * (1 + len(a.table_sizes))
        self.cross = nn.ModuleList(CrossLayer(d, a.cross_rank) for _ in range(a.cross_layers))
        self.top = nn.ModuleList()
        n_in = d
        for n_out in a.top_mlp:
            self.top.append(nn.Linear(n_in, n_out))
            n_in = n_out

    def forward(self, dense, sparse):
        x = dense
        for layer in self.bottom:
            x = torch.relu(layer(x))
        parts = [x] + [bag(ids) for bag, ids in zip(self.emb, sparse)]
        x0 = torch.cat(parts, dim=1)
        x = x0
        for c in self.cross:
            x = x0 * c.up(c.down(x)) + x
        for i, layer in enumerate(self.top):
            x = layer(x)
            if i + 1 < len(self.top):
                x = torch.relu(x)
        return x.view(-1)


class Days:
    """Training days 0..num_days-2 of the multi-hot layout, read like the plugin does."""

    def __init__(self, data_dir, num_days, table_sizes):
        self.days = []
        for d in range(num_days - 1):
            dense = np.load(os.path.join(data_dir, f"day_{d}_dense.npy"), mmap_mode="r")
            labels = np.load(os.path.join(data_dir, f"day_{d}_labels.npy"), mmap_mode="r")
            z = np.load(os.path.join(data_dir, f"day_{d}_sparse_multi_hot.npz"))
            sparse = [z[str(k)] for k in range(NUM_SPARSE)]
            self.days.append((dense, labels, sparse))
        self.table_sizes = table_sizes

    def rows(self, first, count):
        dense, labels, sparse = [], [], [[] for _ in range(NUM_SPARSE)]
        start = 0
        for d_dense, d_labels, d_sparse in self.days:
            n = d_dense.shape[0]
            lo, hi = max(first, start), min(first + count, start + n)
            if lo < hi:
                dense.append(np.asarray(d_dense[lo - start:hi - start]))
                labels.append(np.asarray(d_labels[lo - start:hi - start]).reshape(-1))
                for k in range(NUM_SPARSE):
                    sparse[k].append(np.asarray(d_sparse[k][lo - start:hi - start]))
            start += n
        dense = torch.from_numpy(np.concatenate(dense).astype(np.float32))
        labels = torch.from_numpy(np.concatenate(labels).astype(np.float32))
        ids = [torch.from_numpy(np.concatenate(s).astype(np.int64) % self.table_sizes[k])
               for k, s in enumerate(sparse)]
        return dense, ids, labels


def make_optimizer(model, lr):
    return torch.optim.Adagrad(model.parameters(), lr=lr, lr_decay=0, weight_decay=0,
                               initial_accumulator_value=0, eps=1e-10)


def train_step(model, opt, loss_fn, batch, amp_dtype=None):
    dense, ids, labels = batch
    opt.zero_grad(set_to_none=True)
    with torch.autocast(dense.device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
        logits = model(dense, ids)
    loss = loss_fn(logits.float(), labels)
    loss.backward()
    opt.step()
    return loss.item()


def random_batches(a, n):
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(n):
        dense = torch.log(3 + 20 * torch.rand(a.batch, NUM_DENSE, generator=g))
        labels = (torch.rand(a.batch, generator=g) < 0.25).float()
        ids = [torch.randint(0, rows, (a.batch, h), generator=g)
               for rows, h in zip(a.table_sizes, a.multi_hot_sizes)]
        out.append((dense, ids, labels))
    return out


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["check", "bench"])
    p.add_argument("--data-dir")
    p.add_argument("--num-days", type=int, default=3)
    p.add_argument("--weights", help="benchhost weight file to start from (check)")
    p.add_argument("--table-sizes", type=int_list, required=True)
    p.add_argument("--multi-hot-sizes", type=int_list, required=True)
    p.add_argument("--embedding-dim", type=int, default=128)
    p.add_argument("--bottom-mlp", type=int_list, default=[512, 256, 128])
    p.add_argument("--top-mlp", type=int_list, default=[1024, 1024, 512, 256, 1])
    p.add_argument("--cross-layers", type=int, default=3)
    p.add_argument("--cross-rank", type=int, default=512)
    p.add_argument("--pooling", default="sum", choices=["sum", "mean"])
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--lr", type=float, default=0.005)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu", help="bench: cpu or cuda[:N]")
    p.add_argument("--amp", choices=["none", "bf16"], default="none",
                   help="bench: autocast the dense parts to bf16 (embeddings and Adagrad stay fp32)")
    a = p.parse_args(argv)
    if len(a.table_sizes) != NUM_SPARSE or len(a.multi_hot_sizes) != NUM_SPARSE:
        p.error(f"--table-sizes and --multi-hot-sizes need {NUM_SPARSE} values each")
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)

    model = Dlrm(a)
    if a.weights:
        state = weights.to_torch(weights.load(a.weights))
        model.load_state_dict(state, strict=True)
    opt = make_optimizer(model, a.lr)
    loss_fn = nn.BCEWithLogitsLoss()

    if a.mode == "check":
        if not a.data_dir:
            p.error("check needs --data-dir")
        days = Days(a.data_dir, a.num_days, a.table_sizes)
        losses = [train_step(model, opt, loss_fn, days.rows(t * a.batch, a.batch))
                  for t in range(a.steps)]
        sums = {n: float(t.detach().abs().double().sum()) for n, t in model.named_parameters()}
        print(json.dumps({"losses": losses, "param_abs_sums": sums}))
        return 0

    if a.data_dir:
        days = Days(a.data_dir, a.num_days, a.table_sizes)
        batches = [days.rows(t * a.batch, a.batch) for t in range(a.warmup + a.steps)]
    else:
        batches = random_batches(a, a.warmup + a.steps)
    device = torch.device(a.device)
    if device.type != "cpu":
        model.to(device)
        opt = make_optimizer(model, a.lr)  # state next to the parameters
        batches = [(d.to(device), [i.to(device) for i in ids], l.to(device)) for d, ids, l in batches]
    amp_dtype = torch.bfloat16 if a.amp == "bf16" else None
    for t in range(a.warmup):
        train_step(model, opt, loss_fn, batches[t], amp_dtype)
    t0 = time.perf_counter()
    for t in range(a.steps):
        train_step(model, opt, loss_fn, batches[a.warmup + t], amp_dtype)  # .item() synchronises
    seconds = time.perf_counter() - t0
    out = {"samples_per_second": a.batch * a.steps / seconds, "seconds": seconds,
           "steps": a.steps, "batch": a.batch, "threads": a.threads, "device": str(device),
           "amp": a.amp, "torch": torch.__version__}
    if device.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(device)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
