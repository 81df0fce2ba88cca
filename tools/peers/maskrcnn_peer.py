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
    model       the whole Mask R-CNN R-50-FPN of plugins/maskrcnn/model.hpp written in torch as
                maskrcnn_benchmark builds it (FrozenBatchNorm2d without epsilon, STRIDE_IN_1X1
                bottlenecks, FPN with LastLevelMaxPool, RPNHead, the legacy level mapper with
                roi_align(aligned=False) per level, FPN2MLPFeatureExtractor + FPNPredictor,
                MaskRCNNFPNFeatureExtractor + MaskRCNNC4Predictor), sizes from meta["config"];
                loads weights.bhw (our state_dict names, strict), runs inputs.bhw's "images" and the
                heads on "box_rois" / "mask_rois", back-propagates the output gradients "g.*" and
                writes out.bhw: "obj.<l>", "del.<l>", "cls", "box", "mask" and "grad.<name>" of
                every trainable parameter (freeze_at as FREEZE_CONV_BODY_AT)
    losses      for each of meta's betas i: maskrcnn_benchmark's smooth_l1_loss
                (layers/smooth_l1_loss.py, as there) and torch.nn.functional.smooth_l1_loss(
                reduction="sum", beta), times scale; the mask loss
                F.binary_cross_entropy_with_logits(logits[arange(R), labels], targets); gradients
                by autograd          -> smooth_i, smooth_torch_i, dsmooth_i, mask, dmask

    maskrcnn_peer.py bench --batch-size B --image-size S [--threads T --iters N --warmup W --config JSON
                       --device cuda]
                time training steps of torchvision 0.14's MaskRCNN (GeneralizedRCNN: its
                AnchorGenerator, RPN with losses and proposals, RoIHeads with MultiScaleRoIAlign,
                TwoMLPHead, mask head and losses) around the body and FPN of mode "model", at the
                sizes of --config (the JSON of meta["config"] plus anchor_scale and the RPN/RoI
                counts), on random S x S images with the same four boxes (rectangle masks) per
                image, SGD; prints JSON with ms/step (what `benchhost --mode train --synthetic`
                runs). torchvision's ResNet puts the stride in the 3x3 and its box coder has no
                +1; the body here is ours (stride in the 1x1), so only those conventions differ.

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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import amp_step  # noqa: E402
import weights  # noqa: E402
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


# ---- the whole model (mode "model") ----

class FrozenBN(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        for name, value in (("weight", 1.0), ("bias", 0.0), ("running_mean", 0.0), ("running_var", 1.0)):
            self.register_buffer(name, torch.full((n,), value))

    def forward(self, x):
        scale = self.weight * self.running_var.rsqrt()  # maskrcnn_benchmark: no epsilon
        bias = self.bias - self.running_mean * scale
        return x * scale.reshape(1, -1, 1, 1) + bias.reshape(1, -1, 1, 1)


class Block(torch.nn.Module):
    def __init__(self, cin, width, cout, stride):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(cin, width, 1, stride, bias=False)  # STRIDE_IN_1X1
        self.bn1 = FrozenBN(width)
        self.conv2 = torch.nn.Conv2d(width, width, 3, 1, 1, bias=False)
        self.bn2 = FrozenBN(width)
        self.conv3 = torch.nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = FrozenBN(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = torch.nn.Sequential(torch.nn.Conv2d(cin, cout, 1, stride, bias=False), FrozenBN(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (self.downsample(x) if self.downsample is not None else x))


class MaskRcnnPeer(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        st, F_ = c["stem_channels"], c["fpn_channels"]
        body = torch.nn.Module()
        body.stem = torch.nn.Module()
        body.stem.conv1 = torch.nn.Conv2d(3, st, 7, 2, 3, bias=False)
        body.stem.bn1 = FrozenBN(st)
        cin = st
        for s_, n in enumerate(c["blocks"]):
            blocks = [Block(cin if b == 0 else st * 4 << s_, st << s_, st * 4 << s_, 2 if (s_ > 0 and b == 0) else 1)
                      for b in range(n)]
            setattr(body, f"layer{s_ + 1}", torch.nn.Sequential(*blocks))
            cin = st * 4 << s_
        fpn = torch.nn.Module()
        for l in range(4):
            setattr(fpn, f"fpn_inner{l + 1}", torch.nn.Conv2d(st * 4 << l, F_, 1))
            setattr(fpn, f"fpn_layer{l + 1}", torch.nn.Conv2d(F_, F_, 3, 1, 1))
        self.backbone = torch.nn.Module()
        self.backbone.body, self.backbone.fpn = body, fpn
        A, K, R = c["num_anchors"], c["num_classes"], c["representation_size"]
        self.rpn = torch.nn.Module()
        self.rpn.head = torch.nn.Module()
        self.rpn.head.conv = torch.nn.Conv2d(F_, F_, 3, 1, 1)
        self.rpn.head.cls_logits = torch.nn.Conv2d(F_, A, 1)
        self.rpn.head.bbox_pred = torch.nn.Conv2d(F_, 4 * A, 1)
        self.roi_heads = torch.nn.Module()
        box = torch.nn.Module()
        box.feature_extractor = torch.nn.Module()
        box.feature_extractor.fc6 = torch.nn.Linear(F_ * c["box_resolution"] ** 2, R)
        box.feature_extractor.fc7 = torch.nn.Linear(R, R)
        box.predictor = torch.nn.Module()
        box.predictor.cls_score = torch.nn.Linear(R, K)
        box.predictor.bbox_pred = torch.nn.Linear(R, 4 * K)
        mask = torch.nn.Module()
        mask.feature_extractor = torch.nn.Module()
        mc = F_
        for i in range(c["mask_convs"]):
            setattr(mask.feature_extractor, f"mask_fcn{i + 1}", torch.nn.Conv2d(mc, c["mask_channels"], 3, 1, 1))
            mc = c["mask_channels"]
        mask.predictor = torch.nn.Module()
        mask.predictor.conv5_mask = torch.nn.ConvTranspose2d(mc, c["mask_channels"], 2, 2, 0)
        mask.predictor.mask_fcn_logits = torch.nn.Conv2d(c["mask_channels"], K, 1)
        self.roi_heads.box, self.roi_heads.mask = box, mask
        self.c = c

    def features(self, x):
        b = self.backbone.body
        x = F.max_pool2d(F.relu(b.stem.bn1(b.stem.conv1(x))), 3, 2, 1)
        cs = []
        for s_ in range(4):
            x = getattr(b, f"layer{s_ + 1}")(x)
            cs.append(x)
        f = self.backbone.fpn
        last = f.fpn_inner4(cs[3])
        ps = [f.fpn_layer4(last)]
        for l in (2, 1, 0):
            last = getattr(f, f"fpn_inner{l + 1}")(cs[l]) + F.interpolate(last, scale_factor=2, mode="nearest")
            ps.insert(0, getattr(f, f"fpn_layer{l + 1}")(last))
        ps.append(F.max_pool2d(ps[-1], 1, 2, 0))  # LastLevelMaxPool
        return ps

    def pool(self, ps, rois, res):
        # maskrcnn_benchmark Pooler: LevelMapper (+1 area, eps inside the log2), ROIAlign per level.
        box = rois[:, 1:]
        area = (box[:, 2] - box[:, 0] + 1) * (box[:, 3] - box[:, 1] + 1)
        lv = torch.clamp(torch.floor(4 + torch.log2(torch.sqrt(area) / 224 + 1e-6)), min=2, max=5).to(torch.int64) - 2
        out = torch.zeros(rois.shape[0], ps[0].shape[1], res, res)
        for l in range(4):
            idx = torch.nonzero(lv == l).squeeze(1)
            if idx.numel():
                out[idx] = roi_align(ps[l], rois[idx], (res, res), 1.0 / (4 << l), 2, aligned=False)
        return out

    def forward(self, images, box_rois, mask_rois):
        ps = self.features(images)
        h = self.rpn.head
        obj, dl = [], []
        for p in ps:
            t = F.relu(h.conv(p))
            obj.append(h.cls_logits(t))
            dl.append(h.bbox_pred(t))
        bx = self.roi_heads.box
        x = self.pool(ps[:4], box_rois, self.c["box_resolution"]).flatten(1)
        x = F.relu(bx.feature_extractor.fc7(F.relu(bx.feature_extractor.fc6(x))))
        cls, reg = bx.predictor.cls_score(x), bx.predictor.bbox_pred(x)
        mk = self.roi_heads.mask
        y = self.pool(ps[:4], mask_rois, self.c["mask_resolution"])
        for i in range(self.c["mask_convs"]):
            y = F.relu(getattr(mk.feature_extractor, f"mask_fcn{i + 1}")(y))
        y = mk.predictor.mask_fcn_logits(F.relu(mk.predictor.conv5_mask(y)))
        return obj, dl, cls, reg, y


def mode_model(d, meta):
    c = meta["config"]
    model = MaskRcnnPeer(c)
    model.load_state_dict(weights.to_torch(weights.load(os.path.join(d, "weights.bhw"))), strict=True)
    frozen = ["backbone.body.stem."] if c["freeze_at"] >= 1 else []
    frozen += [f"backbone.body.layer{s_ + 1}." for s_ in range(4) if s_ + 2 <= c["freeze_at"]]
    for name, p in model.named_parameters():
        p.requires_grad_(not any(name.startswith(f) for f in frozen))
    inp = {k: torch.from_numpy(np.array(v)) for k, v in weights.load(os.path.join(d, "inputs.bhw")).items()}
    obj, dl, cls, reg, mask = model(inp["images"].float(), inp["box_rois"].float(), inp["mask_rois"].float())
    outs = {"cls": cls, "box": reg, "mask": mask}
    terms = [(cls * inp["g.cls"]).sum(), (reg * inp["g.box"]).sum(), (mask * inp["g.mask"]).sum()]
    for l in range(len(obj)):
        outs[f"obj.{l}"], outs[f"del.{l}"] = obj[l], dl[l]
        terms += [(obj[l] * inp[f"g.obj.{l}"]).sum(), (dl[l] * inp[f"g.del.{l}"]).sum()]
    sum(terms).backward()
    result = OrderedDict((k, v.detach().numpy()) for k, v in outs.items())
    for name, p in model.named_parameters():
        if p.requires_grad:
            result["grad." + name] = p.grad.detach().numpy()
    weights.save(os.path.join(d, "out.bhw"), result)


MODES["model"] = mode_model


def cmd_bench(argv):
    import argparse
    import time
    from torchvision.models.detection import MaskRCNN
    from torchvision.models.detection.anchor_utils import AnchorGenerator
    from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
    from torchvision.models.detection.mask_rcnn import MaskRCNNHeads, MaskRCNNPredictor

    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-size", type=int, required=True)
    ap.add_argument("--image-size", type=int, required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--config", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--amp", choices=["none", "bf16", "fp16"], default="none",
                    help="torch.autocast in that type (fp16 with a GradScaler; torchvision 0.14 has no CPU nms in bf16)")
    ap.add_argument("--channels-last", action="store_true",
                    help="the body, FPN and heads in channels-last memory (PyTorch's fastest AMP convolutions)")
    a = ap.parse_args(argv)
    dev = torch.device(a.device)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    c = json.loads(a.config)
    peer = MaskRcnnPeer(c)

    class Body(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.peer = peer
            self.out_channels = c["fpn_channels"]

        def forward(self, x):
            if a.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            return OrderedDict(zip(["0", "1", "2", "3", "pool"], self.peer.features(x)))

    sc = c.get("anchor_scale", 1.0)
    anchors = AnchorGenerator(tuple((32 * sc * 2 ** i,) for i in range(5)), ((0.5, 1.0, 2.0),) * 5)
    s = a.image_size
    model = MaskRCNN(Body(), num_classes=None, min_size=s, max_size=s, image_mean=[0.0, 0.0, 0.0],
                     image_std=[1.0, 1.0, 1.0], rpn_anchor_generator=anchors,
                     rpn_pre_nms_top_n_train=c["rpn_pre_nms_top_n"], rpn_post_nms_top_n_train=c["rpn_post_nms_top_n"],
                     rpn_batch_size_per_image=c["rpn_batch_size_per_image"],
                     box_batch_size_per_image=c["roi_batch_size_per_image"],
                     box_roi_pool=MultiScaleRoIAlign(["0", "1", "2", "3"], c["box_resolution"], 2),
                     mask_roi_pool=MultiScaleRoIAlign(["0", "1", "2", "3"], c["mask_resolution"], 2),
                     box_head=TwoMLPHead(c["fpn_channels"] * c["box_resolution"] ** 2, c["representation_size"]),
                     box_predictor=FastRCNNPredictor(c["representation_size"], c["num_classes"]),
                     mask_head=MaskRCNNHeads(c["fpn_channels"], [c["mask_channels"]] * c["mask_convs"], 1),
                     mask_predictor=MaskRCNNPredictor(c["mask_channels"] if c["mask_convs"] else c["fpn_channels"],
                                                      c["mask_channels"], c["num_classes"]))
    frozen = ["peer.backbone.body.stem."] if c["freeze_at"] >= 1 else []
    frozen += [f"peer.backbone.body.layer{i + 1}." for i in range(4) if i + 2 <= c["freeze_at"]]
    params = []
    for name, p in model.named_parameters():
        p.requires_grad_(not any(f in name for f in frozen))
        if p.requires_grad:
            params.append(p)
    model.to(dev)
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(params, lr=1e-4, momentum=0.9, weight_decay=1e-4)
    model.train()
    b = a.batch_size
    images = [(torch.rand(3, s, s) * 4 - 2).to(dev) for _ in range(b)]
    targets = []
    for i in range(b):
        boxes, masks = [], torch.zeros(4, s, s, dtype=torch.uint8)
        for j in range(4):
            x, y = s * (0.05 + 0.2 * j), s * (0.1 + 0.03 * (i % 8))
            x2, y2 = x + s * (0.1 + 0.05 * j), y + s * 0.3
            boxes.append([x, y, x2, y2])
            masks[j, int(y):int(y2), int(x):int(x2)] = 1
        targets.append({"boxes": torch.tensor(boxes).to(dev),
                        "labels": (1 + (torch.arange(4) + i) % (c["num_classes"] - 1)).to(dev), "masks": masks.to(dev)})

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    step = amp_step.make(opt, lambda: sum(model(images, targets).values()), dev.type, a.amp)

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
    print(json.dumps({"peer": "pytorch %s torchvision %s MaskRCNN" % (torch.__version__, torchvision.__version__),
                      "device": str(dev), "amp": a.amp, "channels_last": a.channels_last,
                      "threads": torch.get_num_threads(), "batch_size": b, "image_size": s,
                      "ms_per_step": med * 1e3, "images_per_second": b / med}))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "bench":
        cmd_bench(sys.argv[2:])
        return
    if len(sys.argv) != 3 or sys.argv[1] not in MODES:
        sys.exit(f"usage: maskrcnn_peer.py {{{'|'.join(MODES)}}} DIR")
    d = sys.argv[2]
    with open(os.path.join(d, "meta.json")) as f:
        meta = json.load(f)
    torch.set_num_threads(1)
    MODES[sys.argv[1]](d, meta)


if __name__ == "__main__":
    main()
