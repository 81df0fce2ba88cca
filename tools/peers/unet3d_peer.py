#!/usr/bin/python3
"""PyTorch peer of the unet3d plugin: MLPerf's 3D U-Net (image_segmentation/pytorch/model) in
eager PyTorch, for the step comparison test (tests/unet3d/peer_test.cpp) and the side-by-side
benchmark (tools/bench_unet3d.sh).

The model has the reference's structure and state_dict names (input_block.conv1.0.weight,
downsample.i, bottleneck, upsample.i.upsample_conv.0, output.conv.0), so benchhost weight files
load with load_state_dict. The loss is the reference DiceCELoss: (mean over samples and classes
1..C-1 of (1 - soft Dice) + cross-entropy) / 2, softmax probabilities, smoothing 1e-6.

    unet3d_peer.py steps --weights W.bhw --batch B.bhw --out OUT.bhw --steps 3 [--filters ...]
        load weights and a batch ("images" f32 [N,1,D,H,W], "labels" u8 [N,D,H,W]), run SGD steps
        (Nesterov momentum 0.9, --lr), print the losses as JSON and write the final weights.
        --dtype float64 runs the same steps in double precision.
    unet3d_peer.py bench --batch-size 2 --patch 128 --threads 2 --iters 5 [--filters ...]
        time forward+backward+SGD steps on random data; print JSON with ms/step and samples/s.
        --channels-last uses torch.channels_last_3d; --device cuda --amp bf16 on a GPU.

Run with Debian's /usr/bin/python3 (python3-torch), not a virtualenv python.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import amp_step  # noqa: E402
import weights  # noqa: E402


def conv_block(cin, cout, stride=1):
    return nn.Sequential(nn.Conv3d(cin, cout, 3, stride=stride, padding=1, bias=False),
                         nn.InstanceNorm3d(cout, affine=True), nn.ReLU())


class Double(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = conv_block(cin, cout, stride)
        self.conv2 = conv_block(cout, cout)

    def forward(self, x):
        return self.conv2(self.conv1(x))


class Up(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.upsample_conv = nn.Sequential(nn.ConvTranspose3d(cin, cout, 2, stride=2, bias=True))
        self.conv1 = conv_block(2 * cout, cout)
        self.conv2 = conv_block(cout, cout)

    def forward(self, x, skip):
        return self.conv2(self.conv1(torch.cat((self.upsample_conv(x), skip), dim=1)))


class Output(nn.Module):
    def __init__(self, cin, n_class):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv3d(cin, n_class, 1, bias=True))

    def forward(self, x):
        return self.conv(x)


class UNet3D(nn.Module):
    def __init__(self, filters=(32, 64, 128, 256, 320), n_class=3):
        super().__init__()
        self.input_block = Double(1, filters[0], 1)
        self.downsample = nn.ModuleList([Double(i, o, 2) for i, o in zip(filters[:-1], filters[1:])])
        self.bottleneck = Double(filters[-1], filters[-1], 2)
        ups = [Up(filters[-1], filters[-1])]
        ups += [Up(i, o) for i, o in zip(reversed(filters[1:]), reversed(filters[:-1]))]
        self.upsample = nn.ModuleList(ups)
        self.output = Output(filters[0], n_class)

    def forward(self, x):
        x = self.input_block(x)
        skips = [x]
        for d in self.downsample:
            x = d(x)
            skips.append(x)
        x = self.bottleneck(x)
        for up, skip in zip(self.upsample, reversed(skips)):
            x = up(x, skip)
        return self.output(x)


def dice_ce_loss(logits, labels, smooth=1e-6):
    """MLPerf's DiceCELoss for NCDHW logits and integer labels [N, D, H, W]."""
    n_class = logits.shape[1]
    probs = torch.softmax(logits, dim=1)
    onehot = F.one_hot(labels.long(), n_class).permute(0, 4, 1, 2, 3).to(probs.dtype)
    dims = (2, 3, 4)
    inter = (probs * onehot).sum(dims)
    dice = (2.0 * inter + smooth) / (onehot.sum(dims) + probs.sum(dims) + smooth)
    dice_loss = (1.0 - dice[:, 1:]).mean()
    return (dice_loss + F.cross_entropy(logits, labels.long())) / 2


def filters_of(args):
    return tuple(int(f) for f in args.filters.split(","))


def cmd_steps(args):
    torch.manual_seed(0)
    dtype = {"float32": torch.float32, "float64": torch.float64}[args.dtype]
    model = UNet3D(filters_of(args)).to(dtype)
    state = {k: v.to(dtype) for k, v in weights.to_torch(weights.load(args.weights)).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise SystemExit("weights mismatch: missing %s unexpected %s" % (missing, unexpected))
    batch = weights.to_torch(weights.load(args.batch))
    images, labels = batch["images"].to(dtype), batch["labels"]
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, nesterov=True)
    model.train()
    losses = []
    for _ in range(args.steps):
        opt.zero_grad()
        loss = dice_ce_loss(model(images), labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    weights.save(args.out, weights.from_torch(model.state_dict()))
    print(json.dumps({"dtype": args.dtype, "losses": losses}))


def cmd_bench(args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    fmt = torch.channels_last_3d if args.channels_last else torch.contiguous_format
    model = UNet3D(filters_of(args)).to(device=device, memory_format=fmt)
    p = args.patch
    x = torch.randn(args.batch_size, 1, p, p, p, device=device).to(memory_format=fmt)
    y = torch.randint(0, 3, (args.batch_size, p, p, p), device=device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    model.train()
    step = amp_step.make(opt, lambda: dice_ce_loss(model(x).float(), y), device.type, args.amp)

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(args.warmup):
        step()
    sync()
    times = []
    for _ in range(args.iters):
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    times.sort()
    median = times[len(times) // 2]
    out = {"peer": "pytorch %s" % torch.__version__, "threads": torch.get_num_threads(),
           "batch_size": args.batch_size, "patch": p, "filters": args.filters,
           "channels_last": args.channels_last, "device": str(device), "amp": args.amp,
           "ms_per_step": median * 1e3, "samples_per_second": args.batch_size / median}
    if device.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(device)
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("steps")
    s.add_argument("--weights", required=True)
    s.add_argument("--batch", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--steps", type=int, default=3)
    s.add_argument("--lr", type=float, default=0.1)
    s.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    s.add_argument("--filters", default="32,64,128,256,320")
    b = sub.add_parser("bench")
    b.add_argument("--batch-size", type=int, default=2)
    b.add_argument("--patch", type=int, default=128)
    b.add_argument("--threads", type=int, default=2)
    b.add_argument("--iters", type=int, default=5)
    b.add_argument("--warmup", type=int, default=2)
    b.add_argument("--filters", default="32,64,128,256,320")
    b.add_argument("--channels-last", action="store_true")
    b.add_argument("--device", default="cpu")
    b.add_argument("--amp", default="none", choices=["none", "bf16", "fp16"])
    args = ap.parse_args()
    {"steps": cmd_steps, "bench": cmd_bench}[args.cmd](args)


if __name__ == "__main__":
    main()
