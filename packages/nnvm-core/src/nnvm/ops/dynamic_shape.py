"""Shapes as run-time values: the ops a host tail needs downstream of a data-dependent op.

Why a family of its own: everywhere else an ONNX shape-like input (Reshape's shape, TopK's K,
ConstantOfShape's shape, Slice's bounds) is folded to a constant at import time and becomes
an attribute. Downstream of NonZero or NonMaxSuppression it cannot be: detection heads take
``Shape`` of a thresholded set, clamp ``K`` to its size, and reshape by it. These ops read
such values as tensors at run time. ``shape_of`` and ``size_of`` know their output shape
(the input's rank is known even when its dims are not); the others leave it unknown and
carry ``TDynamicShape``, so a compiled build runs them in the host tail
(``nnvm.compiler.dynamic_region``) through these reference kernels.
"""

from __future__ import annotations

import numpy as np

from ..errors import ExecutionError
from ..op import OpPattern, OpSet
from ..params import Param
from .indexing import _topk_ref

defs = OpSet("dynamic_shape")

OPAQUE = OpPattern.OPAQUE


def _int64(attrs, ins, outs):
    return ins, ["int64"] * len(outs)


def _dtype_of_data(attrs, ins, outs):
    """Output 0 takes the data's dtype; the shape-like inputs are int64 whatever it is."""
    return ins, [ins[0]] + list(outs[1:])


def _unknown(attrs, ins, outs):
    """Output shapes are known only at run time."""
    return ins, outs


def _ints(arr) -> list[int]:
    return [int(v) for v in np.asarray(arr).reshape(-1)]


defs.op("shape_of", doc="ONNX Shape at run time: dims start..end of the input's shape as an "
        "int64 vector (start/end already normalised against the rank by the importer).",
        inputs=("data",), params=[Param("start", "int", 0, "first dim"),
                                  Param("end", "int", doc="one past the last dim")],
        shape=lambda attrs, ins, outs: (ins, [(max(attrs["end"] - attrs["start"], 0),)]),
        dtype=_int64,
        reference=lambda attrs, x: np.array(x.shape[attrs["start"]:attrs["end"]],
                                            dtype=np.int64),
        FIgnoreInputs=lambda attrs: [0], pattern=OPAQUE, support_level=4)

defs.op("size_of", doc="ONNX Size at run time: the input's element count as an int64 scalar.",
        inputs=("data",), shape=lambda attrs, ins, outs: (ins, [()]), dtype=_int64,
        reference=lambda attrs, x: np.array(x.size, dtype=np.int64),
        FIgnoreInputs=lambda attrs: [0], pattern=OPAQUE, support_level=4)


def _check_dims(where: str, dims: list[int]) -> list[int]:
    if any(d < 0 for d in dims):
        raise ExecutionError(f"{where}: shape {dims} has a negative dimension; expected sizes "
                             ">= 0; check the values that compute it")
    return dims


defs.op("constant_of_shape", doc="ONNX ConstantOfShape with a run-time shape: a tensor of "
        "`value` whose shape is the int64 input's values.", inputs=("shape",),
        params=[Param("value", "float", 0.0, "fill value"),
                Param("dtype", "dtype", "float32", "output dtype")],
        shape=_unknown, dtype=lambda attrs, ins, outs: (ins, [attrs["dtype"]]),
        reference=lambda attrs, s: np.full(_check_dims("constant_of_shape", _ints(s)),
                                           attrs["value"], dtype=attrs["dtype"]),
        pattern=OPAQUE, TDynamicShape=True, support_level=4)


def _onnx_reshape_target(shape, spec, allowzero):
    """ONNX Reshape's target: 0 copies the input dim (unless allowzero), one -1 is inferred."""
    out = [shape[i] if d == 0 and not allowzero and i < len(shape) else d
           for i, d in enumerate(spec)]
    if out.count(-1) > 1:
        raise ExecutionError(f"dynamic_reshape: target {spec} has more than one -1; expected "
                             "at most one; check the values that compute it")
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1]))
        total = int(np.prod(shape))
        if known == 0 or total % known:
            raise ExecutionError(f"dynamic_reshape: cannot reshape {tuple(shape)} to {spec}; "
                                 "expected sizes with the same element count")
        out[out.index(-1)] = total // known
    return out


defs.op("dynamic_reshape", doc="ONNX Reshape with a run-time target shape (0 copies, -1 "
        "infers).", inputs=("data", "shape"),
        params=[Param("allowzero", "bool", False, "0 means an empty dim, not a copy")],
        shape=_unknown, dtype=_dtype_of_data,
        reference=lambda attrs, x, s: x.reshape(_onnx_reshape_target(
            x.shape, _ints(s), attrs["allowzero"])),
        pattern=OPAQUE, TDynamicShape=True, support_level=4)


def _dynamic_topk_ref(attrs, x, k):
    k = _ints(k)[0]
    axis_len = x.shape[attrs["axis"] % x.ndim]
    if not 0 <= k <= axis_len:
        raise ExecutionError(f"dynamic_topk: k = {k} is out of range for an axis of length "
                             f"{axis_len}; expected 0 <= k <= {axis_len}; clamp K to the "
                             "axis length")
    return _topk_ref(dict(attrs, k=k), x)


defs.op("dynamic_topk", doc="ONNX TopK with K read at run time (e.g. min(K, detections)).",
        inputs=("data", "k"), outputs=("values", "indices"),
        params=[Param("axis", "int", -1, "axis"),
                Param("largest", "bool", True, "largest (True) or smallest"),
                Param("sorted", "bool", True, "outputs sorted (always true here)")],
        shape=_unknown, dtype=lambda attrs, ins, outs: (ins, [ins[0], "int64"]),
        reference=_dynamic_topk_ref, pattern=OPAQUE, TDynamicShape=True, support_level=4)


def _dynamic_slice_ref(attrs, x, starts, ends, axes, steps):
    index = [slice(None)] * x.ndim
    for s, e, a, st in zip(_ints(starts), _ints(ends), _ints(axes), _ints(steps)):
        if st == 0:
            raise ExecutionError("dynamic_slice: a step is 0; expected a non-zero step")
        index[a % x.ndim] = slice(*slice(s, e, st).indices(x.shape[a % x.ndim]))
    return np.array(x[tuple(index)])


defs.op("dynamic_slice", doc="ONNX Slice read at run time: bounds and/or the input's dims "
        "known only then (python slice semantics, clamped).",
        inputs=("data", "starts", "ends", "axes", "steps"), shape=_unknown,
        dtype=_dtype_of_data, reference=_dynamic_slice_ref, pattern=OPAQUE,
        TDynamicShape=True, support_level=4)

def _dynamic_split_ref(attrs, x):
    """ONNX Split without sizes: chunks of ceil(dim / n), the last one smaller."""
    axis, n = attrs["axis"] % x.ndim, attrs["num_outputs"]
    chunk = -(-x.shape[axis] // n)
    return tuple(np.array(np.take(x, np.arange(i * chunk, min((i + 1) * chunk, x.shape[axis])),
                                  axis=axis)) for i in range(n))


defs.op("dynamic_split", doc="ONNX Split into num_outputs near-equal parts of an axis whose "
        "length is known only at run time.", inputs=("data",),
        outputs=lambda attrs: [f"output{i}" for i in range(attrs["num_outputs"])],
        params=[Param("axis", "int", 0, "axis"),
                Param("num_outputs", "int", doc="how many parts")],
        shape=_unknown, dtype=lambda attrs, ins, outs: (ins, [ins[0]] * len(outs)),
        reference=_dynamic_split_ref, pattern=OPAQUE, TDynamicShape=True, support_level=4)

defs.op("dynamic_expand", doc="ONNX Expand with a run-time shape (bidirectional broadcast).",
        inputs=("data", "shape"), shape=_unknown, dtype=_dtype_of_data,
        reference=lambda attrs, x, s: np.array(np.broadcast_to(
            x, np.broadcast_shapes(x.shape, tuple(_ints(s))))),
        pattern=OPAQUE, TDynamicShape=True, support_level=4)

defs.op("dynamic_tile", doc="ONNX Tile with run-time repeats.", inputs=("data", "repeats"),
        shape=_unknown, dtype=_dtype_of_data,
        reference=lambda attrs, x, r: np.tile(x, _check_dims("dynamic_tile", _ints(r))),
        pattern=OPAQUE, TDynamicShape=True, support_level=4)
