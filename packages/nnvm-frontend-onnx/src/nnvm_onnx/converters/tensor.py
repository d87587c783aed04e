"""Shape and data-movement ONNX ops: Reshape, Transpose, Concat, Split, Slice, Gather, Pad...

ONNX passes shapes, axes and bounds as tensors. Where the NNVM op takes them as attributes,
the converter reads the (folded) constant with ``ctx.const``; when the value is computed from
graph inputs that raises ``NeedsConstantError`` naming those inputs.
"""

from __future__ import annotations

import numpy as np

from ..errors import OnnxImportError, format_error
from ..registry import converter
from .common import cast, norm_axes, norm_axis


def _ints(arr) -> list[int]:
    return [int(v) for v in np.asarray(arr).reshape(-1)]


def reshape_to(ctx, x, shape):
    shape = tuple(int(d) for d in shape)
    if x.shape is not None and tuple(x.shape) == shape:
        return x
    return ctx.op("reshape", x, shape=shape)


@converter("Reshape", requires=("reshape",))
def _reshape_v1(ctx, node):
    return [_reshape(ctx, ctx.input(0), ctx.attr("shape"), False)]


@converter("Reshape", since=5, requires=("reshape",))
def _reshape_v5(ctx, node):
    allowzero = bool(ctx.attr("allowzero", 0))
    if ctx.data_dependent(1):  # the target exists only at run time
        return [ctx.op("dynamic_reshape", ctx.input(0), ctx.input(1), allowzero=allowzero)]
    return [_reshape(ctx, ctx.input(0), _ints(ctx.const(1)), allowzero)]


def _reshape(ctx, x, target, allowzero):
    target = list(target)
    if x.shape is None:
        if allowzero and 0 in target:
            ctx.shape(x)
        return ctx.op("reshape", x, shape=tuple(target))
    shape = x.shape
    out = []
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            if i >= len(shape):
                raise OnnxImportError(format_error(ctx.where, f"shape entry {i} is 0 (copy) but "
                                                   f"the input has rank {len(shape)}"))
            d = shape[i]
        out.append(d)
    if out.count(-1) > 1:
        raise OnnxImportError(format_error(ctx.where, "more than one -1 in the target shape",
                                           got=target))
    total = int(np.prod(shape))
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1]))
        if known == 0 or total % known:
            raise OnnxImportError(format_error(ctx.where, f"cannot reshape {shape} to {target}"))
        out[out.index(-1)] = total // known
    if total == 0 and int(np.prod(out)) == 0:
        return ctx.constant(np.zeros(out, dtype=np.dtype(ctx.dtype(x))))
    if int(np.prod(out)) != total:
        raise OnnxImportError(format_error(ctx.where, "reshape changes the element count",
                                           shape, tuple(out)))
    return reshape_to(ctx, x, out)


@converter("Flatten", requires=("reshape",))
def _flatten(ctx, node):
    x = ctx.input(0)
    if x.shape is None and ctx.data_dependent(x):
        return [_flatten_at_run_time(ctx, x, norm_axis(ctx, ctx.attr("axis", 1),
                                                       ctx.rank(x) + 1))]
    shape = ctx.shape(x)
    axis = ctx.attr("axis", 1)
    axis = axis + len(shape) if axis < 0 else axis
    outer = int(np.prod(shape[:axis])) if axis else 1
    return [reshape_to(ctx, x, (outer, int(np.prod(shape[axis:]))))]


def _flatten_at_run_time(ctx, x, axis):
    """Flatten of a tensor whose dims exist only at run time: (prod(dims[:axis]), -1)."""
    if axis == 0:
        return ctx.op("reshape", x, shape=(1, -1))
    outer = ctx.op("prod", ctx.op("shape_of", x, start=0, end=axis), axis=(0,), keepdims=True)
    target = ctx.op("concatenate", outer, ctx.constant(np.array([-1], dtype=np.int64)), axis=0)
    return ctx.op("dynamic_reshape", x, target)


@converter("Transpose", requires=("transpose",))
def _transpose(ctx, node):
    x = ctx.input(0)
    rank = ctx.rank(x)
    perm = ctx.attr("perm", None)
    perm = tuple(reversed(range(rank))) if perm is None else norm_axes(ctx, perm, rank)
    if perm == tuple(range(rank)):
        return [ctx.op("copy", x)]
    return [ctx.op("transpose", x, axes=perm)]


@converter("Concat", requires=("concatenate",))
def _concat(ctx, node):
    vals = [ctx.input(i) for i in range(ctx.num_inputs) if ctx.has_input(i)]
    rank = ctx.rank(vals[0])
    axis = norm_axis(ctx, ctx.attr("axis", 1 if ctx.opset < 4 else None), rank)
    vals = [v for v in vals if v.shape is None or v.shape[axis] != 0] or vals[:1]
    if len(vals) == 1:
        return [ctx.op("copy", vals[0])]
    return [ctx.op("concatenate", *vals, axis=axis)]


@converter("Split", requires=("strided_slice",))
def _split(ctx, node):
    x = ctx.input(0)
    if ctx.opset >= 13:
        sizes = _ints(ctx.const(1)) if ctx.has_input(1) else None
    else:
        sizes = ctx.attr("split", None)
    if x.shape is None and ctx.data_dependent(x):  # dims known only at run time
        axis = norm_axis(ctx, ctx.attr("axis", 0), ctx.rank(x))
        if not sizes:
            n = ctx.attr("num_outputs") if ctx.opset >= 18 and ctx.has_attr("num_outputs") \
                else ctx.num_outputs
            return ctx.op_multi("dynamic_split", x, axis=axis, num_outputs=n)
        bounds = np.cumsum([0] + list(sizes))
        return [ctx.op("dynamic_slice", x, *(ctx.constant(np.array([v], dtype=np.int64)) for v in
                                             (b, e, axis, 1)))
                for b, e in zip(bounds[:-1], bounds[1:])]
    shape = ctx.shape(x)
    axis = norm_axis(ctx, ctx.attr("axis", 0), len(shape))
    n = ctx.num_outputs
    dim = shape[axis]
    if not sizes:
        if ctx.opset >= 18 and ctx.has_attr("num_outputs"):
            n = ctx.attr("num_outputs")
        chunk = -(-dim // n)
        sizes = [min(chunk, dim - i * chunk) for i in range(n)]
    if sum(sizes) != dim:
        raise OnnxImportError(format_error(ctx.where, "split sizes do not add up to the axis "
                                           "length", dim, sizes))
    outs, start = [], 0
    for s in sizes:
        outs.append(slice_axis(ctx, x, axis, start, start + s))
        start += s
    return outs


def slice_axis(ctx, x, axis, start, end, step=1):
    """``x[..., start:end:step, ...]`` on one axis with concrete, normalised bounds."""
    shape = ctx.shape(x)
    rank = len(shape)
    begin = [0] * rank
    stop = list(shape)
    stride = [1] * rank
    begin[axis], stop[axis], stride[axis] = start, end, step
    return strided(ctx, x, begin, stop, stride)


def strided(ctx, x, begin, end, stride):
    """Python-slice semantics per axis with concrete, already-clamped bounds."""
    shape = ctx.shape(x)
    if all(b == 0 and e == d and s == 1 for b, e, s, d in zip(begin, end, stride, shape)):
        return ctx.op("copy", x)
    out = x
    if any(s < 0 for s in stride):
        # negative steps: gather with explicit indices on those axes
        for axis, (b, e, s) in enumerate(zip(begin, end, stride)):
            if s < 0:
                idx = np.arange(b, e, s, dtype=np.int64)
                out = ctx.op("gather", out, ctx.constant(idx), axis=axis)
        end = [len(range(b, e, s)) if s < 0 else e for b, e, s in zip(begin, end, stride)]
        begin = [0 if s < 0 else b for b, s in zip(begin, stride)]
        stride = [1 if s < 0 else s for s in stride]
        cur = ctx.shape(out)
        if all(b == 0 and e == d and s == 1 for b, e, s, d in zip(begin, end, stride, cur)):
            return out
    return ctx.op("strided_slice", out, begin=tuple(begin), end=tuple(end), stride=tuple(stride))


@converter("Slice", requires=("strided_slice",))
def _slice_v1(ctx, node):
    starts = ctx.attr("starts")
    ends = ctx.attr("ends")
    axes = ctx.attr("axes", list(range(len(starts))))
    return [_slice(ctx, ctx.input(0), starts, ends, axes, [1] * len(starts))]


@converter("Slice", since=10, requires=("strided_slice",))
def _slice_v10(ctx, node):
    x = ctx.input(0)
    # the data's dims unknown (after NonZero...), or bounds known only at run time; a graph
    # input as the data is not a reason: its shape is given, only its values vary
    if (x.shape is None and ctx.data_dependent(x)) or \
            any(ctx.has_input(i) and ctx.data_dependent(i) for i in range(1, 5)):
        return [_slice_at_run_time(ctx, x)]
    starts = _ints(ctx.const(1))
    ends = _ints(ctx.const(2))
    axes = _ints(ctx.const(3)) if ctx.has_input(3) else list(range(len(starts)))
    steps = _ints(ctx.const(4)) if ctx.has_input(4) else [1] * len(starts)
    return [_slice(ctx, ctx.input(0), starts, ends, axes, steps)]


def _slice_at_run_time(ctx, x):
    """Slice whose bounds or input dims exist only at run time (downstream of NonZero...)."""
    n = ctx.shape(1)[0] if ctx.input(1).shape else 1
    axes = ctx.input(3) if ctx.has_input(3) else ctx.constant(np.arange(n, dtype=np.int64))
    steps = ctx.input(4) if ctx.has_input(4) else ctx.constant(np.ones(n, dtype=np.int64))
    bounds = [cast(ctx, v, "int64") for v in (ctx.input(1), ctx.input(2), axes, steps)]
    return ctx.op("dynamic_slice", x, *bounds)


def _slice(ctx, x, starts, ends, axes, steps):
    if x.shape is None and ctx.data_dependent(x):
        return _slice_at_run_time(ctx, x) if ctx.opset >= 10 else ctx.op(
            "dynamic_slice", x, *(ctx.constant(np.asarray(v, dtype=np.int64)) for v in (
                starts, ends, axes, steps)))
    shape = ctx.shape(x)
    rank = len(shape)
    begin, end, stride = [0] * rank, list(shape), [1] * rank
    for s, e, a, st in zip(starts, ends, norm_axes(ctx, axes, rank), steps):
        if st == 0:
            raise OnnxImportError(format_error(ctx.where, "slice step is 0"))
        b, e2, st = slice(s, e, st).indices(shape[a])
        begin[a], end[a], stride[a] = b, e2, st
        if st > 0 and e2 < b:
            end[a] = b
    if any(len(range(b, e, s)) == 0 for b, e, s in zip(begin, end, stride)):
        out_shape = [len(range(b, e, s)) for b, e, s in zip(begin, end, stride)]
        return ctx.constant(np.zeros(out_shape, dtype=np.dtype(ctx.dtype(x))))
    return strided(ctx, x, begin, end, stride)


def _axes_arg(ctx, node, since):
    if ctx.opset >= since:
        return _ints(ctx.const(1)) if ctx.has_input(1) else None
    return ctx.attr("axes", None)


@converter("Squeeze", requires=("reshape",))
def _squeeze(ctx, node):
    x = ctx.input(0)
    axes = _axes_arg(ctx, node, 13)
    if x.shape is None and axes:  # symbolic dims stay symbolic
        return [ctx.op("squeeze", x, axis=norm_axes(ctx, axes, ctx.rank(x)))]
    shape = ctx.shape(x)
    if axes is None:
        axes = [i for i, d in enumerate(shape) if d == 1]
    axes = set(norm_axes(ctx, axes, len(shape)))
    for a in axes:
        if shape[a] != 1:
            raise OnnxImportError(format_error(ctx.where, f"cannot squeeze axis {a} of size "
                                               f"{shape[a]}"))
    return [reshape_to(ctx, x, [d for i, d in enumerate(shape) if i not in axes]) if
            axes else ctx.op("copy", x)]


@converter("Unsqueeze", requires=("reshape",))
def _unsqueeze(ctx, node):
    x = ctx.input(0)
    axes = _axes_arg(ctx, node, 13)
    if axes is None:
        raise OnnxImportError(format_error(ctx.where, "axes are required"))
    out_rank = ctx.rank(x) + len(axes)
    axes = sorted(norm_axes(ctx, axes, out_rank))
    if len(set(axes)) != len(axes):
        raise OnnxImportError(format_error(ctx.where, "repeated axes", got=axes))
    if x.shape is None:  # symbolic dims stay symbolic
        for a in axes:
            x = ctx.op("expand_dims", x, axis=a)
        return [x]
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return [reshape_to(ctx, x, shape)]


@converter("Gather", requires=("gather",))
def _gather(ctx, node):
    x = ctx.input(0)
    axis = norm_axis(ctx, ctx.attr("axis", 0), ctx.rank(x))
    return [ctx.op("gather", x, cast(ctx, ctx.input(1), "int64"), axis=axis)]


@converter("GatherElements", requires=("gather_elements",))
def _gather_elements(ctx, node):
    x = ctx.input(0)
    axis = norm_axis(ctx, ctx.attr("axis", 0), ctx.rank(x))
    return [ctx.op("gather_elements", x, cast(ctx, ctx.input(1), "int64"), axis=axis)]


@converter("GatherND", requires=("gather_nd",))
def _gather_nd(ctx, node):
    return [ctx.op("gather_nd", ctx.input(0), ctx.input(1), batch_dims=ctx.attr("batch_dims", 0))]


@converter(("ScatterElements", "Scatter"), requires=("scatter_elements",))
def _scatter_elements(ctx, node):
    x = ctx.input(0)
    axis = norm_axis(ctx, ctx.attr("axis", 0), ctx.rank(x))
    return [ctx.op("scatter_elements", x, cast(ctx, ctx.input(1), "int64"), ctx.input(2),
                   axis=axis, reduction=ctx.attr("reduction", "none"))]


@converter("ScatterND", requires=("scatter_nd",))
def _scatter_nd(ctx, node):
    return [ctx.op("scatter_nd", ctx.input(0), ctx.input(1), ctx.input(2),
                   reduction=ctx.attr("reduction", "none"))]


@converter("Expand", requires=("expand",))
def _expand(ctx, node):
    if ctx.data_dependent(1):
        return [ctx.op("dynamic_expand", ctx.input(0), cast(ctx, ctx.input(1), "int64"))]
    return [ctx.op("expand", ctx.input(0), shape=tuple(_ints(ctx.const(1))))]


@converter("Tile", requires=("tile",))
def _tile(ctx, node):
    if ctx.data_dependent(1):
        return [ctx.op("dynamic_tile", ctx.input(0), cast(ctx, ctx.input(1), "int64"))]
    return [ctx.op("tile", ctx.input(0), reps=tuple(_ints(ctx.const(1))))]


@converter("Range", requires=("range",))
def _range(ctx, node):
    return [ctx.op("range", ctx.input(0), ctx.input(1), ctx.input(2))]


@converter("TopK", requires=("topk",))
def _topk_v1(ctx, node):
    x = ctx.input(0)
    axis = norm_axis(ctx, ctx.attr("axis", -1), ctx.rank(x))
    if ctx.opset >= 10 and ctx.data_dependent(1):  # K exists only at run time
        return ctx.op_multi("dynamic_topk", x, cast(ctx, ctx.input(1), "int64"), axis=axis,
                            largest=bool(ctx.attr("largest", 1)),
                            sorted=bool(ctx.attr("sorted", 1)))[:2]
    k = ctx.attr("k") if ctx.opset < 10 else _ints(ctx.const(1))[0]
    return ctx.op_multi("topk", x, k=k, axis=axis, largest=bool(ctx.attr("largest", 1)),
                        sorted=bool(ctx.attr("sorted", 1)))[:2]


@converter("CumSum", requires=("cumsum",))
def _cumsum(ctx, node):
    x = ctx.input(0)
    axis = norm_axis(ctx, _ints(ctx.const(1))[0], ctx.rank(x))
    return [ctx.op("cumsum", x, axis=axis, exclusive=bool(ctx.attr("exclusive", 0)),
                   reverse=bool(ctx.attr("reverse", 0)))]


@converter("OneHot", requires=("one_hot",))
def _one_hot(ctx, node):
    depth = int(np.asarray(ctx.const(1)).reshape(-1)[0])
    return [ctx.op("one_hot", ctx.input(0), ctx.input(2), depth=depth,
                   axis=ctx.attr("axis", -1))]


@converter("Trilu", requires=("trilu",))
def _trilu(ctx, node):
    k = int(np.asarray(ctx.const(1)).reshape(-1)[0]) if ctx.has_input(1) else 0
    return [ctx.op("trilu", ctx.input(0), upper=bool(ctx.attr("upper", 1)), k=k)]


@converter("EyeLike", requires=("eye_like",))
def _eye_like(ctx, node):
    from ..tensors import onnx_dtype_name

    dtype = ctx.attr("dtype", None)
    dtype = onnx_dtype_name(dtype, ctx.where) if dtype is not None else ctx.dtype(0)
    return [ctx.op("eye_like", ctx.input(0), k=ctx.attr("k", 0), dtype=dtype)]


@converter("DepthToSpace", requires=("depth_to_space",))
def _d2s(ctx, node):
    return [ctx.op("depth_to_space", ctx.input(0), blocksize=ctx.attr("blocksize"),
                   mode=ctx.attr("mode", "DCR"))]


@converter("SpaceToDepth", requires=("space_to_depth",))
def _s2d(ctx, node):
    return [ctx.op("space_to_depth", ctx.input(0), blocksize=ctx.attr("blocksize"),
                   mode=ctx.attr("mode", "DCR"))]


@converter("NonZero", requires=("non_zero",))
def _non_zero(ctx, node):
    return [ctx.op("non_zero", ctx.input(0))]


@converter("Compress", requires=("compress",))
def _compress(ctx, node):
    axis = ctx.attr("axis", None)
    if axis is not None:
        axis = norm_axis(ctx, axis, ctx.rank(0))
    return [ctx.op("compress", ctx.input(0), cast(ctx, ctx.input(1), "bool"), axis=axis)]


@converter("Unique", requires=("unique",))
def _unique(ctx, node):
    axis = ctx.attr("axis", None)
    if axis is not None:
        axis = norm_axis(ctx, axis, ctx.rank(0))
    return ctx.op_multi("unique", ctx.input(0), axis=axis, sorted=bool(ctx.attr("sorted", 1)))


@converter("ReverseSequence", requires=("reverse_sequence",))
def _reverse_sequence(ctx, node):
    return [ctx.op("reverse_sequence", ctx.input(0), ctx.input(1),
                   batch_axis=ctx.attr("batch_axis", 1), time_axis=ctx.attr("time_axis", 0))]


@converter("Pad", requires=("pad",))
def _pad_v2(ctx, node):
    pads = ctx.attr("pads" if ctx.opset >= 2 else "paddings")
    return [_pad(ctx, ctx.input(0), pads, ctx.attr("value", 0.0), ctx.attr("mode", "constant"))]


@converter("Pad", since=11, requires=("pad",))
def _pad_v11(ctx, node):
    x = ctx.input(0)
    rank = ctx.rank(x)
    pads = _ints(ctx.const(1))
    value = ctx.const(2, None)
    value = 0 if value is None or np.asarray(value).size == 0 else \
        np.asarray(value).reshape(-1)[0].item()
    if ctx.has_input(3):
        axes = norm_axes(ctx, _ints(ctx.const(3)), rank)
        full = [0] * (2 * rank)
        for k, a in enumerate(axes):
            full[a], full[a + rank] = pads[k], pads[k + len(axes)]
        pads = full
    return [_pad(ctx, x, pads, value, ctx.attr("mode", "constant"))]


def _pad(ctx, x, pads, value, mode):
    rank = len(pads) // 2
    if len(pads) != 2 * ctx.rank(x):
        raise OnnxImportError(format_error(ctx.where, "pads must have 2 * rank entries",
                                           2 * ctx.rank(x), len(pads)))
    if any(p < 0 for p in pads):
        shape = ctx.shape(x)
        starts = [max(0, -p) for p in pads[:rank]]
        ends = [d - max(0, -p) for d, p in zip(shape, pads[rank:])]
        x = strided(ctx, x, starts, ends, [1] * rank)
        pads = [max(0, p) for p in pads]
    if not any(pads):
        return ctx.op("copy", x)
    if mode != "constant":
        return _pad_by_gather(ctx, x, pads, mode)
    width = tuple((pads[i], pads[i + rank]) for i in range(rank))
    return ctx.op("pad", x, pad_width=width, pad_value=float(value))


_NP_PAD_MODES = {"reflect": "reflect", "edge": "edge", "wrap": "wrap"}


def _pad_by_gather(ctx, x, pads, mode):
    """reflect/edge/wrap padding as one gather per padded axis with precomputed indices."""
    if mode not in _NP_PAD_MODES:
        raise OnnxImportError(format_error(ctx.where, f"unknown pad mode '{mode}'",
                                           fix="Use constant, reflect, edge or wrap"))
    shape = ctx.shape(x)
    rank = len(shape)
    for axis in range(rank):
        before, after = pads[axis], pads[axis + rank]
        if before == 0 and after == 0:
            continue
        idx = np.pad(np.arange(shape[axis], dtype=np.int64), (before, after),
                     mode=_NP_PAD_MODES[mode])
        x = ctx.op("gather", x, ctx.constant(idx), axis=axis)
    return x


@converter("TensorScatter", since=24, requires=("tensor_scatter",))
def _tensor_scatter(ctx, node):
    past = ctx.input(0)
    axis = norm_axis(ctx, ctx.attr("axis", -2), ctx.rank(past))
    if axis == 0:
        raise OnnxImportError(format_error(ctx.where, "axis 0 is the batch axis",
                                           fix="Use the sequence axis"))
    ins = [past, ctx.input(1)]
    if ctx.has_input(2):
        ins.append(cast(ctx, ctx.input(2), "int64"))
    return [ctx.op("tensor_scatter", *ins, axis=axis, mode=ctx.attr("mode", "linear"),
                   use_indices=ctx.has_input(2))]
