#!/usr/bin/python3
"""torch peer of the SDK's 2-d transposed convolution (conv_transpose2d_* in
sdk/include/benchhost/nn/conv.hpp, Mask R-CNN's mask-head upsampling), run by
tests/nn_conv/conv_transpose2d_test.cpp:

    conv_transpose2d_peer.py DIR

DIR holds cases.json (a list of {"name", "stride": [h, w], "pad": [h, w]}) and per case the
NCHW float32 arrays NAME_x.npy, NAME_w.npy ([I, O, KH, KW]), NAME_b.npy ([O]) and NAME_dy.npy
(the gradient of the output). For each case torch.nn.functional.conv_transpose2d runs forward
in float64 and autograd takes dy back through it; NAME_y.npy, NAME_dx.npy, NAME_dw.npy and
NAME_db.npy (float32) are written to DIR.
"""
import json
import sys

import numpy as np
import torch
import torch.nn.functional as F


def main():
    d = sys.argv[1]
    cases = json.load(open(d + "/cases.json"))
    for c in cases:
        name = c["name"]

        def load(what):
            return torch.tensor(np.load(f"{d}/{name}_{what}.npy").astype(np.float64))

        x, w, b = [load(k).requires_grad_(True) for k in ("x", "w", "b")]
        y = F.conv_transpose2d(x, w, b, stride=tuple(c["stride"]), padding=tuple(c["pad"]))
        y.backward(load("dy"))
        for key, v in (("y", y), ("dx", x.grad), ("dw", w.grad), ("db", b.grad)):
            np.save(f"{d}/{name}_{key}.npy", v.detach().numpy().astype(np.float32))
    print(f"ok {len(cases)} cases")


if __name__ == "__main__":
    main()
