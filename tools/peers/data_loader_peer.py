#!/usr/bin/python3
"""PyTorch DataLoader peer for bench_data_pipeline: the same pipelines on the same files.

  /usr/bin/python3 tools/peers/data_loader_peer.py --dir DIR [--threads 1,2] [--epochs 2]

  idx  : Fashion-MNIST train images from the IDX .gz files -> float [1, 28, 28] normalised + label,
         DataLoader(batch_size=256, shuffle=True, num_workers=T).
  jpeg : torchvision ImageFolder over DIR/jpeg (written by bench_data_pipeline) with
         RandomResizedCrop(224) + RandomHorizontalFlip() + ToTensor() + Normalize(ImageNet),
         DataLoader(batch_size=32, shuffle=True, num_workers=T).
Workers are persistent, so the best of --epochs epochs excludes worker start-up (PyTorch's best
case). Prints "RESULT <pipeline> <threads> <samples/s>" lines like bench_data_pipeline.
Needs python3-torch, python3-torchvision and python3-pil (Debian packages).
"""
import argparse
import gzip
import os
import struct
import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError(f"{path}: not a u8 IDX file")
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims).copy()


class FashionIdx(Dataset):
    def __init__(self, images, labels, mean=0.2860, std=0.3530):
        self.images = read_idx(images)
        self.labels = read_idx(labels).astype(np.int64)
        self.mean, self.std = mean, std

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        img = torch.from_numpy(self.images[i]).float().div_(255.0).sub_(self.mean).div_(self.std).unsqueeze(0)
        return img, int(self.labels[i])


def time_epochs(loader, epochs):
    best = (0.0, 0, 0.0)
    for _ in range(epochs):
        t0 = time.perf_counter()
        n = 0
        for images, _labels in loader:
            n += images.shape[0]
        s = time.perf_counter() - t0
        if n / s > best[0]:
            best = (n / s, n, s)
    return best


def report(pipeline, threads, m):
    print(f"{pipeline:<10} {threads:7d} {m[1]:9d} {m[2]:9.3f} {m[0]:14.1f}")
    print(f"RESULT {pipeline} {threads} {m[0]:.1f}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", default="/tmp/benchhost_data_bench")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--idx-images", default="/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
    p.add_argument("--idx-labels", default="/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz")
    p.add_argument("--only", default="")
    a = p.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    torch.manual_seed(1)
    print(f"{'pipeline':<10} {'workers':>7} {'samples':>9} {'seconds':>9} {'samples/s':>14}")
    if a.only in ("", "idx"):
        if not os.path.exists(a.idx_images):
            print(f"idx: skipped ({a.idx_images} not found)")
        else:
            ds = FashionIdx(a.idx_images, a.idx_labels)
            for t in threads:
                loader = DataLoader(ds, batch_size=256, shuffle=True, num_workers=t, persistent_workers=t > 0)
                report("idx", t, time_epochs(loader, a.epochs))
                del loader
    if a.only in ("", "jpeg"):
        try:
            import torchvision
            from torchvision import transforms
        except ImportError as e:
            print(f"jpeg: skipped ({e}; apt-get install python3-torchvision python3-pil)")
            return 0
        root = os.path.join(a.dir, "jpeg")
        if not os.path.isdir(root):
            print(f"jpeg: skipped ({root} missing: run bench_data_pipeline --dir {a.dir} first)")
            return 0
        tf = transforms.Compose([
            transforms.RandomResizedCrop(224),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        ])
        ds = torchvision.datasets.ImageFolder(root, transform=tf)
        for t in threads:
            loader = DataLoader(ds, batch_size=32, shuffle=True, num_workers=t, persistent_workers=t > 0)
            report("jpeg", t, time_epochs(loader, a.epochs))
            del loader
    return 0


if __name__ == "__main__":
    sys.exit(main())
