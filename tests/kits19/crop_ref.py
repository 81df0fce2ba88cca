#!/usr/bin/env python3
"""Independent reference for the training crop (reader_test.cpp / synthetic_test.cpp).

Runs RandBalancedCrop as MLPerf image_segmentation/pytorch data_loading/pytorch_loader.py
defines it (random.random() < oversampling -> rand_foreg_cropd with scipy.ndimage.label /
find_objects / argsort of box volumes and adjust(), else _rand_crop with randrange), relabelling
the volume on every call, with Python's and numpy's random state replaced by benchhost's Rng
(Philox4x32-10, re-implemented here from sdk/include/benchhost/random.hpp):
random.random() -> uniform(), random.randrange(n) -> below(n), np.random.choice(a) -> a[below(len(a))].

usage: crop_ref.py label.npy pD pH pW oversampling seed first_stream count out.npy
out: int64 [count, 3], the crop corner for Rng(seed, stream) for stream = first .. first + count - 1.
"""
import sys

import numpy as np
import scipy.ndimage

M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF


def mix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def philox(key, hi, lo):
    k0, k1 = key & M32, key >> 32
    c0, c1, c2, c3 = lo & M32, lo >> 32, hi & M32, hi >> 32
    for _ in range(10):
        p0 = 0xD2511F53 * c0
        p1 = 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & M32, (p0 >> 32) ^ c3 ^ k1, p0 & M32
        k0 = (k0 + 0x9E3779B9) & M32
        k1 = (k1 + 0xBB67AE85) & M32
    return [c0, c1, c2, c3]


class Rng:
    def __init__(self, seed, stream):
        self.key, self.stream, self.counter, self.block, self.lane = mix64(seed), stream, 0, None, 4

    def u32(self):
        if self.lane == 4:
            self.block = philox(self.key, self.stream, self.counter)
            self.counter += 1
            self.lane = 0
        self.lane += 1
        return self.block[self.lane - 1]

    def random(self):
        return (self.u32() >> 8) / 16777216.0

    def below(self, n):
        m = self.u32() * n
        if (m & M32) < n:
            t = ((1 << 32) - n) % n
            while (m & M32) < t:
                m = self.u32() * n
        return m >> 32

    def randrange(self, n):
        # The reference's RandBalancedCrop.randrange: 0 for an empty range.
        return 0 if n == 0 else self.below(n)


def crop(label, patch, oversampling, rng):
    shape = label.shape
    if rng.random() < oversampling:
        classes = np.unique(label[label > 0])
        if len(classes) > 0:
            cl = classes[rng.below(len(classes))]
            objects = scipy.ndimage.find_objects(scipy.ndimage.label(label == cl)[0])
            objects = [o for o in objects if o is not None]
            volumes = [np.prod([s.stop - s.start for s in o]) for o in objects]
            keep = [objects[i] for i in np.argsort(volumes, kind="stable")[-2:]]
            box = keep[rng.randrange(len(keep))]
            corner = []
            for axis in (1, 2, 3):
                diff = patch[axis - 1] - (box[axis].stop - box[axis].start)
                sign = -1 if diff < 0 else 1
                diff = abs(diff)
                ladj = rng.randrange(diff)
                hadj = diff - ladj
                low = max(0, box[axis].start - sign * ladj)
                high = min(shape[axis], box[axis].stop + sign * hadj)
                diff = patch[axis - 1] - (high - low)
                if diff > 0 and low == 0:
                    high += diff
                elif diff > 0:
                    low -= diff
                assert high - low == patch[axis - 1]
                corner.append(low)
            return corner
    return [rng.randrange(s - p) for s, p in zip(shape[1:], patch)]


def main():
    label = np.load(sys.argv[1])
    patch = [int(v) for v in sys.argv[2:5]]
    oversampling = float(sys.argv[5])
    seed, first, count = int(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8])
    out = np.array([crop(label, patch, oversampling, Rng(seed, s)) for s in range(first, first + count)], dtype=np.int64)
    np.save(sys.argv[9], out.reshape(-1, 3))


if __name__ == "__main__":
    main()
