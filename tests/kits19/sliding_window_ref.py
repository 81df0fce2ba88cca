#!/usr/bin/env python3
"""Independent numpy/scipy reference for the sliding-window test (sliding_window_test.cpp).

Follows MLPerf image_segmentation/pytorch runtime/inference.py step by step (crop, pad_input,
gaussian_kernel, the window loops, the final slice), with numpy in place of torch, and the test's
deterministic "model": logits_c = a_c * x + b_c * mean(patch) + c_c * pos, pos = (d + 2h + 3w) / (6 r).

usage: sliding_window_ref.py image.npy label.npy roi overlap pad_value out_logits.npy out_label.npy
"""
import sys

import numpy as np
from scipy.signal import windows

A = np.array([1.0, -0.5, 0.3], dtype=np.float32)
B = np.array([0.2, 0.7, -0.4], dtype=np.float32)
C = np.array([0.0, 1.0, -1.0], dtype=np.float32)


def model(patch, r):
    # patch: [1, 1, r, r, r] float32 -> [1, 3, r, r, r] float32
    d, h, w = np.meshgrid(np.arange(r), np.arange(r), np.arange(r), indexing="ij")
    pos = ((d + 2 * h + 3 * w).astype(np.float32) / np.float32(6 * r)).astype(np.float32)
    x = patch[0, 0]
    m = np.float32(x.astype(np.float64).mean())
    out = np.stack([A[c] * x + B[c] * m + C[c] * pos for c in range(3)]).astype(np.float32)
    return out[None]


def gaussian_kernel(n, std):
    g1 = windows.gaussian(n, std)
    g2 = np.outer(g1, g1)
    g3 = np.outer(g2, g1).reshape(n, n, n)
    g3 = np.cbrt(g3)
    g3 /= g3.max()
    return g3


def main():
    image = np.load(sys.argv[1])[None, None]  # [1, 1, D, H, W]
    label = np.load(sys.argv[2])[None, None]
    r = int(sys.argv[3])
    overlap = float(sys.argv[4])
    pad_value = float(sys.argv[5])
    roi = [r, r, r]
    shape = list(image.shape[2:])
    strides = [int(roi[i] * (1 - overlap)) for i in range(3)]
    bounds = [shape[i] % strides[i] for i in range(3)]
    bounds = [bounds[i] if bounds[i] < strides[i] // 2 else 0 for i in range(3)]
    sl = tuple(slice(bounds[i] // 2, shape[i] - (bounds[i] - bounds[i] // 2)) for i in range(3))
    image = image[(Ellipsis,) + sl]
    label = label[(Ellipsis,) + sl]
    pb = [(strides[i] - image.shape[2:][i] % strides[i]) % strides[i] for i in range(3)]
    pb = [pb[i] if image.shape[2:][i] + pb[i] >= roi[i] else pb[i] + strides[i] for i in range(3)]
    pads = [(0, 0), (0, 0)] + [(pb[i] // 2, pb[i] - pb[i] // 2) for i in range(3)]
    image = np.pad(image, pads, mode="constant", constant_values=np.float32(pad_value)).astype(np.float32)
    padded = image.shape[2:]
    size = [(padded[i] - roi[i]) // strides[i] + 1 for i in range(3)]
    result = np.zeros((1, 3) + tuple(padded), dtype=np.float32)
    norm = np.zeros_like(result)
    w = gaussian_kernel(r, 0.125 * r).astype(np.float32)
    for i in range(0, strides[0] * size[0], strides[0]):
        for j in range(0, strides[1] * size[1], strides[1]):
            for k in range(0, strides[2] * size[2], strides[2]):
                win = (Ellipsis, slice(i, i + r), slice(j, j + r), slice(k, k + r))
                result[win] += model(image[win], r) * w
                norm[win] += w
    result /= norm
    out = result[..., pads[2][0]:shape[0] + pads[2][0], pads[3][0]:shape[1] + pads[3][0],
                 pads[4][0]:shape[2] + pads[4][0]]
    np.save(sys.argv[6], np.ascontiguousarray(out[0]))
    np.save(sys.argv[7], np.ascontiguousarray(label[0, 0]))


if __name__ == "__main__":
    main()
