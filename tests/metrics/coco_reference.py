#!/usr/bin/env python3
"""COCO bbox and segm mAP reference for tests/metrics/coco_map_test.cpp and coco_segm_test.cpp.

Usage: coco_reference.py {pycocotools|port} INPUT.json
INPUT.json: {"images": [id, ...], "categories": [id, ...],
             "annotations": [{"id", "image_id", "category_id", "bbox": [x,y,w,h], "area", "iscrowd"}],
             "detections": [{"image_id", "category_id", "bbox": [x,y,w,h], "score"}]}
Prints the 12 COCOeval.summarize() stats as one line "[s0, s1, ...]" (repr precision).
With "iou_type": "segm" in INPUT.json, every annotation and detection also has "segmentation":
{"size": [h, w], "counts": STRING} (COCO's compressed RLE) and the evaluation is iouType 'segm':
the port decodes the strings itself (maskApi.c's rleFrString read from its description) and takes
IoUs and detection areas from the dense masks.

pycocotools: the real COCOeval (exit code 3 when the module is missing).
port: an independent numpy transcription of COCOeval's bbox path (evaluate / accumulate /
summarize: np.argsort kind='mergesort', np.linspace thresholds, np.searchsorted side='left',
np.spacing(1)) for machines without pycocotools (Debian 12 has no python3-pycocotools).
"""
import contextlib
import json
import sys

import numpy as np


def run_pycocotools(data):
    try:
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval
    except ImportError:
        sys.exit(3)
    gt = COCO()
    gt.dataset = {
        "images": [{"id": i} for i in data["images"]],
        "categories": [{"id": c} for c in data["categories"]],
        "annotations": data["annotations"],
    }
    with contextlib.redirect_stdout(sys.stderr):
        gt.createIndex()
        dt = gt.loadRes([dict(d) for d in data["detections"]])  # loadRes needs at least one
        ev = COCOeval(gt, dt, data.get("iou_type", "bbox"))
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return list(ev.stats)


def box_iou(d, g, crowd):
    w = min(d[2] + d[0], g[2] + g[0]) - max(d[0], g[0])
    if w <= 0:
        return 0.0
    h = min(d[3] + d[1], g[3] + g[1]) - max(d[1], g[1])
    if h <= 0:
        return 0.0
    i = w * h
    u = d[2] * d[3] if crowd else d[2] * d[3] + g[2] * g[3] - i
    return i / u


def rle_string_to_mask(seg):
    """The dense h x w mask of a compressed COCO RLE: each count is little-endian 5-bit groups
    (+48) with a continuation bit 0x20 and a sign bit 0x10 in the last group; from the third
    count on it is a difference to the count two before; counts alternate 0s and 1s over the
    column-major mask."""
    h, w = seg["size"]
    text = seg["counts"]
    counts, p = [], 0
    while p < len(text):
        x, k, more = 0, 0, True
        while more:
            c = ord(text[p]) - 48
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            p += 1
            k += 1
            if not more and (c & 0x10):
                x |= -1 << (5 * k)
        if len(counts) > 2:
            x += counts[-2]
        counts.append(x)
    flat = np.zeros(h * w, dtype=bool)
    pos, value = 0, False
    for c in counts:
        flat[pos:pos + c] = value
        pos += c
        value = not value
    assert pos == h * w, "counts do not cover the mask"
    return flat.reshape(w, h).T


def mask_iou(d, g, crowd):
    i = np.count_nonzero(d & g)
    u = np.count_nonzero(d) if crowd else np.count_nonzero(d | g)
    return i / u if u > 0 else 0.0


def run_port(data):
    iou_thrs = np.linspace(.5, 0.95, int(np.round((0.95 - .5) / .05)) + 1, endpoint=True)
    rec_thrs = np.linspace(.0, 1.00, int(np.round((1.00 - .0) / .01)) + 1, endpoint=True)
    max_dets = [1, 10, 100]
    area_rngs = [[0 ** 2, 1e5 ** 2], [0 ** 2, 32 ** 2], [32 ** 2, 96 ** 2], [96 ** 2, 1e5 ** 2]]
    img_ids = sorted(set(data["images"]))
    cat_ids = sorted(set(data["categories"]))
    gts, dts = {}, {}
    segm = data.get("iou_type", "bbox") == "segm"
    for g in data["annotations"]:
        if segm:
            g = dict(g, mask=rle_string_to_mask(g["segmentation"]))
        gts.setdefault((g["image_id"], g["category_id"]), []).append(g)
    for n, d in enumerate(data["detections"]):
        if segm:
            mask = rle_string_to_mask(d["segmentation"])
            d = dict(d, id=n + 1, mask=mask, area=float(np.count_nonzero(mask)))
        else:
            d = dict(d, id=n + 1, area=d["bbox"][2] * d["bbox"][3])
        dts.setdefault((d["image_id"], d["category_id"]), []).append(d)
    T, R, K, A, M = len(iou_thrs), len(rec_thrs), len(cat_ids), len(area_rngs), len(max_dets)

    def evaluate_img(img, cat, rng):
        gt = gts.get((img, cat), [])
        dt = dts.get((img, cat), [])
        if not gt and not dt:
            return None
        g_ignore = [1 if (g["iscrowd"] or g["area"] < rng[0] or g["area"] > rng[1]) else 0 for g in gt]
        gind = np.argsort(g_ignore, kind="mergesort")
        gt = [gt[i] for i in gind]
        g_ignore = [g_ignore[i] for i in gind]
        dind = np.argsort([-d["score"] for d in dt], kind="mergesort")
        dt = [dt[i] for i in dind[:max_dets[-1]]]
        if segm:
            ious = [[mask_iou(d["mask"], g["mask"], g["iscrowd"]) for g in gt] for d in dt]
        else:
            ious = [[box_iou(d["bbox"], g["bbox"], g["iscrowd"]) for g in gt] for d in dt]
        gt_taken = np.zeros((T, len(gt)), dtype=bool)
        dt_matched = np.zeros((T, len(dt)), dtype=bool)
        dt_ignored = np.zeros((T, len(dt)), dtype=bool)
        for t, thr in enumerate(iou_thrs):
            for di, d in enumerate(dt):
                best, m = min(thr, 1 - 1e-10), -1
                for gi, g in enumerate(gt):
                    if gt_taken[t, gi] and not g["iscrowd"]:
                        continue
                    if m > -1 and g_ignore[m] == 0 and g_ignore[gi] == 1:
                        break
                    if ious[di][gi] < best:
                        continue
                    best, m = ious[di][gi], gi
                if m == -1:
                    continue
                dt_ignored[t, di] = g_ignore[m] == 1
                dt_matched[t, di] = True
                gt_taken[t, m] = True
        outside = np.array([d["area"] < rng[0] or d["area"] > rng[1] for d in dt], dtype=bool)
        dt_ignored = dt_ignored | (~dt_matched & outside[None, :])
        return {"scores": [d["score"] for d in dt], "matched": dt_matched, "ignored": dt_ignored,
                "g_ignore": np.array(g_ignore)}

    precision = -np.ones((T, R, K, A, M))
    recall = -np.ones((T, K, A, M))
    for k, cat in enumerate(cat_ids):
        for a, rng in enumerate(area_rngs):
            evals = [e for e in (evaluate_img(img, cat, rng) for img in img_ids) if e is not None]
            if not evals:
                continue
            for m, md in enumerate(max_dets):
                scores = np.concatenate([np.array(e["scores"][:md], dtype=float) for e in evals])
                order = np.argsort(-scores, kind="mergesort")
                matched = np.concatenate([e["matched"][:, :md] for e in evals], axis=1)[:, order]
                ignored = np.concatenate([e["ignored"][:, :md] for e in evals], axis=1)[:, order]
                npig = int(np.count_nonzero(np.concatenate([e["g_ignore"] for e in evals]) == 0))
                if npig == 0:
                    continue
                tps = np.cumsum(matched & ~ignored, axis=1).astype(float)
                fps = np.cumsum(~matched & ~ignored, axis=1).astype(float)
                for t in range(T):
                    tp, fp = tps[t], fps[t]
                    nd = len(tp)
                    rc = tp / npig
                    pr = list(tp / (fp + tp + np.spacing(1)))
                    recall[t, k, a, m] = rc[-1] if nd else 0
                    for i in range(nd - 1, 0, -1):
                        pr[i - 1] = max(pr[i - 1], pr[i])
                    q = np.zeros(R)
                    for ri, pi in enumerate(np.searchsorted(rc, rec_thrs, side="left")):
                        if pi < nd:
                            q[ri] = pr[pi]
                    precision[t, :, k, a, m] = q

    def summarize(ap, thr=None, a=0, m=2):
        s = precision if ap else recall
        if thr is not None:
            s = s[np.where(thr == iou_thrs)[0]]
        s = s[:, :, :, a, m] if ap else s[:, :, a, m]
        return -1.0 if len(s[s > -1]) == 0 else float(np.mean(s[s > -1]))

    return [summarize(True), summarize(True, .5), summarize(True, .75), summarize(True, a=1),
            summarize(True, a=2), summarize(True, a=3), summarize(False, m=0), summarize(False, m=1),
            summarize(False), summarize(False, a=1), summarize(False, a=2), summarize(False, a=3)]


def main():
    impl, path = sys.argv[1], sys.argv[2]
    with open(path) as f:
        data = json.load(f)
    stats = run_pycocotools(data) if impl == "pycocotools" else run_port(data)
    print("[" + ", ".join(repr(float(s)) for s in stats) + "]")


if __name__ == "__main__":
    main()
