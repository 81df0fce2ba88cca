"""Read and write benchhost weight files (docs/weights-format.md) from Python.

The PyTorch peer scripts use this to start from the same weights as a benchhost run, or to hand
weights back:

    import weights
    tensors = weights.load("resnet50.bhw")            # {name: numpy.ndarray}, file order
    model.load_state_dict(weights.to_torch(tensors))   # needs torch
    weights.save("out.bhw", weights.from_torch(model.state_dict()))

numpy has no bfloat16 or fp8 types: load() returns bf16 tensors as float32 (exact) unless
raw=True, and fp8 tensors as their raw uint8 codes; save() writes numpy float16/32/64, int32/64,
uint8 and bool, and bf16 only through from_torch() (torch.bfloat16). Every read checks the
magic, version, sizes against the file size, and each tensor's CRC-32 (zlib.crc32), and raises
WeightFileError naming the file and tensor.

Command line:  python3 weights.py list FILE
"""

import os
import struct
import sys
import zlib
from collections import OrderedDict

import numpy as np

MAGIC = b"BHWEIGHT"
VERSION = 1
ALIGN = 64
MAX_NAME_BYTES = 4096
MAX_DIMS = 8
MIN_RECORD_BYTES = 4 + 1 + 1 + 2 + 8 + 4

# code -> (name, numpy dtype used for the raw bytes)
CODES = {
    1: ("f32", np.dtype("<f4")),
    2: ("f64", np.dtype("<f8")),
    3: ("f16", np.dtype("<f2")),
    4: ("bf16", np.dtype("<u2")),
    5: ("f8e4m3", np.dtype("u1")),
    6: ("f8e5m2", np.dtype("u1")),
    7: ("i32", np.dtype("<i4")),
    8: ("i64", np.dtype("<i8")),
    9: ("u8", np.dtype("u1")),
    10: ("bool", np.dtype("?")),
}
NUMPY_TO_CODE = {
    np.dtype("float32"): 1,
    np.dtype("float64"): 2,
    np.dtype("float16"): 3,
    np.dtype("int32"): 7,
    np.dtype("int64"): 8,
    np.dtype("uint8"): 9,
    np.dtype("bool"): 10,
}


class WeightFileError(ValueError):
    """A weight file is missing, truncated or corrupt."""


class BF16(np.ndarray):
    """Marks a uint16 array holding bfloat16 bit patterns, so save() writes dtype code 4."""


def bf16_bits_to_float32(bits):
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)


def float32_to_bf16_bits(x):
    """Round to nearest even, as the C++ SDK does (NaN stays NaN)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    return np.where(nan, np.uint16(0x7FC0), rounded).astype(np.uint16)


def _c_order(arr, dtype):
    # Not np.ascontiguousarray: it turns 0-d arrays (scalars) into shape (1,).
    arr = np.asarray(arr, dtype=dtype)
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


def _pad(offset):
    return (ALIGN - offset % ALIGN) % ALIGN


def load(path, raw=False):
    """Read every tensor of `path` into an OrderedDict {name: numpy array}.

    raw=False converts bf16 to float32 (exactly); raw=True returns bf16 as BF16 (uint16 bits)
    arrays. fp8 tensors are always returned as their uint8 codes.
    """
    size = os.path.getsize(path)
    out = OrderedDict()
    with open(path, "rb") as f:
        pos = 0

        def read(n, what):
            nonlocal pos
            if n > size - pos:
                raise WeightFileError(
                    f"weight file '{path}' is truncated: {what} needs {n} bytes at offset {pos}, "
                    f"but the file has only {size} bytes")
            b = f.read(n)
            if len(b) != n:
                raise WeightFileError(f"reading '{path}' failed at offset {pos} ({what})")
            pos += n
            return b

        if read(8, "the magic number") != MAGIC:
            raise WeightFileError(f"'{path}' is not a benchhost weight file (bad magic)")
        version, flags, count = struct.unpack("<IIQ", read(16, "the header"))
        if version != VERSION:
            raise WeightFileError(f"'{path}' has format version {version}; this reads {VERSION}")
        if flags != 0:
            raise WeightFileError(f"'{path}' has unknown flags 0x{flags:x}")
        if count > (size - pos) // MIN_RECORD_BYTES:
            raise WeightFileError(f"'{path}' claims {count} tensors, more than its {size} bytes hold")
        for i in range(count):
            (name_len,) = struct.unpack("<I", read(4, f"tensor #{i} name length"))
            if name_len == 0 or name_len > MAX_NAME_BYTES:
                raise WeightFileError(f"'{path}': tensor #{i} has name length {name_len}")
            name = read(name_len, f"tensor #{i} name").decode("utf-8")
            what = f"tensor #{i} '{name}'"
            if name in out:
                raise WeightFileError(f"'{path}': {what} appears twice")
            code, ndim, reserved = struct.unpack("<BBH", read(4, f"{what} dtype"))
            if code not in CODES:
                raise WeightFileError(f"'{path}': {what} has unknown dtype code {code}")
            if ndim > MAX_DIMS or reserved != 0:
                raise WeightFileError(f"'{path}': {what} has rank {ndim} / reserved {reserved}")
            shape = struct.unpack(f"<{ndim}q", read(8 * ndim, f"{what} shape"))
            if any(d < 0 for d in shape):
                raise WeightFileError(f"'{path}': {what} has a negative dimension {shape}")
            nbytes, crc = struct.unpack("<QI", read(12, f"{what} byte length"))
            dname, dt = CODES[code]
            numel = 1
            for d in shape:
                numel *= d
            if numel * dt.itemsize != nbytes:
                raise WeightFileError(
                    f"'{path}': {what} of shape {list(shape)} and dtype {dname} should have "
                    f"{numel * dt.itemsize} bytes, the file says {nbytes}")
            read(_pad(pos), f"{what} padding")
            data = read(nbytes, f"{what} data")
            if nbytes and zlib.crc32(data) != crc:
                raise WeightFileError(f"'{path}': {what} fails its checksum; the file is corrupt")
            arr = np.frombuffer(data, dtype=dt).reshape(shape).copy()
            if dname == "bf16":
                arr = arr.view(BF16) if raw else bf16_bits_to_float32(arr).reshape(shape)
            out[name] = arr
        if pos != size:
            raise WeightFileError(f"'{path}' has {size - pos} unexpected bytes after its tensors")
    return out


def save(path, tensors):
    """Write {name: numpy array (or BF16 array)} to `path` (atomically, via path + '.tmp')."""
    items = list(tensors.items())
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        pos = 0

        def write(b):
            nonlocal pos
            f.write(b)
            pos += len(b)

        write(MAGIC + struct.pack("<IIQ", VERSION, 0, len(items)))
        for name, arr in items:
            if isinstance(arr, BF16):
                code = 4
                arr = _c_order(arr.view(np.ndarray), np.dtype("<u2"))
            else:
                arr = np.asarray(arr)
                if arr.dtype not in NUMPY_TO_CODE:
                    raise ValueError(f"tensor '{name}': numpy dtype {arr.dtype} has no file code")
                code = NUMPY_TO_CODE[arr.dtype]
                arr = _c_order(arr, CODES[code][1])
            nb = name.encode("utf-8")
            if not 0 < len(nb) <= MAX_NAME_BYTES or arr.ndim > MAX_DIMS:
                raise ValueError(f"tensor '{name}': bad name length or rank {arr.ndim}")
            data = arr.tobytes()
            write(struct.pack("<I", len(nb)) + nb)
            write(struct.pack("<BBH", code, arr.ndim, 0))
            write(struct.pack(f"<{arr.ndim}q", *arr.shape))
            write(struct.pack("<QI", len(data), zlib.crc32(data) if data else 0))
            write(b"\0" * _pad(pos))
            write(data)
    os.replace(tmp, path)


def to_torch(tensors):
    """{name: numpy} -> {name: torch.Tensor}; BF16 arrays become torch.bfloat16."""
    import torch

    out = OrderedDict()
    for name, arr in tensors.items():
        if isinstance(arr, BF16):
            f32 = torch.from_numpy(bf16_bits_to_float32(arr.view(np.ndarray)).reshape(arr.shape))
            out[name] = f32.to(torch.bfloat16)  # exact: the values are bf16 already
        else:
            out[name] = torch.from_numpy(np.array(arr))
    return out


def from_torch(state_dict):
    """{name: torch.Tensor} -> {name: numpy} ready for save(); bf16 stays bf16 (BF16 arrays)."""
    import torch

    out = OrderedDict()
    for name, t in state_dict.items():
        t = t.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            out[name] = float32_to_bf16_bits(t.float().numpy()).view(BF16)
        else:
            out[name] = t.numpy()
    return out


def from_torch_checkpoint(checkpoint, out):
    """A PyTorch checkpoint (a state_dict, or a dict holding one under "model" / "state_dict") as a
    benchhost weights file under the same names: e.g. torchvision's resnext50_32x4d-7cdf4587.pth
    for retinanet.backbone-weights."""
    import torch
    state = torch.load(checkpoint, map_location="cpu")
    for key in ("model", "state_dict"):
        if isinstance(state, dict) and key in state and isinstance(state[key], dict):
            state = state[key]
    tensors = {k: v for k, v in state.items() if hasattr(v, "detach") and v.is_floating_point()}
    save(out, from_torch(tensors))
    print(f"{len(tensors)} tensors written to {out}")
    return 0


def main(argv):
    if len(argv) == 4 and argv[1] == "from-torch":
        return from_torch_checkpoint(argv[2], argv[3])
    if len(argv) != 3 or argv[1] != "list":
        print("usage: weights.py list FILE | weights.py from-torch CHECKPOINT.pth OUT.bhw", file=sys.stderr)
        return 2
    total = 0
    for name, arr in load(argv[2], raw=True).items():
        kind = "bf16" if isinstance(arr, BF16) else str(arr.dtype)
        print(f"{name:<60} {kind:<8} {list(arr.shape)}")
        total += arr.size
    print(f"total: {total} elements")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
