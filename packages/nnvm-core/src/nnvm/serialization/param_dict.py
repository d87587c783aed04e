"""The NNVM/TVM param-dict binary format (``save_param_dict`` / ``load_param_dict``).

Layout (little-endian): u64 magic 0xF7E58D4F05049CB7, u64 reserved, names as a dmlc string
vector (u64 count, then u64 length + bytes each), u64 array count, then per array: u64 magic
0xDD5E40F096B4A13F, u64 reserved, DLDevice (i32 type=1 CPU, i32 id), i32 ndim, DLDataType
(u8 code, u8 bits, u16 lanes), i64 shape[ndim], i64 byte size, raw bytes. TVM's own loader
(``tvm.runtime.load_param_dict``) reads what we write.
"""

from __future__ import annotations

import math
import struct
from typing import Mapping

import numpy as np

from ..errors import NNVMError, SerializationError

LIST_MAGIC = 0xF7E58D4F05049CB7
ARRAY_MAGIC = 0xDD5E40F096B4A13F
_MAX_NDIM = 32


def _dl_type(dtype: np.dtype) -> tuple[int, int]:
    from ..dtypes import dl_type, name_of

    try:
        return dl_type(name_of(dtype))
    except NNVMError:
        raise SerializationError(f"save_param_dict: dtype {dtype} cannot be stored; expected "
                                 f"one of nnvm.dtypes.DTYPES") from None


def _np_type(code: int, bits: int, lanes: int, where: str) -> np.dtype:
    from ..dtypes import from_dl_type, np_dtype

    if lanes != 1:
        raise SerializationError(f"{where}: vector dtypes (lanes={lanes}) are not supported")
    name = from_dl_type(code, bits)
    if name is None:
        raise SerializationError(f"{where}: unknown DLDataType code={code} bits={bits}")
    try:
        return np_dtype(name)
    except NNVMError as exc:
        raise SerializationError(f"{where}: {exc}") from None


def save_param_dict(params: Mapping[str, object]) -> bytes:
    """Serialise ``{name: array}`` to bytes in the NNVM/TVM param-dict format."""
    if not isinstance(params, Mapping):
        raise SerializationError(f"save_param_dict: expected a dict of name -> array; got "
                                 f"{type(params).__name__}")
    names = list(params)
    bad = [n for n in names if not isinstance(n, str)]
    if bad:
        raise SerializationError(f"save_param_dict: names must be strings; got {bad[0]!r}")
    out = [struct.pack("<QQQ", LIST_MAGIC, 0, len(names))]
    for n in names:
        b = n.encode("utf-8")
        out.append(struct.pack("<Q", len(b)) + b)
    out.append(struct.pack("<Q", len(names)))
    for n in names:
        arr = _to_numpy(params[n], n)
        code, bits = _dl_type(arr.dtype)
        # tobytes() is C order for any layout and keeps 0-d arrays 0-d (ascontiguousarray
        # would turn them into shape (1,), which TVM then reads back as a vector)
        data = arr.astype(np.uint8).tobytes() if arr.dtype == np.bool_ else arr.tobytes()
        out.append(struct.pack("<QQiii", ARRAY_MAGIC, 0, 1, 0, arr.ndim))
        out.append(struct.pack("<BBH", code, bits, 1))
        out.append(struct.pack(f"<{arr.ndim}q", *arr.shape))
        out.append(struct.pack("<q", len(data)))
        out.append(data)
    return b"".join(out)


def _to_numpy(value: object, name: str) -> np.ndarray:
    """An ndarray from a NumPy array, a TVM/DLPack tensor (``.numpy()``) or a nested list."""
    if not isinstance(value, np.ndarray) and hasattr(value, "numpy"):
        value = value.numpy()
    arr = np.asarray(value)
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    if arr.dtype == object:
        raise SerializationError(f"save_param_dict: param '{name}' is not a numeric array "
                                 f"(got {type(value).__name__})")
    return arr


class _Reader:
    def __init__(self, blob: bytes):
        self.blob = memoryview(blob)
        self.pos = 0

    def take(self, n: int, what: str) -> memoryview:
        if n < 0 or self.pos + n > len(self.blob):
            raise SerializationError(f"load_param_dict: truncated data while reading {what} at "
                                     f"byte {self.pos}; the file is incomplete or not a "
                                     f"param dict")
        v = self.blob[self.pos:self.pos + n]
        self.pos += n
        return v

    def unpack(self, fmt: str, what: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))


def load_param_dict(blob: bytes | bytearray) -> dict[str, np.ndarray]:
    """Read bytes written by ``save_param_dict`` (or by NNVM/TVM) into ``{name: ndarray}``.

    Raises:
        SerializationError: bad magic, truncated data, an unknown dtype or a shape NumPy
            cannot hold; never a raw struct.error, ValueError or MemoryError (a param file
            is often untrusted input), and nothing is executed.
    """
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise SerializationError(f"load_param_dict: expected bytes; got {type(blob).__name__}")
    try:
        return _load(bytes(blob))
    except NNVMError:
        raise
    except (ValueError, TypeError, OverflowError, MemoryError, struct.error) as exc:
        # a corner this reader did not foresee must still read as a bad file, not a bug
        raise SerializationError(f"load_param_dict: malformed data ({type(exc).__name__}: "
                                 f"{str(exc)[:200]}); the file is corrupt or not a param "
                                 f"dict") from None


def _load(blob: bytes) -> dict[str, np.ndarray]:
    r = _Reader(blob)
    magic, _ = r.unpack("<QQ", "header")
    if magic != LIST_MAGIC:
        raise SerializationError(f"load_param_dict: bad magic {magic:#x}; expected "
                                 f"{LIST_MAGIC:#x}. Is this an NNVM/TVM param file?")
    (count,) = r.unpack("<Q", "name count")
    if count > len(r.blob):
        raise SerializationError(f"load_param_dict: name count {count} exceeds the data size")
    names = []
    for i in range(count):
        (ln,) = r.unpack("<Q", f"name {i} length")
        try:
            names.append(bytes(r.take(ln, f"name {i}")).decode("utf-8"))
        except UnicodeDecodeError:
            raise SerializationError(f"load_param_dict: name {i} is not UTF-8") from None
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise SerializationError(f"load_param_dict: name '{dup}' appears twice; the file is "
                                 f"corrupt")
    (n_arrays,) = r.unpack("<Q", "array count")
    if n_arrays != count:
        raise SerializationError(f"load_param_dict: {count} names but {n_arrays} arrays")
    out = {}
    for name in names:
        where = f"load_param_dict: array '{name}'"
        amagic, _, _dev_type, _dev_id, ndim = r.unpack("<QQiii", f"array '{name}' header")
        if amagic != ARRAY_MAGIC:
            raise SerializationError(f"{where}: bad array magic {amagic:#x}")
        if not 0 <= ndim <= _MAX_NDIM:
            raise SerializationError(f"{where}: ndim {ndim} out of range 0..{_MAX_NDIM}")
        code, bits, lanes = r.unpack("<BBH", f"array '{name}' dtype")
        dtype = _np_type(code, bits, lanes, where)
        shape = r.unpack(f"<{ndim}q", f"array '{name}' shape")
        if any(d < 0 for d in shape):
            raise SerializationError(f"{where}: negative dimension in shape {shape}")
        (nbytes,) = r.unpack("<q", f"array '{name}' size")
        expected = math.prod(shape) * dtype.itemsize  # exact: no int64 overflow
        if nbytes != expected:
            raise SerializationError(f"{where}: byte size {nbytes} does not match shape "
                                     f"{shape} of {dtype} ({expected} bytes)")
        # NumPy refuses any shape whose product of non-zero dims (times the item size)
        # overflows int64, even an empty one such as (0, 2**63-1)
        if math.prod(d or 1 for d in shape) * dtype.itemsize >= 1 << 63:
            raise SerializationError(f"{where}: shape {shape} is too large for any array; "
                                     f"expected at most 2**63 bytes counting non-zero dims")
        data = r.take(nbytes, f"array '{name}' data")
        raw_dtype = np.uint8 if dtype == np.bool_ else dtype
        arr = np.frombuffer(data, dtype=raw_dtype).reshape(shape).copy()
        out[name] = arr.astype(np.bool_) if dtype == np.bool_ else arr
    if r.pos != len(r.blob):
        raise SerializationError(f"load_param_dict: {len(r.blob) - r.pos} unexpected bytes "
                                 f"after the last array; the file is corrupt or not a param "
                                 f"dict")
    return out
