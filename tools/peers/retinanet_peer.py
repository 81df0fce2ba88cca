#!/usr/bin/python3
"""PyTorch peer of the RetinaNet model (plugins/retinanet/model.hpp): torchvision 0.14's pieces
assembled as the MLPerf reference assembles them, for the forward comparison test
(tests/retinanet/model_test.cpp).

    retinanet_peer.py forward --weights W.bhw --images X.bhw --out O.bhw [model options]
        load a benchhost weights file (torchvision RetinaNet state_dict names: backbone.body.*,
        backbone.fpn.*, head.*) with load_state_dict(strict=True), run the images ("images",
        NCHW f32) through backbone + FPN + head in eval mode, and write per level l (P3..P7)
        "cls_logits.l" [N, H*W*A, K] and "bbox_regression.l" [N, H*W*A, 4] in torchvision's
        (y, x, anchor) order, and "grid.l" (i64 [2]: H, W).
    retinanet_peer.py backward --weights W.bhw --images X.bhw --grads G.bhw --out O.bhw [options]
        the same forward, then autograd from the output gradients in G ("cls_logits.l",
        "bbox_regression.l"); writes the gradient of every trainable parameter under its name
        (frozen ones, requires_grad False per --trainable-layers, are absent).
    retinanet_peer.py macs --size H,W [model options]
        multiply-accumulates of every convolution for one H x W image (forward hooks), as JSON.
    retinanet_peer.py count [model options]
        print the parameter counts (all, trainable with trainable_layers) as JSON.
    retinanet_peer.py steps --weights W.bhw --batch B.bhw --out O.bhw --steps N --lr L
                            --warmup-factor F --warmup-iters W --anchor-scale S [model options]
        training steps as the MLPerf reference takes them, on one fixed batch ("images" NCHW f32,
        "boxes" [N, M, 4] xyxy pixels, "labels" i64 [N, M], "num_boxes" i64 [N]): torchvision's
        AnchorGenerator (sizes x S), Matcher(0.5, 0.4, low-quality matches) and
        RetinaNetHead.compute_loss, backward, torch.optim.Adam over the trainable parameters with
        the reference's warmup_lr_scheduler factor; prints JSON {"losses": [[cls, box], ...]}
        and writes every parameter after the last step to O.bhw. --device cuda runs it there.
    retinanet_peer.py bench --batch-size B --image-size S --anchor-scale F --iters N [model options]
        time training steps as benchhost's `--mode train --synthetic` runs them: random images,
        the same four boxes per image, torchvision's AnchorGenerator (sizes x F), Matcher and
        RetinaNetHead.compute_loss (focal + L1), backward, Adam; print JSON with ms/step.
        --device cuda times it on the GPU (synchronised), --amp bf16 under autocast.

Model options: --blocks 3,4,6,3 --groups 32 --width-per-group 4 --stem-channels 64
--fpn-channels 256 --num-classes 264 --num-anchors 9 --head-convs 4 --trainable-layers 3.

The body is torchvision's resnext50_32x4d (norm_layer=FrozenBatchNorm2d) for the reference
configuration; a scaled configuration builds the same structure by hand from torchvision's
Bottleneck (planes stem * 2^s, base_width chosen so that the grouped width is
width_per_group * groups * 2^s). The FPN is torchvision's BackboneWithFPN over layer2..4 with
LastLevelP6P7(F, F) (P6 from P5), the head RetinaNetHead, its towers rebuilt with
Conv2dNormActivation when head_convs is not 4.

Run with Debian's /usr/bin/python3 (python3-torch, python3-torchvision).
"""

import argparse
import json
import os
import sys

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import amp_step  # noqa: E402
import weights  # noqa: E402

from torchvision.models import resnext50_32x4d  # noqa: E402
from torchvision.models.detection.backbone_utils import BackboneWithFPN  # noqa: E402
from torchvision.models.detection.retinanet import RetinaNetHead  # noqa: E402
from torchvision.models.resnet import Bottleneck  # noqa: E402
from torchvision.ops.feature_pyramid_network import LastLevelP6P7  # noqa: E402
from torchvision.ops.misc import Conv2dNormActivation, FrozenBatchNorm2d  # noqa: E402
from torchvision.ops.boxes import box_iou  # noqa: E402


class ScaledResNeXt(nn.Module):
    """torchvision's ResNet structure and names with a chosen stem width and group width."""

    def __init__(self, blocks, groups, width_per_group, stem):
        super().__init__()
        self.conv1 = nn.Conv2d(3, stem, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = FrozenBatchNorm2d(stem)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        base_width = 64.0 * width_per_group / stem
        inplanes = stem
        for s, n in enumerate(blocks):
            planes = stem << s
            stride = 1 if s == 0 else 2
            layers = []
            for b in range(n):
                st = stride if b == 0 else 1
                downsample = None
                if st != 1 or inplanes != planes * 4:
                    downsample = nn.Sequential(nn.Conv2d(inplanes, planes * 4, 1, stride=st, bias=False),
                                               FrozenBatchNorm2d(planes * 4))
                block = Bottleneck(inplanes, planes, st, downsample, groups, base_width, 1, FrozenBatchNorm2d)
                assert block.conv2.out_channels == (width_per_group * groups) << s, "grouped width"
                layers.append(block)
                inplanes = planes * 4
            setattr(self, f"layer{s + 1}", nn.Sequential(*layers))


class RetinaNetPieces(nn.Module):
    def __init__(self, a):
        super().__init__()
        blocks = [int(b) for b in a.blocks.split(",")]
        reference = (blocks == [3, 4, 6, 3] and a.groups == 32 and a.width_per_group == 4
                     and a.stem_channels == 64)
        if reference:
            body = resnext50_32x4d(weights=None, norm_layer=FrozenBatchNorm2d)
        else:
            body = ScaledResNeXt(blocks, a.groups, a.width_per_group, a.stem_channels)
        F = a.fpn_channels
        in_list = [(a.stem_channels << s) * 4 for s in (1, 2, 3)]
        self.backbone = BackboneWithFPN(body, {"layer2": "0", "layer3": "1", "layer4": "2"}, in_list, F,
                                        extra_blocks=LastLevelP6P7(F, F))
        self.head = RetinaNetHead(F, a.num_anchors, a.num_classes)
        if a.head_convs != 4:
            for h in (self.head.classification_head, self.head.regression_head):
                h.conv = nn.Sequential(*[Conv2dNormActivation(F, F, norm_layer=None) for _ in range(a.head_convs)])
        # Freeze as torchvision's _resnet_fpn_extractor does.
        train = ["layer4", "layer3", "layer2", "layer1", "conv1"][:a.trainable_layers]
        for name, p in self.backbone.body.named_parameters():
            if all(not name.startswith(t) for t in train):
                p.requires_grad_(False)

    def forward(self, images):
        feats = list(self.backbone(images).values())
        out = {}
        for l, f in enumerate(feats):
            out[f"cls_logits.{l}"] = self.head.classification_head([f])
            out[f"bbox_regression.{l}"] = self.head.regression_head([f])
            out[f"grid.{l}"] = torch.tensor([f.shape[-2], f.shape[-1]], dtype=torch.int64)
        return out


def cmd_forward(a):
    model = RetinaNetPieces(a)
    state = weights.to_torch(weights.load(a.weights))
    model.load_state_dict(state, strict=True)
    model.eval()
    images = torch.from_numpy(np.array(weights.load(a.images)["images"])).float()
    with torch.no_grad():
        out = model(images)
    weights.save(a.out, weights.from_torch(out))


def cmd_backward(a):
    model = RetinaNetPieces(a)
    model.load_state_dict(weights.to_torch(weights.load(a.weights)), strict=True)
    model.train()
    images = torch.from_numpy(np.array(weights.load(a.images)["images"])).float()
    grads = weights.to_torch(weights.load(a.grads))
    out = model(images)
    loss = sum((out[name] * g).sum() for name, g in grads.items())
    loss.backward()
    weights.save(a.out, weights.from_torch(
        {n: p.grad for n, p in model.named_parameters() if p.requires_grad and p.grad is not None}))


def cmd_macs(a):
    model = RetinaNetPieces(a).eval()
    total = [0]

    def hook(mod, inp, out):
        k = mod.kernel_size[0] * mod.kernel_size[1]
        total[0] += out.numel() * (mod.in_channels // mod.groups) * k

    for mod in model.modules():
        if isinstance(mod, nn.Conv2d):
            mod.register_forward_hook(hook)
    h, w = (int(v) for v in a.size.split(","))
    with torch.no_grad():
        model(torch.zeros(1, 3, h, w))
    print(json.dumps({"macs": total[0]}))


def cmd_count(a):
    model = RetinaNetPieces(a)
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(json.dumps({"parameters": total, "trainable": trainable}))


def anchor_generator(anchor_scale):
    from torchvision.models.detection.anchor_utils import AnchorGenerator
    sizes = tuple(tuple(int(x * 2 ** (i / 3.0)) * anchor_scale for i in range(3)) for x in [32, 64, 128, 256, 512])
    return AnchorGenerator(sizes, ((0.5, 1.0, 2.0),) * 5)


def detection_loss(model, out, images, targets, gen, matcher):
    """RetinaNet.compute_loss on the peer's per-level outputs: anchors for the batch's image size,
    matching per image (no boxes: every anchor background), focal + L1 from the head."""
    from torchvision.models.detection.image_list import ImageList
    b, s_h, s_w = images.shape[0], images.shape[-2], images.shape[-1]
    head = {"cls_logits": torch.cat([out[f"cls_logits.{l}"] for l in range(5)], 1),
            "bbox_regression": torch.cat([out[f"bbox_regression.{l}"] for l in range(5)], 1)}
    fmaps = [torch.empty(1, 1, int(out[f"grid.{l}"][0]), int(out[f"grid.{l}"][1]), device=images.device)
             for l in range(5)]
    anchors = gen(ImageList(images, [(s_h, s_w)] * b), fmaps)
    matched = []
    for t, an in zip(targets, anchors):
        if t["boxes"].numel() == 0:
            matched.append(torch.full((an.size(0),), -1, dtype=torch.int64, device=an.device))
        else:
            matched.append(matcher(box_iou(t["boxes"], an)))
    return model.head.compute_loss(targets, head, anchors, matched)


def cmd_steps(a):
    from torchvision.models.detection import _utils as det_utils
    dev = torch.device(a.device)
    model = RetinaNetPieces(a)
    model.load_state_dict(weights.to_torch(weights.load(a.weights)), strict=True)
    model.to(dev).train()
    batch = weights.to_torch(weights.load(a.batch))
    images = batch["images"].float().to(dev)
    targets = []
    for i in range(images.shape[0]):
        g = int(batch["num_boxes"][i])
        targets.append({"boxes": batch["boxes"][i, :g].float().to(dev), "labels": batch["labels"][i, :g].long().to(dev)})
    gen = anchor_generator(a.anchor_scale)
    matcher = det_utils.Matcher(0.5, 0.4, allow_low_quality_matches=True)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=a.lr)
    losses = []
    for k in range(a.steps):
        # The reference's warmup_lr_scheduler: lr * (f * (1 - x / W) + x / W) for update x < W.
        x = k / a.warmup_iters if a.warmup_iters > 0 else 1.0
        factor = a.warmup_factor * (1 - x) + x if k < a.warmup_iters else 1.0
        for group in opt.param_groups:
            group["lr"] = a.lr * factor
        opt.zero_grad(set_to_none=True)
        parts = detection_loss(model, model(images), images, targets, gen, matcher)
        sum(parts.values()).backward()
        opt.step()
        losses.append([float(parts["classification"]), float(parts["bbox_regression"])])
    weights.save(a.out, weights.from_torch({n: p.detach().cpu() for n, p in model.named_parameters()}))
    print(json.dumps({"peer": "torchvision %s" % torchvision_version(), "losses": losses}))


def torchvision_version():
    import torchvision
    return torchvision.__version__


def cmd_bench(a):
    import time
    from torchvision.models.detection import _utils as det_utils
    torch.manual_seed(0)
    dev = torch.device(a.device)
    model = RetinaNetPieces(a).to(dev)
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
    model.train()
    b, s, k = a.batch_size, a.image_size, a.num_classes
    gen = anchor_generator(a.anchor_scale)
    images = (torch.rand(b, 3, s, s) * 4 - 2).to(dev)
    if a.channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    targets = []
    for i in range(b):
        boxes = []
        for j in range(4):
            x, y = s * (0.05 + 0.2 * j), s * (0.1 + 0.03 * (i % 8))
            boxes.append([x, y, x + s * (0.1 + 0.05 * j), y + s * 0.3])
        targets.append({"boxes": torch.tensor(boxes, device=dev), "labels": (torch.arange(4) % k).to(dev)})
    matcher = det_utils.Matcher(0.5, 0.4, allow_low_quality_matches=True)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-4)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    step = amp_step.make(opt, lambda: sum(detection_loss(model, model(images), images, targets, gen, matcher).values()),
                         dev.type, a.amp)

    for _ in range(a.warmup):
        step()
    sync()
    times = []
    for _ in range(a.iters):
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    print(json.dumps({"peer": "pytorch %s" % torch.__version__, "device": str(dev), "amp": a.amp,
                      "threads": torch.get_num_threads(), "batch_size": b, "image_size": s,
                      "ms_per_step": med * 1e3, "images_per_second": b / med}))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["forward", "backward", "macs", "count", "steps", "bench"])
    ap.add_argument("--batch-size", type=int, default=2)
    ap.add_argument("--image-size", type=int, default=320)
    ap.add_argument("--anchor-scale", type=float, default=1.0)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--size", default="800,800")
    ap.add_argument("--grads")
    ap.add_argument("--weights")
    ap.add_argument("--images")
    ap.add_argument("--out")
    ap.add_argument("--blocks", default="3,4,6,3")
    ap.add_argument("--groups", type=int, default=32)
    ap.add_argument("--width-per-group", type=int, default=4)
    ap.add_argument("--stem-channels", type=int, default=64)
    ap.add_argument("--fpn-channels", type=int, default=256)
    ap.add_argument("--num-classes", type=int, default=264)
    ap.add_argument("--num-anchors", type=int, default=9)
    ap.add_argument("--head-convs", type=int, default=4)
    ap.add_argument("--trainable-layers", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--batch")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--warmup-factor", type=float, default=1e-3)
    ap.add_argument("--warmup-iters", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--amp", choices=["none", "bf16", "fp16"], default="none")
    ap.add_argument("--channels-last", action="store_true")
    a = ap.parse_args(argv)
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    if a.command == "forward":
        if not (a.weights and a.images and a.out):
            ap.error("forward needs --weights, --images and --out")
        cmd_forward(a)
    elif a.command == "backward":
        if not (a.weights and a.images and a.grads and a.out):
            ap.error("backward needs --weights, --images, --grads and --out")
        cmd_backward(a)
    elif a.command == "macs":
        cmd_macs(a)
    elif a.command == "steps":
        if not (a.weights and a.batch and a.out):
            ap.error("steps needs --weights, --batch and --out")
        cmd_steps(a)
    elif a.command == "bench":
        cmd_bench(a)
    else:
        cmd_count(a)


if __name__ == "__main__":
    main(sys.argv[1:])
