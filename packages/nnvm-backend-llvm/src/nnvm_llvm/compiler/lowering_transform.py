"""Lowering rules of the indexing and data-movement ops: take/gather, slicing, split, tile,
expand, trilu, one_hot, depth/space rearrangements, generators, argmax/argmin, cumsum.

Every rule is an index mapping onto shapes that inference already fixed, so slices are
resolved with Python's own ``slice.indices`` at build time. Indices read from tensors are
wrapped (negative = from the end) and then clamped, so a bad index reads a valid element
instead of memory outside the tensor (the reference kernel raises for those instead).
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import te, topi

from .lowering import _const, _reduce_axes, register


def _wrap(i, size: int):
    """A tensor-read index: negative counts from the end, then clamped into [0, size)."""
    dt = i.dtype
    i = tvm.tirx.Select(i < _const(0, dt), i + _const(size, dt), i)
    return te.max(te.min(i, _const(size - 1, dt)), _const(0, dt)).astype("int64")


@register("take")
def _take(attrs, ins, outs, ctx):
    x, idx = ins
    out_shape = outs[0][0]
    ax = attrs.get("axis")
    ni = len(idx.shape)
    if ax is None:
        size = int(np.prod([int(d) for d in x.shape]))
        flat = topi.reshape(x, (size,))

        def clip(v):
            return te.max(te.min(v, _const(size - 1, v.dtype)), _const(0, v.dtype))
        return te.compute(out_shape, lambda *i: flat[clip(idx[i]).astype("int64")],
                          name=ctx.name)
    a = ax % len(x.shape)
    size = int(x.shape[a])

    def body(*i):
        v = idx[i[a:a + ni]]
        v = te.max(te.min(v, _const(size - 1, v.dtype)), _const(0, v.dtype)).astype("int64")
        return x[i[:a] + (v,) + i[a + ni:]]
    return te.compute(out_shape, body, name=ctx.name)


@register("gather")
def _gather(attrs, ins, outs, ctx):
    x, idx = ins
    a = attrs["axis"] % len(x.shape)
    ni = len(idx.shape)
    size = int(x.shape[a])
    return te.compute(outs[0][0], lambda *i: x[i[:a] + (_wrap(idx[i[a:a + ni]], size),)
                                               + i[a + ni:]], name=ctx.name)


@register("gather_elements")
def _gather_elements(attrs, ins, outs, ctx):
    x, idx = ins
    a = attrs["axis"] % len(x.shape)
    size = int(x.shape[a])
    return te.compute(outs[0][0], lambda *i: x[i[:a] + (_wrap(idx[i], size),) + i[a + 1:]],
                      name=ctx.name)


@register("gather_nd")
def _gather_nd(attrs, ins, outs, ctx):
    x, idx = ins
    b = attrs["batch_dims"]
    m = int(idx.shape[-1])
    ni = len(idx.shape)

    def body(*i):
        lead = i[:ni - 1]
        pos = [_wrap(idx[lead + (_const(k, "int64"),)], int(x.shape[b + k]))
               for k in range(m)]
        return x[tuple(lead[:b]) + tuple(pos) + tuple(i[ni - 1:])]
    return te.compute(outs[0][0], body, name=ctx.name)


def _slice_starts(attrs, shape):
    begin, end = tuple(attrs["begin"]), tuple(attrs["end"])
    stride = tuple(attrs.get("stride") or ())
    starts, steps = [], []
    for d, n in enumerate(shape):
        st = stride[d] if d < len(stride) else 1
        sl = slice(begin[d] if d < len(begin) else None, end[d] if d < len(end) else None, st)
        start, _, step = sl.indices(n)
        starts.append(start)
        steps.append(step)
    return starts, steps


@register("strided_slice")
def _strided_slice(attrs, ins, outs, ctx):
    x = ins[0]
    starts, steps = _slice_starts(attrs, [int(d) for d in x.shape])
    return te.compute(outs[0][0], lambda *i: x[tuple(s + k * st for k, s, st in
                                                     zip(i, starts, steps))], name=ctx.name)


def _shifted(x, a, off):
    return lambda *i: x[i[:a] + (i[a] + off,) + i[a + 1:]]


def _pieces(x, axis, sizes, name):
    a = axis % len(x.shape)
    res, off = [], 0
    for n, size in enumerate(sizes):
        shape = tuple(int(d) for d in x.shape[:a]) + (size,) + tuple(
            int(d) for d in x.shape[a + 1:])
        res.append(te.compute(shape, _shifted(x, a, off), name=f"{name}_{n}"))
        off += size
    return res


@register("split")
def _split(attrs, ins, outs, ctx):
    a = attrs["axis"] % len(ins[0].shape)
    return _pieces(ins[0], a, [int(s[0][a]) for s in outs], ctx.name)


@register("_split_like")
def _split_like(attrs, ins, outs, ctx):
    a = attrs["axis"] % len(ins[0].shape)
    return _pieces(ins[0], a, [int(s[0][a]) for s in outs], ctx.name)


@register("tile")
def _tile(attrs, ins, outs, ctx):
    x = ins[0]
    dims = [int(d) for d in x.shape]
    return te.compute(outs[0][0], lambda *i: x[tuple(v % n for v, n in zip(i, dims))],
                      name=ctx.name)


def _broadcast_read(x, out_shape):
    """Read ``x`` at an index of ``out_shape`` with numpy broadcasting."""
    off = len(out_shape) - len(x.shape)

    def at(i):
        return x[tuple(0 if int(x.shape[d]) == 1 and int(out_shape[d + off]) != 1 else
                       i[d + off] for d in range(len(x.shape)))]
    return at


@register("expand", "elemwise")
def _expand(attrs, ins, outs, ctx):
    shape = outs[0][0]
    at = _broadcast_read(ins[0], shape)
    return te.compute(shape, lambda *i: at(i), name=ctx.name)


@register("expand_like", "elemwise")
def _expand_like(attrs, ins, outs, ctx):
    x = ins[0]
    shape = outs[0][0]
    if len(x.shape) != len(shape):  # the reduction dropped its axes
        axes = _reduce_axes(attrs, len(shape))
        kept = [d for d in range(len(shape)) if d not in axes]
        return te.compute(shape, lambda *i: x[tuple(i[d] for d in kept)], name=ctx.name)
    at = _broadcast_read(x, shape)
    return te.compute(shape, lambda *i: at(i), name=ctx.name)


@register("trilu")
def _trilu(attrs, ins, outs, ctx):
    x = ins[0]
    k, upper = int(attrs["k"]), bool(attrs["upper"])
    if len(x.shape) < 2:
        return te.compute(x.shape, lambda *i: x[i], name=ctx.name)

    def body(*i):
        r, c = i[-2], i[-1]
        keep = (c - r >= k) if upper else (c - r <= k)
        return tvm.tirx.Select(keep, x[i], _const(0, x.dtype))
    return te.compute(x.shape, body, name=ctx.name)


@register("one_hot")
def _one_hot(attrs, ins, outs, ctx):
    idx, values = ins
    depth = int(attrs["depth"])
    shape = outs[0][0]
    ax = attrs["axis"] % len(shape)

    def body(*i):
        v = idx[i[:ax] + i[ax + 1:]].astype("int64")
        v = tvm.tirx.Select(v < _const(0, "int64"), v + _const(depth, "int64"), v)
        return tvm.tirx.Select(v == i[ax].astype("int64"), values[1], values[0])
    return te.compute(shape, body, name=ctx.name)


@register("depth_to_space")
def _depth_to_space(attrs, ins, outs, ctx):
    x = ins[0]
    bs = int(attrs["blocksize"])
    c_out = int(outs[0][0][1])
    dcr = attrs.get("mode", "DCR") == "DCR"

    def body(n, c, h, w):
        bh, bw = h % bs, w % bs
        ch = (bh * bs + bw) * c_out + c if dcr else c * bs * bs + bh * bs + bw
        return x[n, ch, h // bs, w // bs]
    return te.compute(outs[0][0], body, name=ctx.name)


@register("space_to_depth")
def _space_to_depth(attrs, ins, outs, ctx):
    x = ins[0]
    bs = int(attrs["blocksize"])
    c_in = int(x.shape[1])
    dcr = attrs.get("mode", "DCR") == "DCR"

    def body(n, c, h, w):
        if dcr:
            blk, ch = c // c_in, c % c_in
        else:
            ch, blk = c // (bs * bs), c % (bs * bs)
        return x[n, ch, h * bs + blk // bs, w * bs + blk % bs]
    return te.compute(outs[0][0], body, name=ctx.name)


# -- generators ------------------------------------------------------------------------------

@register("arange")
def _arange(attrs, ins, outs, ctx):
    (n,), dtype = outs[0]
    start, step = float(attrs["start"]), float(attrs["step"])
    # as the reference: computed in float64, then converted (integers truncate)
    return te.compute((n,), lambda i: (_const(start, "float64") + _const(step, "float64")
                                       * i.astype("float64")).astype(dtype), name=ctx.name)


@register("eye_like")
def _eye_like(attrs, ins, outs, ctx):
    shape, dtype = outs[0]
    k = int(attrs["k"])
    return te.compute(shape, lambda r, c: tvm.tirx.Select(
        c - r == k, _const(1, dtype), _const(0, dtype)), name=ctx.name)


@register("cast_like", "elemwise")
def _cast_like(attrs, ins, outs, ctx):
    x, dtype = ins[0], outs[0][1]
    return te.compute(x.shape, lambda *i: x[i].astype(dtype), name=ctx.name)


@register("collapse_sum_like", "reduce")
def _collapse_sum_like(attrs, ins, outs, ctx):
    g = ins[0]
    shape = outs[0][0]
    extra = len(g.shape) - len(shape)
    axes = list(range(extra)) + [d + extra for d, n in enumerate(shape)
                                 if n == 1 and int(g.shape[d + extra]) != 1]
    if not axes:
        return te.compute(shape, lambda *i: g[i], name=ctx.name)
    s = topi.sum(g, axis=axes, keepdims=True)
    return topi.reshape(s, shape)


# -- argmax / argmin, cumulative ops ---------------------------------------------------------

def _arg_supports(attrs, shapes):
    x = shapes[0]
    if x is None:
        return "unknown input shape"
    axes = _reduce_axes(attrs, len(x))
    if not axes or (len(axes) > 1 and len(x) > 1):
        return "argmax/argmin over every axis of a N-d input (llvm lowers one axis)"
    return None


def _arg_rule(largest):
    def rule(attrs, ins, outs, ctx):
        x = ins[0]
        shape, dtype = outs[0]
        ax = _reduce_axes(attrs, len(x.shape))[0]
        keep = bool(attrs.get("keepdims"))
        n = int(x.shape[ax])
        k = te.reduce_axis((0, n), "k")

        def fcombine(a, b):
            # first index wins ties, as numpy
            if largest:
                take_b = tvm.tirx.Or(b[1] > a[1], tvm.tirx.And(b[1] == a[1], b[0] < a[0]))
            else:
                take_b = tvm.tirx.Or(b[1] < a[1], tvm.tirx.And(b[1] == a[1], b[0] < a[0]))
            return (tvm.tirx.Select(take_b, b[0], a[0]), tvm.tirx.Select(take_b, b[1], a[1]))

        def fidentity(t0, t1):
            lo = tvm.te.min_value(t1) if largest else tvm.te.max_value(t1)
            return tvm.tirx.const(-1, t0), lo

        reducer = te.comm_reducer(fcombine, fidentity, name="argreduce")
        red_shape = tuple(int(d) for i, d in enumerate(x.shape) if i != ax)

        def body(*i):
            full = i[:ax] + (k,) + i[ax:]
            return reducer((k.var.astype("int64"), x[full]), axis=k)
        idx, _ = te.compute(red_shape, body, name="anchor_arg")
        if keep:
            return te.compute(shape, lambda *i: idx[i[:ax] + i[ax + 1:]].astype(dtype),
                              name=ctx.name)
        return te.compute(shape, lambda *i: idx[i].astype(dtype), name=ctx.name)
    return rule


register("argmax", "reduce", supports=_arg_supports)(_arg_rule(True))
register("argmin", "reduce", supports=_arg_supports)(_arg_rule(False))


def _cum_rule(prod):
    def rule(attrs, ins, outs, ctx):
        x = ins[0]
        ax = attrs["axis"] % len(x.shape)
        n = int(x.shape[ax])
        excl, rev = bool(attrs["exclusive"]), bool(attrs["reverse"])
        k = te.reduce_axis((0, n), "k")

        def body(*i):
            pos = i[ax]
            src = x[i[:ax] + (k,) + i[ax + 1:]]
            if rev:
                cond = (k > pos) if excl else (k >= pos)
            else:
                cond = (k < pos) if excl else (k <= pos)
            ident = _const(1 if prod else 0, x.dtype)
            v = tvm.tirx.Select(cond, src, ident)
            if prod:
                mul = te.comm_reducer(lambda a, b: a * b, lambda t: tvm.tirx.const(1, t))
                return mul(v, axis=k)
            return te.sum(v, axis=k)
        return te.compute(x.shape, body, name="anchor_cum")
    return rule


register("cumsum", "reduce")(_cum_rule(False))
register("cumprod", "reduce")(_cum_rule(True))
