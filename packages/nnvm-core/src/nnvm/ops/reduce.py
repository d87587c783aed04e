"""Reductions: sum, mean, max, min, prod, argmax, argmin, and expand_like (their adjoint).

All reductions share NNVM's ``ReduceParam``: ``axis`` (empty = every axis), ``keepdims`` and
``exclude`` (reduce over the axes *not* listed). Gradients broadcast the output gradient back
with ``expand_like``, which reads the same three attributes, so every reduction's adjoint is a
graph of registered ops.
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError, TypeInferenceError
from ..op import OpPattern, OpSet
from ..params import Param
from .common import op, outputs, same_dtype, to_dtype

defs = OpSet("reduce")

REDUCE = OpPattern.COMM_REDUCE


def reduce_axes(attrs, ndim: int) -> tuple[int, ...]:
    """The sorted, non-negative axes a reduction with ``attrs`` folds on an ``ndim`` input.

    Raises:
        ShapeError: an axis is out of range or repeated.
    """
    axis = tuple(attrs.get("axis") or ())
    for a in axis:
        if not -ndim <= a < ndim:
            raise ShapeError(f"axis {a} is out of range for a {ndim}-D input; "
                             f"valid: {-ndim}..{ndim - 1}")
    norm = sorted({a % ndim for a in axis})
    if len(norm) != len(axis):
        raise ShapeError(f"axis {axis} repeats an axis")
    if not axis and not attrs.get("exclude", False):
        return tuple(range(ndim))
    if attrs.get("exclude", False):
        return tuple(a for a in range(ndim) if a not in norm)
    return tuple(norm)


def reduced_shape(attrs, shape) -> tuple[int, ...]:
    axes = reduce_axes(attrs, len(shape))
    if attrs.get("keepdims", False):
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _reduce_shape(attrs, ins, outs):
    if ins[0] is None:
        return ins, outs
    out = reduced_shape(attrs, ins[0])
    if outs[0] is not None and tuple(outs[0]) != out:
        raise ShapeError(f"output has shape {outs[0]}; expected {out}")
    return ins, [out]


def _reduce_params():
    return [Param("axis", "ints", (), "axes to reduce; empty = all"),
            Param("keepdims", "bool", False, "keep reduced axes with size 1"),
            Param("exclude", "bool", False, "reduce over the axes not in axis")]


def _kernel(fn):
    def ref(attrs, x):
        axes = reduce_axes(attrs, x.ndim)
        return to_dtype(np.asarray(fn(x, axis=axes, keepdims=attrs["keepdims"])), x)
    return ref


def _rattrs(n):
    return {"axis": n.attrs["axis"], "exclude": n.attrs["exclude"]}


def _expand(entry, like, n):
    return op("expand_like", entry, like, **_rattrs(n))


def _sum_grad(n, og):
    return [_expand(og[0], n.inputs[0], n)]


def _mean_grad(n, og):
    x = n.inputs[0]
    count = op("sum", op("ones_like", x), keepdims=True, **_rattrs(n))
    return [op("broadcast_div", _expand(og[0], x, n), count)]


def _select_grad(n, og):
    """max/min: the gradient flows to every element equal to the extreme value."""
    x = n.inputs[0]
    mask = op("broadcast_equal", x, _expand(outputs(n)[0], x, n))
    return [op("where", mask, _expand(og[0], x, n), op("zeros_like", x))]


def _prod_grad(n, og):
    """d prod / d x_i = prod / x_i (undefined where an input is exactly zero)."""
    x = n.inputs[0]
    return [op("elemwise_div", _expand(op("elemwise_mul", og[0], outputs(n)[0]), x, n), x)]


for _name, _fn, _grad, _doc in (
        ("sum", np.sum, _sum_grad, "Sum over the given axes."),
        ("mean", np.mean, _mean_grad, "Mean over the given axes."),
        ("max", np.max, _select_grad, "Maximum over the given axes."),
        ("min", np.min, _select_grad, "Minimum over the given axes."),
        ("prod", np.prod, _prod_grad, "Product over the given axes.")):
    defs.op(_name, doc=_doc, params=_reduce_params(), shape=_reduce_shape,
                dtype=same_dtype, reference=_kernel(_fn), gradient=_grad, pattern=REDUCE,
                support_level=4)


# -- argmax / argmin ----------------------------------------------------------------------------

def _arg_shape(attrs, ins, outs):
    if ins[0] is not None:
        axes = reduce_axes(attrs, len(ins[0]))
        if len(axes) > 1 and len(axes) != len(ins[0]):
            raise ShapeError(f"reduces over one axis or all axes; got axes {axes} of a "
                             f"{len(ins[0])}-D input")
    return _reduce_shape(attrs, ins, outs)


def _arg_dtype(attrs, ins, outs):
    return ins, [attrs["dtype"]]


def _arg_kernel(fn):
    def ref(attrs, x):
        axes = reduce_axes(attrs, x.ndim)
        keep = attrs["keepdims"]
        if len(axes) == 1 and x.ndim > 1:
            out = fn(x, axis=axes[0], keepdims=keep)
        elif not axes:
            out = np.zeros(x.shape, dtype=np.int64)
        else:
            out = fn(x, axis=None, keepdims=keep)
        return np.asarray(out).astype(attrs["dtype"])
    return ref


def _arg_params():
    return _reduce_params() + [Param("dtype", "dtype", "int64",
                                     "index dtype (int64 as NumPy and ONNX; NNVM used int32)")]


for _name, _fn in (("argmax", np.argmax), ("argmin", np.argmin)):
    defs.op(_name, doc=f"Index of the {_name[3:]}imum along one axis (or of the flattened "
                f"input when axis is empty); ties resolve to the first index.",
                params=_arg_params(), shape=_arg_shape, dtype=_arg_dtype,
                reference=_arg_kernel(_fn), gradient=lambda n, og: [None], pattern=REDUCE,
                support_level=4)


# -- expand_like: the adjoint of a reduction -----------------------------------------------------

def _expand_like_shape(attrs, ins, outs):
    data, like = ins
    if like is None:
        return ins, outs
    if data is not None:
        want = reduced_shape(dict(attrs, keepdims=len(data) == len(like)), like)
        if tuple(data) != want:
            raise ShapeError(f"data shape {data} is not a reduction of shape_like {like} over "
                             f"axis={attrs['axis']} (exclude={attrs['exclude']}); expected "
                             f"{want}")
    return ins, [tuple(like)]


def _expand_like_ref(attrs, x, like):
    axes = reduce_axes(attrs, like.ndim)
    if x.ndim != like.ndim:
        x = np.expand_dims(x, axes)
    return np.broadcast_to(x, like.shape).copy()


def _expand_like_dtype(attrs, ins, outs):
    t = ins[0] if ins[0] is not None else outs[0]
    if ins[0] is not None and outs[0] is not None and ins[0] != outs[0]:
        raise TypeInferenceError(f"output dtype {outs[0]} differs from data dtype {ins[0]}")
    return [t, ins[1]], [t]


defs.op("expand_like", doc="Broadcast a reduced tensor back to the shape of `shape_like`, "
            "inserting the reduced axes (axis/exclude as in sum) when they were dropped.",
            inputs=("data", "shape_like"),
            params=[Param("axis", "ints", (), "the axes that were reduced; empty = all"),
                    Param("exclude", "bool", False, "axis lists the kept axes instead")],
            shape=_expand_like_shape, dtype=_expand_like_dtype, reference=_expand_like_ref,
            gradient=lambda n, og: [op("reshape_like", op(
                "sum", og[0], keepdims=True, **_rattrs(n)), n.inputs[0]), None],
            pattern=OpPattern.BROADCAST, FIgnoreInputs=lambda attrs: [1], support_level=4)
