"""Element types: names, NumPy dtypes, byte widths and DLPack codes, in one table.

The standard NumPy types need nothing else; the low-precision ones that ONNX and TVM use
(bfloat16, float8 variants, float4, int4/uint4, int2/uint2) come from the ``ml_dtypes`` package, imported
only when such a type is actually used (``pip install nnvm-core[bfloat16]``).
"""

from __future__ import annotations

import numpy as np

from .errors import NNVMError

#: name -> (DLPack type code, bits). NumPy-native types first, then the ml_dtypes ones.
_TABLE: dict[str, tuple[int, int]] = {
    "bool": (6, 8),
    "int8": (0, 8), "int16": (0, 16), "int32": (0, 32), "int64": (0, 64),
    "uint8": (1, 8), "uint16": (1, 16), "uint32": (1, 32), "uint64": (1, 64),
    "float16": (2, 16), "float32": (2, 32), "float64": (2, 64),
    "bfloat16": (4, 16),
    "float8_e4m3fn": (10, 8), "float8_e4m3fnuz": (11, 8), "float8_e5m2": (12, 8),
    "float8_e5m2fnuz": (13, 8), "float8_e8m0fnu": (14, 8), "float4_e2m1fn": (17, 4),
    "int4": (0, 4), "uint4": (1, 4), "int2": (0, 2), "uint2": (1, 2),
}
#: Types that need ml_dtypes.
EXTENDED = frozenset(tuple(_TABLE)[tuple(_TABLE).index("bfloat16"):])
#: Variable-length text: NumPy object arrays of Python ``str``. Runs on the reference target
#: (string ops: StringConcat, RegexFullMatch...); it has no DLPack code and no fixed width, so
#: it cannot be stored in param dicts or compiled by native backends.
STRING = "string"
#: Every dtype name NNVM accepts.
DTYPES: tuple[str, ...] = tuple(_TABLE) + (STRING,)
_FLOATS = frozenset({"float16", "float32", "float64", "bfloat16", "float8_e4m3fn",
                     "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
                     "float4_e2m1fn"})


def np_dtype(name: str) -> np.dtype:
    """The NumPy dtype for ``name`` (importing ml_dtypes for the extended types)."""
    if name == STRING:
        return np.dtype(object)
    if name in EXTENDED:
        try:
            import ml_dtypes  # noqa: F401 - registers the names with NumPy
        except ImportError:
            raise NNVMError(f"dtype {name} needs the ml_dtypes package: "
                            f"pip install nnvm-core[bfloat16]") from None
    if name not in _TABLE:
        raise NNVMError(f"unknown dtype {name!r}; valid: {', '.join(DTYPES)}")
    return np.dtype(name)


def name_of(dtype) -> str:
    """The NNVM name of a NumPy dtype (or array), e.g. ``float32``, ``float8_e4m3fn``."""
    name = np.dtype(getattr(dtype, "dtype", dtype)).name
    if name == "object":
        return STRING
    if name not in _TABLE:
        raise NNVMError(f"dtype {name} is not supported; valid: {', '.join(DTYPES)}")
    return name


def itemsize(name: str | None) -> int:
    """Bytes per element as stored in memory (sub-byte types take one byte each)."""
    if name is None:
        return 4
    if name == STRING:
        return np.dtype(object).itemsize  # one reference per element
    return max(1, _TABLE[name][1] // 8) if name in _TABLE else np.dtype(name).itemsize


def dl_type(name: str) -> tuple[int, int]:
    """``(DLPack type code, bits)`` as used by TVM and the param-dict format."""
    if name == STRING:
        raise NNVMError("dtype string has no DLPack type: string tensors live only in memory "
                        "on the reference target (not in param dicts or native backends); "
                        "keep strings out of params, or encode them as integer ids")
    return _TABLE[name]


def from_dl_type(code: int, bits: int) -> str | None:
    """The dtype name for a DLPack ``(code, bits)``; None if unknown."""
    if code == 1 and bits == 1:
        return "bool"
    for name, key in _TABLE.items():
        if key == (code, bits):
            return name
    return None


def is_float(name: str) -> bool:
    return name in _FLOATS
