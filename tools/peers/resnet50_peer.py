#!/usr/bin/python3
"""PyTorch peer of the resnet50 plugin: the same ResNet v1.5 in eager PyTorch, for the step
comparison test (tests/resnet50/peer_test.cpp) and the side-by-side benchmark
(tools/bench_resnet50.sh).

The model is torchvision's resnet50 when torchvision is importable (and the shape is the
standard one); otherwise, and for the scaled mini variants, a definition here with the same
structure and the same parameter names (conv1, bn1, layer1.0.conv1, ..., layer1.0.downsample.0,
fc), so benchhost weight files load into either with load_state_dict.

    resnet50_peer.py steps --weights W.bhw --batch B.bhw --out OUT.bhw --steps 3 [model options]
        load weights and a batch ("images" NCHW f32, "labels" i64), run SGD steps (momentum,
        weight decay on conv/fc weights only, label smoothing), print the losses as JSON and
        write the final weights and running statistics to OUT. --dtype float64 runs the same
        steps in double precision (the reference for judging fp32 runs).
    resnet50_peer.py bench --batch-size 8 --image-size 224 --threads 2 --iters 5 [model options]
        time forward+backward+SGD steps on random data; print JSON with ms/step and img/s.
        On a GPU, the comparison the resnet50 issue names: --device cuda --channels-last
        --amp bf16 (or fp16) --batch-size 256.
    resnet50_peer.py block --batch-size 8 --threads 2 ...
        time one ResNet bottleneck block forward+backward (the SDK block comparison).
Model options: --blocks 3,4,6,3 --base-width 64 --num-classes 1000 --in-channels 3
--small-stem --channels-last.

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


class Bottleneck(nn.Module):
    """ResNet v1.5 bottleneck: the stride sits on the 3x3 convolution."""

    def __init__(self, in_ch, width, stride, expansion=4):
        super().__init__()
        out_ch = width * expansion
        self.conv1 = nn.Conv2d(in_ch, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_ch, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_ch)
        self.downsample = None
        if stride != 1 or in_ch != out_ch:
            self.downsample = nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False),
                                            nn.BatchNorm2d(out_ch))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        identity = x if self.downsample is None else self.downsample(x)
        return F.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, blocks=(3, 4, 6, 3), base_width=64, num_classes=1000, in_channels=3,
                 small_stem=False):
        super().__init__()
        if small_stem:
            self.conv1 = nn.Conv2d(in_channels, base_width, 3, stride=1, padding=1, bias=False)
            self.maxpool = nn.Identity()
        else:
            self.conv1 = nn.Conv2d(in_channels, base_width, 7, stride=2, padding=3, bias=False)
            self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.bn1 = nn.BatchNorm2d(base_width)
        in_ch = base_width
        for s, n in enumerate(blocks):
            width = base_width << s
            layer = []
            for b in range(n):
                layer.append(Bottleneck(in_ch, width, 2 if (s > 0 and b == 0) else 1))
                in_ch = width * 4
            setattr(self, "layer%d" % (s + 1), nn.Sequential(*layer))
        self.num_stages = len(blocks)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_ch, num_classes)

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        for s in range(self.num_stages):
            x = getattr(self, "layer%d" % (s + 1))(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def build(args):
    blocks = tuple(int(b) for b in args.blocks.split(","))
    standard = (blocks == (3, 4, 6, 3) and args.base_width == 64 and args.in_channels == 3
                and not args.small_stem)
    if standard and not args.no_torchvision:
        try:
            import torchvision
            return torchvision.models.resnet50(num_classes=args.num_classes), "torchvision"
        except ImportError:
            pass
    return ResNet(blocks, args.base_width, args.num_classes, args.in_channels,
                  args.small_stem), "resnet50_peer.py"


def sgd(model, args):
    decay = [p for n, p in model.named_parameters() if p.dim() > 1]
    no_decay = [p for n, p in model.named_parameters() if p.dim() <= 1]
    return torch.optim.SGD([{"params": decay, "weight_decay": args.weight_decay},
                            {"params": no_decay, "weight_decay": 0.0}],
                           lr=args.lr, momentum=args.momentum)


def cmd_steps(args):
    torch.manual_seed(0)
    dtype = {"float32": torch.float32, "float64": torch.float64}[args.dtype]
    model, source = build(args)
    model = model.to(dtype)
    state = {k: (v.to(dtype) if v.is_floating_point() else v)
             for k, v in weights.to_torch(weights.load(args.weights)).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if not m.endswith("num_batches_tracked")]
    if missing or unexpected:
        raise SystemExit("weights mismatch: missing %s unexpected %s" % (missing, unexpected))
    batch = weights.to_torch(weights.load(args.batch))
    images, labels = batch["images"].to(dtype), batch["labels"].long()
    opt = sgd(model, args)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    model.train()
    losses = []
    for _ in range(args.steps):
        opt.zero_grad()
        loss = loss_fn(model(images), labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    out = {k: v for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    weights.save(args.out, weights.from_torch(out))
    print(json.dumps({"model": source, "dtype": args.dtype, "losses": losses}))


def timed(fn, warmup, iters, sync=lambda: None):
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def cmd_bench(args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    model, source = build(args)
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to(device=device, memory_format=fmt)
    x = torch.randn(args.batch_size, args.in_channels, args.image_size, args.image_size, device=device)
    x = x.to(memory_format=fmt)
    y = torch.randint(0, args.num_classes, (args.batch_size,), device=device)
    opt = sgd(model, args)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    model.train()
    # Mixed precision the usual PyTorch way: autocast for the forward pass, fp32 master weights,
    # a GradScaler for fp16 (bf16 needs none).
    step = amp_step.make(opt, lambda: loss_fn(model(x), y), device.type, args.amp)

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    median = timed(step, args.warmup, args.iters, sync)
    out = {"peer": "pytorch %s (%s)" % (torch.__version__, source),
           "threads": torch.get_num_threads(), "batch_size": args.batch_size,
           "image_size": args.image_size, "channels_last": args.channels_last,
           "device": str(device), "amp": args.amp,
           "ms_per_step": median * 1e3, "images_per_second": args.batch_size / median}
    if device.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(device)
    print(json.dumps(out))


def cmd_block(args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    block = Bottleneck(args.block_in, args.block_width, args.block_stride).to(memory_format=fmt)
    x = torch.randn(args.batch_size, args.block_in, args.image_size, args.image_size)
    x = x.to(memory_format=fmt).requires_grad_(True)
    block.train()
    dy = None

    def step():
        nonlocal dy
        for p in block.parameters():
            p.grad = None
        x.grad = None
        out = block(x)
        if dy is None:
            dy = torch.randn_like(out)
        out.backward(dy)

    median = timed(step, args.warmup, args.iters)
    print(json.dumps({"peer": "pytorch %s" % torch.__version__, "threads": torch.get_num_threads(),
                      "batch_size": args.batch_size, "ms_per_step": median * 1e3}))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["steps", "bench", "block"])
    p.add_argument("--blocks", default="3,4,6,3")
    p.add_argument("--base-width", type=int, default=64)
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--in-channels", type=int, default=3)
    p.add_argument("--small-stem", action="store_true")
    p.add_argument("--no-torchvision", action="store_true", help="always use the definition here")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--weights")
    p.add_argument("--batch")
    p.add_argument("--out")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                   help="steps: float64 gives the reference that fp32 runs are judged against")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=5e-5)
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--device", default="cpu", help="bench: cpu or cuda[:N]")
    p.add_argument("--amp", choices=["none", "bf16", "fp16"], default="none",
                   help="bench: autocast mixed precision (fp16 with a GradScaler)")
    p.add_argument("--block-in", type=int, default=256)
    p.add_argument("--block-width", type=int, default=64)
    p.add_argument("--block-stride", type=int, default=1)
    args = p.parse_args()
    {"steps": cmd_steps, "bench": cmd_bench, "block": cmd_block}[args.command](args)


if __name__ == "__main__":
    main()
