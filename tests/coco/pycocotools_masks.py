#!/usr/bin/python3
"""Reference masks for tests/coco/coco2017_test.cpp: pycocotools' annToMask of every annotation of
an instances file, printed one per line as "<annotation id> <height> <width> <compressed RLE>".
Exit 3 when pycocotools is not installed (the test then skips)."""
import sys

try:
    from pycocotools import mask as mask_utils
    from pycocotools.coco import COCO
except ImportError:
    sys.exit(3)

import contextlib
import io
import numpy as np

with contextlib.redirect_stdout(io.StringIO()):  # COCO() prints progress
    coco = COCO(sys.argv[1])
for ann_id in sorted(coco.anns):
    ann = coco.anns[ann_id]
    m = np.asfortranarray(coco.annToMask(ann).astype(np.uint8))
    rle = mask_utils.encode(m)
    counts = rle["counts"].decode("ascii") if isinstance(rle["counts"], bytes) else rle["counts"]
    print(ann_id, m.shape[0], m.shape[1], counts)
