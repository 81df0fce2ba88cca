#!/usr/bin/python3
"""torchvision peer of Mask R-CNN's SDK ops (sdk/include/benchhost/nn/detection.hpp, the Mask R-CNN
section), run by tests/nn_ops/maskrcnn_ops_test.cpp: it reads the test's inputs from a folder, runs
torchvision's and PyTorch's own functions on them and writes the results back.

    maskrcnn_peer.py MODE DIR

DIR holds meta.json (shapes and scalars) and raw little-endian arrays NAME.bin (float32 or int64,
named in meta.json); outputs are written to DIR as raw arrays too. Modes:
    roi_align   for each of meta's cases i: torchvision.ops.roi_align(features, rois, output_size,
                spatial_scale, sampling_ratio, aligned) on NCHW features, and its gradient for
                dout_i by autograd                                      -> out_i, dfeatures_i
    multiscale  torchvision.ops.MultiScaleRoIAlign(levels, output_size, sampling_ratio) on
                features_0..features_{L-1} with per-image boxes (rois' batch column) and image
                sizes from meta; its LevelMapper's levels (no +1 area, eps after the log2) and
                its output and input gradients for `dout`     -> levels, out, dfeatures_<l>
    legacy_levels  maskrcnn_benchmark's LevelMapper (poolers.py) written as there, in torch:
                floor(lvl0 + log2(sqrt(area with +1) / s0 + eps)), clamped, minus k_min -> levels
    legacy_coder  maskrcnn_benchmark's BoxCoder (TO_REMOVE = 1) encode(gt, ref) and decode(deltas,
                ref), written as there in torch                                -> enc, dec
    nms         torchvision.ops.nms(boxes + [0, 0, 1, 1], scores, threshold): the reference's +1
                NMS through torchvision                                        -> keep
    paste       torchvision.models.detection.roi_heads.paste_masks_in_image(masks, boxes, image
                size, padding=1): the probabilities before the 0.5 threshold   -> pasted
    losses      for each of meta's betas i: maskrcnn_benchmark's smooth_l1_loss
                (layers/smooth_l1_loss.py, as there) and torch.nn.functional.smooth_l1_loss(
                reduction="sum", beta), times scale; the mask loss
                F.binary_cross_entropy_with_logits(logits[arange(R), labels], targets); gradients
                by autograd          -> smooth_i, smooth_torch_i, dsmooth_i, mask, dmask

torchvision's box conventions differ from the reference's in the level mapper only: its box area
has no +1 and its eps is added after the log2 (the multiscale mode), so the test compares our
mapper with legacy = false to it, and the legacy mapper with legacy_levels. roi_align(aligned=False)
is the legacy ROIAlign exactly.

Run with Debian's /usr/bin/python3 (python3-torch, python3-torchvision).
"""

import json
import math
import os
import sys
from collections import OrderedDict

import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from torchvision.ops import MultiScaleRoIAlign, roi_align


def load(d, meta, name, dtype=np.float32):
    shape = meta["shapes"][name]
    return torch.from_numpy(np.fromfile(os.path.join(d, name + ".bin"), dtype=dtype).reshape(shape).copy())


def save(d, name, t):
    a = t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    if a.dtype in (np.float64, np.float32):
        a = a.astype(np.float32)
    elif a.dtype != np.int64:
        a = a.astype(np.int64)
    a.tofile(os.path.join(d, name + ".bin"))


def mode_roi_align(d, meta):
    for i, case in enumerate(meta["cases"]):
        feats = load(d, meta, "features").requires_grad_(True)
        rois = load(d, meta, "rois")
        out = roi_align(feats, rois, output_size=(case["pooled"], case["pooled"]), spatial_scale=case["scale"],
                        sampling_ratio=case["sampling_ratio"], aligned=case["aligned"])
        out.backward(load(d, meta, f"dout_{i}"))
        save(d, f"out_{i}", out)
        save(d, f"dfeatures_{i}", feats.grad)


def mode_multiscale(d, meta):
    levels = meta["levels"]
    names = [f"p{l}" for l in range(levels)]
    feats = OrderedDict((names[l], load(d, meta, f"features_{l}").requires_grad_(True)) for l in range(levels))
    rois = load(d, meta, "rois")
    images = [tuple(s) for s in meta["image_sizes"]]
    boxes = [rois[rois[:, 0] == b, 1:] for b in range(len(images))]
    pooler = MultiScaleRoIAlign(names, output_size=(meta["pooled_h"], meta["pooled_w"]),
                                sampling_ratio=meta["sampling_ratio"])
    out = pooler(feats, boxes, images)
    # The level of each RoI, in the concatenated order: torchvision's own mapper after setup.
    lv = pooler.map_levels(boxes)
    out.backward(load(d, meta, "dout"))
    save(d, "levels", lv.to(torch.int64))
    save(d, "out", out)
    save(d, "scales", torch.tensor(pooler.scales, dtype=torch.float32))
    for l in range(levels):
        save(d, f"dfeatures_{l}", feats[names[l]].grad)


def mode_legacy_levels(d, meta):
    rois = load(d, meta, "rois")
    k_min, k_max, s0, lvl0, eps = meta["k_min"], meta["k_max"], meta["canonical_scale"], meta["canonical_level"], meta["eps"]
    # maskrcnn_benchmark BoxList.area() for xyxy: (x2 - x1 + TO_REMOVE) * (y2 - y1 + TO_REMOVE), TO_REMOVE = 1
    box = rois[:, 1:]
    area = (box[:, 2] - box[:, 0] + 1) * (box[:, 3] - box[:, 1] + 1)
    s = torch.sqrt(area)
    target = torch.floor(lvl0 + torch.log2(s / s0 + eps))
    target = torch.clamp(target, min=k_min, max=k_max)
    save(d, "levels", target.to(torch.int64) - k_min)


def smooth_l1_reference(inp, target, beta, size_average=True):
    # maskrcnn_benchmark/layers/smooth_l1_loss.py
    n = torch.abs(inp - target)
    cond = n < beta
    loss = torch.where(cond, 0.5 * n ** 2 / beta, n - 0.5 * beta)
    if size_average:
        return loss.mean()
    return loss.sum()


def mode_losses(d, meta):
    for i, beta in enumerate(meta["betas"]):
        scale = meta["scale"]
        x = load(d, meta, "input").requires_grad_(True)
        t = load(d, meta, "target")
        loss = smooth_l1_reference(x, t, beta, size_average=False) * scale
        loss.backward()
        save(d, f"smooth_{i}", loss.reshape(1))
        save(d, f"dsmooth_{i}", x.grad)
        save(d, f"smooth_torch_{i}", (F.smooth_l1_loss(x.detach(), t, reduction="sum", beta=beta) * scale).reshape(1))
    z = load(d, meta, "logits").requires_grad_(True)
    labels = load(d, meta, "labels", np.int64)
    targets = load(d, meta, "targets")
    r = torch.arange(labels.numel())
    mask = F.binary_cross_entropy_with_logits(z[r, labels], targets)
    mask.backward()
    save(d, "mask", mask.reshape(1))
    save(d, "dmask", z.grad)


def mode_nms(d, meta):
    # torchvision's nms has no +1: widening every box by one pixel gives the reference's +1 areas.
    boxes, scores = load(d, meta, "boxes"), load(d, meta, "scores")
    widened = boxes + torch.tensor([0.0, 0.0, 1.0, 1.0])
    save(d, "keep", torchvision.ops.nms(widened, scores, meta["threshold"]))


def mode_paste(d, meta):
    from torchvision.models.detection.roi_heads import paste_masks_in_image
    masks, boxes = load(d, meta, "masks"), load(d, meta, "boxes")
    pasted = paste_masks_in_image(masks[:, None], boxes, (meta["image_h"], meta["image_w"]), padding=1)
    save(d, "pasted", pasted[:, 0])


def mode_legacy_coder(d, meta):
    # maskrcnn_benchmark/modeling/box_coder.py BoxCoder.encode / decode, as there (TO_REMOVE = 1).
    wx, wy, ww, wh = meta["weights"]
    clip = math.log(1000.0 / 16)
    gt, ref, rel = load(d, meta, "gt"), load(d, meta, "ref"), load(d, meta, "deltas")
    TO_REMOVE = 1
    ex_w = ref[:, 2] - ref[:, 0] + TO_REMOVE
    ex_h = ref[:, 3] - ref[:, 1] + TO_REMOVE
    ex_x = ref[:, 0] + 0.5 * ex_w
    ex_y = ref[:, 1] + 0.5 * ex_h
    gt_w = gt[:, 2] - gt[:, 0] + TO_REMOVE
    gt_h = gt[:, 3] - gt[:, 1] + TO_REMOVE
    gt_x = gt[:, 0] + 0.5 * gt_w
    gt_y = gt[:, 1] + 0.5 * gt_h
    enc = torch.stack((wx * (gt_x - ex_x) / ex_w, wy * (gt_y - ex_y) / ex_h,
                       ww * torch.log(gt_w / ex_w), wh * torch.log(gt_h / ex_h)), dim=1)
    save(d, "enc", enc)
    dx, dy = rel[:, 0::4] / wx, rel[:, 1::4] / wy
    dw = torch.clamp(rel[:, 2::4] / ww, max=clip)
    dh = torch.clamp(rel[:, 3::4] / wh, max=clip)
    px = dx * ex_w[:, None] + ex_x[:, None]
    py = dy * ex_h[:, None] + ex_y[:, None]
    pw = torch.exp(dw) * ex_w[:, None]
    ph = torch.exp(dh) * ex_h[:, None]
    dec = torch.cat((px - 0.5 * pw, py - 0.5 * ph, px + 0.5 * pw - 1, py + 0.5 * ph - 1), dim=1)
    save(d, "dec", dec)


MODES = {"legacy_coder": mode_legacy_coder, "nms": mode_nms, "paste": mode_paste, "roi_align": mode_roi_align, "multiscale": mode_multiscale, "legacy_levels": mode_legacy_levels,
         "losses": mode_losses}


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in MODES:
        sys.exit(f"usage: maskrcnn_peer.py {{{'|'.join(MODES)}}} DIR")
    d = sys.argv[2]
    with open(os.path.join(d, "meta.json")) as f:
        meta = json.load(f)
    torch.set_num_threads(1)
    MODES[sys.argv[1]](d, meta)


if __name__ == "__main__":
    main()
