#!/usr/bin/python3
"""Writes the hand-made malformed files that the tests in tests/data/*_test.cpp expect to be refused.

Run from this folder (the outputs are checked in; rerun only to change them). Each file is broken
in one specific way, named by its file name.
"""
import gzip
import struct
import zlib

import numpy as np


def npy_bytes(descr, shape, data, fortran=False, version=1):
    d = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
        descr, "True" if fortran else "False", repr(tuple(shape)))
    prefix = 10 if version == 1 else 12
    pad = (64 - (prefix + len(d) + 1) % 64) % 64
    h = (d + " " * pad + "\n").encode()
    size = struct.pack("<H", len(h)) if version == 1 else struct.pack("<I", len(h))
    return b"\x93NUMPY" + bytes([version, 0]) + size + h + data


def write(name, data):
    with open(name, "wb") as f:
        f.write(data)


good = np.arange(12, dtype="<f4").tobytes()
# .npy
write("npy_truncated_header.npy", npy_bytes("<f4", (3, 4), good)[:30])
write("npy_absurd_shape.npy", npy_bytes("<f4", (1 << 40, 1 << 20), good))
write("npy_bad_magic.npy", b"\x93NUMPZ" + npy_bytes("<f4", (3, 4), good)[6:])
write("npy_wrong_dtype.npy", npy_bytes("<c16", (3,), good))
write("npy_fortran.npy", npy_bytes("<f4", (3, 4), good, fortran=True))
write("npy_truncated_data.npy", npy_bytes("<f4", (3, 4), good)[:-7])
write("npy_bad_header_len.npy", b"\x93NUMPY\x02\x00" + struct.pack("<I", 0xFFFFFFF0) + b"{}")


def zip_stored(name, payload, crc=None, local_offset=None):
    crc = zlib.crc32(payload) if crc is None else crc
    n = name.encode()
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0x21, crc, len(payload), len(payload), len(n), 0)
    body = local + n + payload
    off = 0 if local_offset is None else local_offset
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 0, 0, 0x21, crc, len(payload), len(payload),
                          len(n), 0, 0, 0, 0, 0, off) + n
    eocd = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), len(body), 0)
    return body + central + eocd


member = npy_bytes("<f4", (3, 4), good)
write("npz_bad_crc.npz", zip_stored("a.npy", member, crc=zlib.crc32(member) ^ 0xDEADBEEF))
write("npz_bad_offset.npz", zip_stored("a.npy", member, local_offset=1 << 30))
z = zip_stored("a.npy", member)
write("npz_truncated.npz", z[: len(z) // 2])
# Central directory offset pointing past the end.
bad_cd = bytearray(z)
bad_cd[-6:-2] = struct.pack("<I", 0x7FFFFFF0)
write("npz_bad_cd_offset.npz", bytes(bad_cd))

# IDX
write("idx_bad_magic.idx", b"\x01\x02\x08\x01" + struct.pack(">I", 4) + b"abcd")
write("idx_absurd_dims.idx", b"\x00\x00\x08\x03" + struct.pack(">III", 0xFFFFFFFF, 0xFFFFFFFF, 28) + b"\x00" * 100)
write("idx_truncated.idx", b"\x00\x00\x08\x03" + struct.pack(">III", 10, 28, 28) + b"\x00" * 700)
write("idx_bad_type.idx", b"\x00\x00\x07\x01" + struct.pack(">I", 4) + b"abcd")
full = gzip.compress(b"\x00\x00\x08\x01" + struct.pack(">I", 4000) + bytes(i * 7 % 251 for i in range(4000)), mtime=0)
write("idx_truncated.idx.gz", full[: len(full) // 2])

# PNG whose IHDR claims 60000 x 60000 pixels (valid CRC) and holds almost no data.
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 60000, 60000, 8, 2, 0, 0, 0))
png += chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b"")
write("png_absurd_size.png", png)
write("png_bad_crc.png", b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" +
      struct.pack(">IIBBBBB", 4, 4, 8, 2, 0, 0, 0) + b"\0\0\0\0")
# JPEG: a start-of-image marker followed by garbage.
write("jpeg_garbage.jpg", b"\xff\xd8\xff\xe0" + bytes(range(256)) * 2)
# WAV whose data chunk claims 1 MB but holds 100 bytes.
fmt = struct.pack("<HHIIHH", 1, 1, 16000, 32000, 2, 16)
wav = b"RIFF" + struct.pack("<I", 36 + 1000000) + b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt
wav += b"data" + struct.pack("<I", 1000000) + b"\x00" * 100
write("wav_truncated.wav", wav)
write("manifest_bad.json", b'[{"audio_filepath": "a.flac", "duration": "long"}]')
