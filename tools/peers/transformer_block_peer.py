#!/usr/bin/python3
"""PyTorch peer of benchhost's TransformerBlock (sdk/include/benchhost/nn/transformer.hpp).

The same block, written the way PyTorch BERT/GPT implementations write it (fused QKV Linear,
matmul + masked softmax + dropout + matmul attention, GELU FFN, dropout, residuals):
  post-LN (default, BERT):  h = LN1(x + Drop(Attn(x)));  y = LN2(h + Drop(FFN(h)))   GELU erf
  pre-LN (--pre-ln, GPT):   h = x + Drop(Attn(LN1(x)));  y = h + Drop(FFN(LN2(h)))   GELU tanh, causal
Times forward + backward (gradient w.r.t. the input and every parameter) per iteration and prints
one line in the format of bench/nn/bench_transformer_block.cpp:
  pytorch transformer_block threads=N fwd_bwd_ms_median=... fwd_bwd_ms_mean=... fwd_ms_median=...
    cpu_ms_median=... tokens_per_s=...
With --ops it instead times single ops on the shapes of bench/nn/bench_nn_ops.cpp (same names:
BM_Gelu, BM_GeluBackward, BM_LayerNorm, BM_LayerNormBackward, BM_Softmax, BM_Matmul/1024/768/768)
and prints "pytorch op=<name> ms_median=<t>" lines, to compare the non-GEMM kernels op by op.
Use Debian's /usr/bin/python3 (torch 1.13).
"""

import argparse
import math
import statistics
import time

import torch
from torch import nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, hidden, heads, ffn, dropout, pre_ln):
        super().__init__()
        self.heads = heads
        self.pre_ln = pre_ln
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.ln1 = nn.LayerNorm(hidden, eps=1e-5 if pre_ln else 1e-12)
        self.ln2 = nn.LayerNorm(hidden, eps=1e-5 if pre_ln else 1e-12)
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden)
        self.drop = nn.Dropout(dropout)
        self.attn_drop = nn.Dropout(dropout)
        self.gelu_approx = "tanh" if pre_ln else "none"

    def attn(self, x, mask_add):
        b, t, c = x.shape
        d = c // self.heads
        qkv = self.qkv(x).view(b, t, 3, self.heads, d).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d) + mask_add
        p = self.attn_drop(F.softmax(scores, dim=-1))
        o = torch.matmul(p, v).permute(0, 2, 1, 3).reshape(b, t, c)
        return self.out(o)

    def ffn(self, h):
        return self.fc2(F.gelu(self.fc1(h), approximate=self.gelu_approx))

    def forward(self, x, mask_add):
        if not self.pre_ln:
            h = self.ln1(x + self.drop(self.attn(x, mask_add)))
            return self.ln2(h + self.drop(self.ffn(h)))
        h = x + self.drop(self.attn(self.ln1(x), mask_add))
        return h + self.drop(self.ffn(self.ln2(h)))


def time_op(fn, iters, warmup=3, clock=time.perf_counter):
    ts = []
    for i in range(warmup + iters):
        t0 = clock()
        fn()
        if i >= warmup:
            ts.append((clock() - t0) * 1e3)
    return statistics.median(ts)


def run_ops(iters, clock):
    tokens = 8 * 128
    x = torch.rand(tokens, 3072) * 8 - 4
    dy = torch.rand(tokens, 3072) * 2 - 1
    xg = x.clone().requires_grad_(True)
    yg = F.gelu(xg)
    ln = nn.LayerNorm(768, eps=1e-12)
    h = torch.rand(tokens, 768) * 2 - 1
    hg = h.clone().requires_grad_(True)
    lo = ln(hg)
    dh = torch.rand(tokens, 768) * 2 - 1
    s = torch.rand(8 * 12 * 128, 128) * 10 - 5
    a, b = torch.rand(1024, 768), torch.rand(768, 768)
    with torch.no_grad():
        ops = {
            "BM_Gelu": lambda: F.gelu(x),
            "BM_LayerNorm": lambda: ln(h),
            "BM_Softmax": lambda: F.softmax(s, dim=-1),
            "BM_Matmul/1024/768/768": lambda: a @ b,
        }
        for name, fn in ops.items():
            print(f"pytorch op={name} ms_median={time_op(fn, iters, clock=clock):.3f}")
    print(f"pytorch op=BM_GeluBackward ms_median="
          f"{time_op(lambda: torch.autograd.grad(yg, xg, dy, retain_graph=True), iters, clock=clock):.3f}")
    print(f"pytorch op=BM_LayerNormBackward ms_median="
          f"{time_op(lambda: torch.autograd.grad(lo, [hg, ln.weight, ln.bias], dh, retain_graph=True), iters, clock=clock):.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--pre-ln", action="store_true")
    ap.add_argument("--ops", action="store_true", help="time single ops instead of the block")
    ap.add_argument("--cpu-time", action="store_true",
                    help="with --ops: process CPU time instead of wall time (fairer on a loaded machine, 1 thread)")
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    if a.ops:
        run_ops(a.iters, time.process_time if a.cpu_time else time.perf_counter)
        return
    torch.manual_seed(0)
    block = Block(a.hidden, a.heads, a.ffn, a.dropout, a.pre_ln).train()
    x = torch.randn(a.batch, a.seq, a.hidden, requires_grad=True)
    dy = torch.randn(a.batch, a.seq, a.hidden) * 1e-2
    if a.pre_ln:  # causal additive mask
        mask_add = torch.triu(torch.full((a.seq, a.seq), float("-inf")), diagonal=1)
    else:  # key padding (all keys valid, as in the benchhost run) as an additive [B, 1, 1, S] mask
        mask_add = torch.zeros(a.batch, 1, 1, a.seq)
    total, fwd, cpu = [], [], []
    for it in range(a.warmup + a.iters):
        block.zero_grad(set_to_none=False)
        x.grad = None
        c0 = time.process_time()
        t0 = time.perf_counter()
        y = block(x, mask_add)
        t1 = time.perf_counter()
        y.backward(dy)
        t2 = time.perf_counter()
        c2 = time.process_time()
        if it >= a.warmup:
            cpu.append((c2 - c0) * 1e3)
            fwd.append((t1 - t0) * 1e3)
            total.append((t2 - t0) * 1e3)
    med = statistics.median(total)
    print(f"pytorch transformer_block threads={torch.get_num_threads()} fwd_bwd_ms_median={med:.3f} "
          f"fwd_bwd_ms_mean={statistics.mean(total):.3f} fwd_ms_median={statistics.median(fwd):.3f} "
          f"cpu_ms_median={statistics.median(cpu):.3f} "
          f"tokens_per_s={a.batch * a.seq / (med / 1e3):.0f} torch={torch.__version__}")


if __name__ == "__main__":
    main()
