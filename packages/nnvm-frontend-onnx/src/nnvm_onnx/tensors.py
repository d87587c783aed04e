"""ONNX tensors, dtypes and attributes as NumPy values and NNVM dtype names.

NNVM knows a fixed set of dtypes (``nnvm.params.DTYPES``); ONNX has more (strings, complex,
float8, int4...). Converting through one function keeps the "which dtypes work" answer in one
place and turns the others into an error that names the tensor.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from nnvm.params import DTYPES

from .errors import OnnxImportError, OnnxUnsupportedError, format_error


def onnx_dtype_name(elem_type: int, where: str) -> str:
    """The NNVM dtype name of an ONNX element type, or an error naming ``where``."""
    from onnx import TensorProto, helper

    if elem_type == TensorProto.BFLOAT16:
        return "bfloat16"
    if elem_type == TensorProto.STRING:
        return "string"
    try:
        name = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except (KeyError, TypeError, ValueError):
        name = None
    if name not in DTYPES:
        label = TensorProto.DataType.Name(elem_type) if elem_type in \
            TensorProto.DataType.values() else str(elem_type)
        raise OnnxUnsupportedError(format_error(
            where, f"ONNX element type {label} is not supported",
            fix=f"NNVM dtypes are {', '.join(DTYPES)}"))
    return name


def onnx_elem_type(dtype: str) -> int:
    """The ONNX element type of an NNVM dtype name."""
    from onnx import TensorProto, helper

    if dtype == "bfloat16":
        return TensorProto.BFLOAT16
    if dtype == "string":
        return TensorProto.STRING
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def np_dtype(name: str):
    """The NumPy dtype of an NNVM dtype name (ml_dtypes types, "string" = object)."""
    from nnvm.dtypes import np_dtype as _np_dtype

    return _np_dtype(name)


def tensor_to_array(tensor, where: str, base_dir: str | None = None) -> np.ndarray:
    """A TensorProto as a NumPy array in an NNVM dtype, with errors that name ``where``."""
    from onnx import numpy_helper

    dtype = onnx_dtype_name(tensor.data_type, where)
    try:
        arr = numpy_helper.to_array(tensor, base_dir or "")
    except Exception as exc:  # noqa: BLE001 - protobuf payloads can be anything
        raise OnnxImportError(format_error(where, f"tensor '{tensor.name}' cannot be decoded: "
                                           f"{exc}", fix="The file is corrupted or truncated; "
                                           "re-export the model")) from None
    expected = tuple(int(d) for d in tensor.dims)
    if tuple(arr.shape) != expected:
        raise OnnxImportError(format_error(where, f"tensor '{tensor.name}' data does not match "
                                           "its dims", expected, arr.shape))
    return np.asarray(arr.astype(np_dtype(dtype), copy=False), order="C")


def attribute_value(attr, where: str) -> Any:
    """A Python value for an AttributeProto (graphs stay GraphProto, tensors become arrays)."""
    from onnx import AttributeProto as A

    t = attr.type
    if t == A.FLOAT:
        return float(attr.f)
    if t == A.INT:
        return int(attr.i)
    if t == A.STRING:
        return attr.s.decode("utf-8", errors="replace")
    if t == A.TENSOR:
        return tensor_to_array(attr.t, where)
    if t == A.GRAPH:
        return attr.g
    if t == A.FLOATS:
        return [float(x) for x in attr.floats]
    if t == A.INTS:
        return [int(x) for x in attr.ints]
    if t == A.STRINGS:
        return [s.decode("utf-8", errors="replace") for s in attr.strings]
    if t == A.TENSORS:
        return [tensor_to_array(x, where) for x in attr.tensors]
    if t == A.GRAPHS:
        return list(attr.graphs)
    raise OnnxUnsupportedError(format_error(where, f"attribute '{attr.name}' has unsupported "
                                            f"type {t}"))
