"""ONNX reductions onto NNVM's sum/mean/max/min/prod/argmax/argmin (axis tuple, keepdims).

The composite ones (L1, L2, LogSum, LogSumExp, SumSquare) are lowered to those plus
elementwise ops, which a fusing backend turns back into one kernel.
"""

from __future__ import annotations

import numpy as np

from ..registry import converter
from .common import cast, norm_axes, norm_axis

_AXES_AS_INPUT = {"ReduceSum": 13}  # the others moved axes to an input at opset 18


def _axes(ctx, node):
    since = _AXES_AS_INPUT.get(node.op_type, 18)
    if ctx.opset >= since:
        axes = ctx.const(1, None) if ctx.has_input(1) else None
        axes = None if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]
    else:
        axes = ctx.attr("axes", None)
    if not axes:
        if ctx.attr("noop_with_empty_axes", 0):
            return None
        return ()
    return norm_axes(ctx, axes, ctx.rank(0))


def _reduce(kind):
    def convert(ctx, node):
        x = ctx.input(0)
        axes = _axes(ctx, node)
        if axes is None:
            return [ctx.op("copy", x)]
        keep = bool(ctx.attr("keepdims", 1))
        kw = dict(axis=axes, keepdims=keep)
        if kind in ("sum", "mean", "max", "min", "prod"):
            if x.shape and 0 in x.shape and kind in ("max", "min"):
                return [_empty_extreme(ctx, x, axes, keep, kind)]
            return [ctx.op(kind, x, **kw)]
        if kind == "l1":
            return [ctx.op("sum", ctx.op("abs", x), **kw)]
        if kind == "sumsquare":
            return [ctx.op("sum", ctx.op("broadcast_mul", x, x), **kw)]
        if kind == "l2":
            sq = ctx.op("sum", ctx.op("broadcast_mul", x, x), **kw)
            if ctx.dtype(x)[0] in "iu":
                return [cast(ctx, ctx.op("sqrt", cast(ctx, sq, "float64")), ctx.dtype(x))]
            return [ctx.op("sqrt", sq)]
        if kind == "logsum":
            return [ctx.op("log", ctx.op("sum", x, **kw))]
        if kind == "logsumexp":
            if x.shape and 0 in x.shape:
                return [ctx.op("log", ctx.op("sum", x, **kw))]
            m = ctx.op("max", x, axis=axes, keepdims=True)
            s = ctx.op("sum", ctx.op("exp", ctx.op("broadcast_sub", x, m)), axis=axes,
                       keepdims=True)
            out = ctx.op("broadcast_add", ctx.op("log", s), m)
            if not keep:
                out = ctx.op("sum", out, axis=axes, keepdims=False)
            return [out]
        raise AssertionError(kind)
    return convert


def _empty_extreme(ctx, x, axes, keep, kind):
    """max/min over an empty axis: ONNX defines -inf/+inf (the identity) as the result."""
    shape = list(ctx.shape(x))
    red = axes or tuple(range(len(shape)))
    out = [1 if i in red else d for i, d in enumerate(shape)] if keep else \
        [d for i, d in enumerate(shape) if i not in red]
    dt = np.dtype(ctx.dtype(x))
    if dt.kind == "b":
        fill = kind == "min"
    elif dt.kind == "f":
        fill = -np.inf if kind == "max" else np.inf
    else:
        info = np.iinfo(dt)
        fill = info.min if kind == "max" else info.max
    return ctx.constant(np.full(out, fill, dtype=dt))


for _onnx, _kind in (("ReduceSum", "sum"), ("ReduceMean", "mean"), ("ReduceMax", "max"),
                     ("ReduceMin", "min"), ("ReduceProd", "prod"), ("ReduceL1", "l1"),
                     ("ReduceL2", "l2"), ("ReduceLogSum", "logsum"),
                     ("ReduceLogSumExp", "logsumexp"), ("ReduceSumSquare", "sumsquare")):
    converter(_onnx, requires=("sum", "max"))(_reduce(_kind))


def _arg(kind):
    def convert(ctx, node):
        x = ctx.input(0)
        rank = ctx.rank(x)
        axis = norm_axis(ctx, ctx.attr("axis", 0), rank)
        keep = bool(ctx.attr("keepdims", 1))
        if ctx.attr("select_last_index", 0):
            n = ctx.shape(x)[axis]
            rev = ctx.constant(np.arange(n - 1, -1, -1, dtype=np.int64))
            idx = ctx.op(kind, ctx.op("gather", x, rev, axis=axis), axis=(axis,),
                         keepdims=keep)
            return [ctx.op("broadcast_sub", ctx.constant(np.array(n - 1, dtype=np.int64)), idx)]
        return [ctx.op(kind, x, axis=(axis,), keepdims=keep)]
    return convert


converter("ArgMax", requires=("argmax",))(_arg("argmax"))
converter("ArgMin", requires=("argmin",))(_arg("argmin"))
