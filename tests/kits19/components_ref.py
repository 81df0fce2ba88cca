#!/usr/bin/env python3
"""scipy reference for components_test.cpp: the reference crop's labelling and boxes.

usage: components_ref.py mask.npy value out_labels.npy out_boxes.npy out_top2.npy
out_boxes: int64 [n, 6] (lo_d, hi_d, lo_h, hi_h, lo_w, hi_w) from scipy.ndimage.find_objects;
out_top2: the same for the boxes rand_foreg_cropd keeps (np.argsort(volumes)[-2:], stable sort).
"""
import sys

import numpy as np
import scipy.ndimage

mask = np.load(sys.argv[1])
if mask.ndim == 4:  # a case_XXXXX_y.npy [1, D, H, W]
    mask = mask[0]
value = int(sys.argv[2])
labels, n = scipy.ndimage.label(mask == value)
slices = [s for s in scipy.ndimage.find_objects(labels) if s is not None]
boxes = np.array([[x for s in sl for x in (s.start, s.stop)] for sl in slices], dtype=np.int64).reshape(-1, 6)
volumes = [np.prod([s.stop - s.start for s in sl]) for sl in slices]
top = np.argsort(volumes, kind="stable")[-2:]
np.save(sys.argv[3], labels.astype(np.int32))
np.save(sys.argv[4], boxes)
np.save(sys.argv[5], boxes[top].reshape(-1, 6))
