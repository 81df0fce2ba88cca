#!/usr/bin/python3
"""torchvision peer of the detection toolkit (sdk/include/benchhost/nn/detection.hpp), run by
tests/nn_ops/detection_test.cpp: it reads the test's inputs from a folder, runs torchvision's own
functions on them and writes the results back, so the C++ side compares with the reference
implementation itself, not with a re-derivation.

    detection_peer.py MODE DIR

DIR holds meta.json (shapes and scalars) and raw little-endian arrays NAME.bin (float32 or
int64, named in meta.json); the outputs are written to DIR as raw arrays too. Modes:
    anchors  AnchorGenerator(sizes, aspect_ratios) on an ImageList of meta's image size and
             zero feature maps of meta's grids                              -> anchors.bin
    ops      box_iou(a, b); Matcher(high, low, allow_low_quality) on box_iou(a, b) with and
             without low-quality matches; BoxCoder(weights).encode_single(gt, ref) and
             decode_single(deltas, ref)                 -> iou, matched, matched_nolq, enc, dec
    losses   RetinaNet's compute_loss for one image, written the way retinanet.py does: focal
             loss via torchvision.ops.sigmoid_focal_loss on the non-ignored anchors, L1 on the
             encoded targets of the foreground anchors, each / max(1, foreground); gradients by
             autograd (float64 copies give the loss and gradient references)
                                                    -> focal, dlogits, box, ddeltas
    nms      torchvision.ops.nms and batched_nms                        -> keep, keep_batched
    post     RetinaNet.postprocess_detections for one image with meta's levels
                                                   -> post_boxes, post_scores, post_labels

Run with Debian's /usr/bin/python3 (python3-torch, python3-torchvision).
"""

import json
import os
import sys
import types

import numpy as np
import torch
import torchvision
from torchvision.models.detection import _utils as det_utils
from torchvision.models.detection.anchor_utils import AnchorGenerator
from torchvision.models.detection.image_list import ImageList
from torchvision.models.detection.retinanet import RetinaNet
from torchvision.ops import boxes as box_ops
from torchvision.ops import sigmoid_focal_loss


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


def mode_anchors(d, meta):
    sizes = tuple(tuple(int(s) for s in level) for level in meta["sizes"])
    ratios = (tuple(meta["aspect_ratios"]),) * len(sizes)
    gen = AnchorGenerator(sizes, ratios)
    h, w = meta["image_h"], meta["image_w"]
    images = ImageList(torch.zeros(1, 3, h, w), [(h, w)])
    feats = [torch.zeros(1, 1, gh, gw) for gh, gw in meta["grids"]]
    save(d, "anchors", gen(images, feats)[0])


def mode_ops(d, meta):
    a, b = load(d, meta, "a"), load(d, meta, "b")
    iou = box_ops.box_iou(a, b)
    save(d, "iou", iou)
    save(d, "matched", det_utils.Matcher(meta["high"], meta["low"], allow_low_quality_matches=True)(iou))
    save(d, "matched_nolq", det_utils.Matcher(meta["high"], meta["low"], allow_low_quality_matches=False)(iou))
    coder = det_utils.BoxCoder(weights=tuple(meta["weights"]))
    gt, ref, deltas = load(d, meta, "gt"), load(d, meta, "ref"), load(d, meta, "deltas")
    save(d, "enc", coder.encode_single(gt, ref))
    save(d, "dec", coder.decode_single(deltas, ref))


def retinanet_losses(logits, deltas, anchors, matched, gt_boxes, gt_labels):
    """The per-image bodies of RetinaNetClassificationHead/RegressionHead.compute_loss (0.14)."""
    foreground = matched >= 0
    num_foreground = foreground.sum()
    target = torch.zeros_like(logits)
    target[foreground, gt_labels[matched[foreground]]] = 1.0
    valid = matched != det_utils.Matcher.BETWEEN_THRESHOLDS
    focal = sigmoid_focal_loss(logits[valid], target[valid], reduction="sum") / max(1, num_foreground)

    fg_idx = torch.where(foreground)[0]
    coder = det_utils.BoxCoder(weights=(1.0, 1.0, 1.0, 1.0))
    target_regression = coder.encode_single(gt_boxes[matched[fg_idx]], anchors[fg_idx])
    box = torch.nn.functional.l1_loss(deltas[fg_idx], target_regression, reduction="sum") / max(1, fg_idx.numel())
    return focal, box


def mode_losses(d, meta):
    logits, deltas, anchors = load(d, meta, "logits"), load(d, meta, "deltas"), load(d, meta, "anchors")
    matched = load(d, meta, "matched", np.int64)
    gt_boxes, gt_labels = load(d, meta, "gt_boxes"), load(d, meta, "gt_labels", np.int64)
    # float32, as RetinaNet trains; the C++ side compares with tolerances.
    lz = logits.clone().requires_grad_(True)
    ld = deltas.clone().requires_grad_(True)
    focal, box = retinanet_losses(lz, ld, anchors, matched, gt_boxes, gt_labels)
    (focal + box).backward()
    save(d, "focal", focal.reshape(1))
    save(d, "box", box.reshape(1))
    save(d, "dlogits", lz.grad)
    save(d, "ddeltas", ld.grad)
    # float64: a tighter reference for the loss values and the focal gradient.
    lz64 = logits.double().requires_grad_(True)
    focal64, box64 = retinanet_losses(lz64, deltas.double(), anchors, matched, gt_boxes, gt_labels)
    focal64.backward()
    save(d, "focal64", focal64.reshape(1))
    save(d, "dlogits64", lz64.grad)


def mode_nms(d, meta):
    boxes, scores = load(d, meta, "boxes"), load(d, meta, "scores")
    classes = load(d, meta, "classes", np.int64)
    thr = meta["iou_threshold"]
    save(d, "keep", torchvision.ops.nms(boxes, scores, thr))
    save(d, "keep_batched", torchvision.ops.batched_nms(boxes, scores, classes, thr))


def mode_post(d, meta):
    levels = meta["levels"]
    logits = [load(d, meta, f"logits{l}").unsqueeze(0) for l in range(levels)]
    deltas = [load(d, meta, f"deltas{l}").unsqueeze(0) for l in range(levels)]
    anchors = [torch.cat([load(d, meta, f"anchors{l}") for l in range(levels)])]
    # postprocess_detections reads only these attributes of the model.
    model = types.SimpleNamespace(
        box_coder=det_utils.BoxCoder(weights=(1.0, 1.0, 1.0, 1.0)),
        score_thresh=meta["score_thresh"],
        topk_candidates=meta["topk"],
        nms_thresh=meta["nms_thresh"],
        detections_per_img=meta["detections_per_img"],
    )
    head_outputs = {"cls_logits": logits, "bbox_regression": deltas}
    # As RetinaNet.forward: split the image's anchors per level.
    split_anchors = [list(a.split([x.shape[1] for x in logits])) for a in anchors]
    det = RetinaNet.postprocess_detections(model, head_outputs, split_anchors, [(meta["image_h"], meta["image_w"])])[0]
    save(d, "post_boxes", det["boxes"])
    save(d, "post_scores", det["scores"])
    save(d, "post_labels", det["labels"])


def main():
    mode, d = sys.argv[1], sys.argv[2]
    with open(os.path.join(d, "meta.json")) as f:
        meta = json.load(f)
    torch.set_num_threads(1)
    {"anchors": mode_anchors, "ops": mode_ops, "losses": mode_losses, "nms": mode_nms, "post": mode_post}[mode](d, meta)


if __name__ == "__main__":
    main()
