#!/usr/bin/python3
"""PyTorch peer of benchhost's LSTM (sdk/include/benchhost/nn/lstm.hpp): torch.nn.LSTM.

Two modes (Debian's /usr/bin/python3, torch 1.13):

  lstm_peer.py check DIR...   each DIR holds raw little-endian f32 files written by tests/lstm:
      spec.txt          "T B I H L dtype" (dtype float32 or float64: the precision torch runs in)
      x.bin [T, B, I], h0.bin, c0.bin [L, B, H], dy.bin [T, B, H], dhT.bin, dcT.bin [L, B, H],
      weight_ih_l{k}.bin, weight_hh_l{k}.bin, bias_ih_l{k}.bin, bias_hh_l{k}.bin
    Runs torch.nn.LSTM(I, H, L) (dropout 0, time-major) from (h0, c0) with those weights,
    backpropagates L = sum(y dy) + sum(hT dhT) + sum(cT dcT) and writes, as f32:
      y.bin, hT.bin, cT.bin, dx.bin, dh0.bin, dc0.bin, grad_<parameter name>.bin
    then prints "checked DIR" (one torch start-up for every case of a test).

  lstm_peer.py bench --threads N --iters K --T --B --I --H --layers
    Times forward + backward (input and every parameter gradient) of torch.nn.LSTM, f32, after
    one warm-up, and prints one line in the format of bench/lstm/bench_lstm.cpp:
      pytorch lstm threads=N fwd_bwd_ms_median=... fwd_ms_median=... cpu_ms_median=...
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np
import torch


def read(d, name, shape, dtype):
    a = np.fromfile(os.path.join(d, name), dtype="<f4").reshape(shape)
    return torch.from_numpy(a.astype(dtype))


def write(d, name, t):
    t.detach().to(torch.float32).contiguous().numpy().astype("<f4").tofile(os.path.join(d, name))


def check(d):
    with open(os.path.join(d, "spec.txt")) as f:
        fields = f.read().split()
    T, B, I, H, L = (int(v) for v in fields[:5])
    dtype = np.float64 if fields[5] == "float64" else np.float32
    torch.set_default_dtype(torch.float64 if dtype == np.float64 else torch.float32)
    lstm = torch.nn.LSTM(I, H, L)
    with torch.no_grad():
        for name, p in lstm.named_parameters():
            p.copy_(read(d, name + ".bin", tuple(p.shape), dtype))
    x = read(d, "x.bin", (T, B, I), dtype).requires_grad_(True)
    h0 = read(d, "h0.bin", (L, B, H), dtype).requires_grad_(True)
    c0 = read(d, "c0.bin", (L, B, H), dtype).requires_grad_(True)
    y, (hT, cT) = lstm(x, (h0, c0))
    loss = (y * read(d, "dy.bin", (T, B, H), dtype)).sum() + (hT * read(d, "dhT.bin", (L, B, H), dtype)).sum() + (
        cT * read(d, "dcT.bin", (L, B, H), dtype)).sum()
    loss.backward()
    for name, t in (("y", y), ("hT", hT), ("cT", cT), ("dx", x.grad), ("dh0", h0.grad), ("dc0", c0.grad)):
        write(d, name + ".bin", t)
    for name, p in lstm.named_parameters():
        write(d, "grad_" + name + ".bin", p.grad)
    print("checked", d)


def bench(a):
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(a.I, a.H, a.layers)
    x = torch.randn(a.T, a.B, a.I, requires_grad=True)
    dy = torch.randn(a.T, a.B, a.H)
    fwd, total, cpu = [], [], []
    for it in range(a.iters + 1):
        lstm.zero_grad(set_to_none=False)
        x.grad = None
        c0, t0 = time.process_time(), time.perf_counter()
        y, _ = lstm(x)
        t1 = time.perf_counter()
        y.backward(dy)
        t2, c1 = time.perf_counter(), time.process_time()
        if it == 0:
            continue  # warm-up
        fwd.append((t1 - t0) * 1e3)
        total.append((t2 - t0) * 1e3)
        cpu.append((c1 - c0) * 1e3)
    print(f"pytorch lstm threads={a.threads} T={a.T} B={a.B} I={a.I} H={a.H} layers={a.layers} "
          f"fwd_bwd_ms_median={statistics.median(total):.3f} fwd_ms_median={statistics.median(fwd):.3f} "
          f"cpu_ms_median={statistics.median(cpu):.3f} torch={torch.__version__}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["check", "bench"])
    p.add_argument("dirs", nargs="*")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--T", type=int, default=100)
    p.add_argument("--B", type=int, default=8)
    p.add_argument("--I", type=int, default=240)
    p.add_argument("--H", type=int, default=1024)
    p.add_argument("--layers", type=int, default=2)
    a = p.parse_args()
    if a.mode == "check":
        if not a.dirs:
            sys.exit("lstm_peer.py check needs the directories the test wrote")
        for d in a.dirs:
            check(d)
    else:
        bench(a)


if __name__ == "__main__":
    main()
