"""load_param_dict on hostile headers: every failure is a SerializationError.

The structured fuzzer writes array headers field by field with extreme values (dims of 0,
2**62, 2**63-1, negative; byte sizes that do or do not match; every DLDataType code/bits
pair; ndim beyond the limit), because random byte flips almost never produce a header that
is consistent enough to reach NumPy, which is where the raw ValueError for (0, 2**63-1) was.
"""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest

from nnvm.errors import SerializationError
from nnvm.serialization.param_dict import (ARRAY_MAGIC, LIST_MAGIC, load_param_dict,
                                           save_param_dict)

EXTREME_DIMS = [0, 1, 2, 3, 7, 255, 1 << 31, (1 << 31) - 1, 1 << 32, 1 << 62, (1 << 63) - 1,
                -1, -(1 << 63)]


def _blob(name: str, ndim: int, code: int, bits: int, lanes: int, shape, nbytes: int,
          data: bytes) -> bytes:
    nb = name.encode()
    return (struct.pack("<QQQ", LIST_MAGIC, 0, 1) + struct.pack("<Q", len(nb)) + nb
            + struct.pack("<Q", 1) + struct.pack("<QQiii", ARRAY_MAGIC, 0, 1, 0, ndim)
            + struct.pack("<BBH", code, bits, lanes) + struct.pack(f"<{len(shape)}q", *shape)
            + struct.pack("<q", nbytes) + data)


@pytest.mark.parametrize("shape", [(0, (1 << 63) - 1), ((1 << 63) - 1, 0), (0, 1 << 62, 4),
                                   (0, 1 << 40, 1 << 40)])
def test_empty_but_impossible_shapes_are_serialization_errors(shape):
    """Zero elements, zero bytes, but no array NumPy can make (raw ValueError before)."""
    blob = _blob("w", len(shape), 2, 32, 1, shape, 0, b"")
    with pytest.raises(SerializationError, match="too large for any array"):
        load_param_dict(blob)


def test_fuzz_headers_only_serialization_errors():
    """3,000 headers with extreme fields: each loads (with the declared shape) or raises
    SerializationError, nothing else."""
    r = random.Random(1234)
    codes = [(0, 8), (0, 32), (0, 64), (1, 8), (1, 16), (1, 1), (2, 16), (2, 32), (2, 64),
             (4, 16), (3, 7), (9, 9), (255, 255)]
    outcomes = {"ok": 0, "refused": 0}
    for _ in range(3000):
        ndim = r.choice([0, 1, 2, 3, 4, 32, 33, -1, 1 << 30])
        real_ndim = max(0, min(ndim, 40)) if r.random() < 0.9 else r.randrange(0, 5)
        shape = [r.choice(EXTREME_DIMS) if r.random() < 0.3 else r.randrange(0, 4)
                 for _ in range(real_ndim)]
        code, bits = r.choice(codes)
        lanes = 1 if r.random() < 0.9 else r.choice([0, 2, 65535])
        itemsize = max(bits // 8, 1)
        count = 1
        for d in shape:
            count *= d
        nbytes = count * itemsize if r.random() < 0.7 else r.choice(
            [0, 1, -1, 1 << 62, count * itemsize + 1])
        body = b"\x00" * max(0, min(nbytes, 256)) if r.random() < 0.8 else b"\x01" * 3
        try:
            blob = _blob(r.choice(["w", "", "é", "a" * 300]), ndim if -2**31 <= ndim < 2**31
                         else 0, code, bits, lanes, shape, max(min(nbytes, (1 << 63) - 1),
                                                               -(1 << 63)), body)
        except struct.error:
            continue
        try:
            out = load_param_dict(blob)
        except SerializationError:
            outcomes["refused"] += 1
            continue
        outcomes["ok"] += 1
        (arr,) = out.values()
        if ndim == len(shape):
            assert list(arr.shape) == shape
    assert outcomes["ok"] > 50 and outcomes["refused"] > 1000, outcomes


def test_fuzz_bytes_of_a_real_blob():
    """Byte flips, truncations and splices of a valid multi-array blob."""
    good = save_param_dict({"w": np.arange(24, dtype="float32").reshape(2, 3, 4),
                            "b": np.ones(3, "int64"), "s": np.array(True),
                            "e": np.zeros((0, 5), "float16")})
    assert set(load_param_dict(good)) == {"w", "b", "s", "e"}
    r = random.Random(99)
    for _ in range(3000):
        data = bytearray(good)
        for _ in range(r.randrange(1, 4)):
            op = r.random()
            pos = r.randrange(len(data) + 1)
            if op < 0.5:
                data[pos:pos + 1] = bytes([r.randrange(256)])
            elif op < 0.7:
                del data[pos:]
            elif op < 0.85:  # an 8-byte field set to an extreme value
                data[pos:pos + 8] = struct.pack("<q", r.choice(EXTREME_DIMS))
            else:
                data[pos:pos] = good[r.randrange(len(good)):][:r.randrange(1, 64)]
        try:
            load_param_dict(bytes(data))
        except SerializationError:
            pass
