"""Lowering rules of the ONNX-form neural-network ops: N-d and grouped convolution,
transposed convolution, N-d pooling (with max_pool's argmax indices), the normalisations
(batch/layer/instance/group/RMS/Lp/MVN/LRN) and hardmax.

Windows are written with bounds tests instead of materialised padding (``if_then_else`` is
lazy, so out-of-range elements are never read); this keeps one rule for every spatial rank
and every ceil-mode/dilation combination the reference kernels in ``nn_nd.py`` accept.
Statistics of the normalisations accumulate in float32 (float64 for float64 inputs).
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import te, topi

from ..runtime import packing
from . import conv_nd, fastmath
from .lrn_kernel import lrn_vectorised
from .lowering import _const, register

_lazy = tvm.tirx.if_then_else


def _acc(dtype: str) -> str:
    return "float64" if dtype == "float64" else "float32"


def _spatial(attrs, key, nsp, fill):
    v = attrs.get(key)
    return tuple(int(a) for a in v) if v else (fill,) * nsp


def _inside(coords, sizes):
    conds = [tvm.tirx.And(c >= 0, c < n) for c, n in zip(coords, sizes)]
    out = conds[0]
    for c in conds[1:]:
        out = tvm.tirx.And(out, c)
    return out


# -- convolution --------------------------------------------------------------------------------

def _conv_nd(x, w, bias, strides, pads_begin, dilations, groups, out_shape, dtype, name):
    nsp = len(out_shape) - 2
    cg = int(w.shape[1])
    cog = int(w.shape[0]) // groups
    sizes = [int(d) for d in x.shape[2:]]
    kk = [int(d) for d in w.shape[2:]]
    rc = te.reduce_axis((0, cg), "rc")
    rk = [te.reduce_axis((0, k), f"rk{i}") for i, k in enumerate(kk)]
    acc = _acc(dtype) if "float" in dtype else dtype
    padded = any(pads_begin) or any(
        (int(out_shape[2 + i]) - 1) * strides[i] + (kk[i] - 1) * dilations[i] + 1 > sizes[i]
        for i in range(nsp))

    def body(n, co, *o):
        ci = (co // cog) * cg + rc
        coords = [o[i] * strides[i] - pads_begin[i] + rk[i] * dilations[i] for i in range(nsp)]
        xv = x[(n, ci) + tuple(coords)]
        if padded:
            xv = _lazy(_inside(coords, sizes), xv, _const(0, x.dtype))
        return te.sum(xv.astype(acc) * w[(co, rc) + tuple(rk)].astype(acc), axis=[rc] + rk)
    y = te.compute(out_shape, body, name="anchor_conv")
    if bias is not None:
        return te.compute(out_shape, lambda n, c, *o: (y[(n, c) + o] + bias[c].astype(acc)
                                                       ).astype(dtype), name=name + "_bias")
    if acc != dtype:
        return te.compute(out_shape, lambda *i: y[i].astype(dtype), name=name + "_cast")
    return y


def _conv_nd_pack(attrs, shapes, ctx):
    """A constant weight is packed at load into the blocked kernel's layout (the kernel
    would otherwise repack it on every call)."""
    groups = int(attrs["groups"])
    bn = conv_nd.channel_block(int(shapes[1][0]) // groups, ctx.vector_lanes)
    return {1: (packing.conv_nd_layout(groups), bn)}


@register("conv", "conv_nd", pack=_conv_nd_pack)
def _conv(attrs, ins, outs, ctx):
    """Floats: the channel-blocked kernel of ``conv_nd`` (the ``conv_nd`` template); other
    dtypes: the plain reduction (the template finds no ``anchor_convnd`` and steps aside)."""
    x, w = ins[0], ins[1]
    out_shape, dtype = outs[0]
    nsp = len(out_shape) - 2
    pads = _spatial(attrs, "pads", 2 * nsp, 0)
    args = (ins[2] if len(ins) > 2 else None, _spatial(attrs, "strides", nsp, 1), pads[:nsp],
            _spatial(attrs, "dilations", nsp, 1), int(attrs["groups"]), out_shape, dtype,
            ctx.name)
    return _conv_any(x, w, args, ctx)


def _conv_any(x, w, args, ctx):
    packed = 1 in ctx.packed  # only ``conv`` asks for it: the conv_nd_{G}g layout
    if str(x.dtype) in conv_nd.ACCUMULATE and str(w.dtype) == str(x.dtype) == args[-2]:
        return conv_nd.blocked_conv(x, w, *args, ctx.vector_lanes, packed=packed)
    if packed:
        w = conv_nd.unpacked(w, args[4], int(args[5][1]))
    return _conv_nd(x, w, *args)


def grouped_conv2d(attrs, ins, outs, ctx):
    """``conv2d`` with 1 < groups < channels whose channels per group no packed block
    divides (the 2-D rule covers the rest): the blocked N-d kernel, each group's channels
    zero-padded to whole vectors. Its register tile is the ``conv_nd`` template's, so the
    kernel is fast only where ``lowering.kind_of`` gives such a group that kind (6
    channels per group at 56x56: 0.31 ms under ``conv_nd``, 15-19 ms under ``reduce``).
    It also takes the weights ``lowering.columns_packed`` routes to it, packed at load in the
    ``conv_nd`` layout (3-4 channels per group, unpadded, unit column stride)."""
    x, w = ins[0], ins[1]
    out_shape, dtype = outs[0]
    p = tuple(attrs["padding"])
    args = (ins[2] if len(ins) > 2 else None, tuple(attrs["strides"]), (p[0], p[1]),
            tuple(attrs["dilation"]), int(attrs["groups"]), out_shape, dtype, ctx.name)
    return _conv_any(x, w, args, ctx)


def _tconv_pads(attrs, x, w):
    """(strides, pads_begin, dilations) of conv_transpose as the reference derives them."""
    from nnvm.ops.nn_nd import _tconv_pads as ref_pads

    s, pb, _, d, _ = ref_pads(attrs, tuple(int(v) for v in x.shape),
                              tuple(int(v) for v in w.shape))
    return s, pb, d


@register("conv_transpose", "reduce")
def _conv_transpose(attrs, ins, outs, ctx):
    x, w = ins[0], ins[1]
    out_shape, dtype = outs[0]
    nsp = len(out_shape) - 2
    s, pb, d = _tconv_pads(attrs, x, w)
    groups = int(attrs["groups"])
    cig = int(x.shape[1]) // groups
    cog = int(w.shape[1])
    sizes = [int(v) for v in x.shape[2:]]
    kk = [int(v) for v in w.shape[2:]]
    acc = _acc(dtype)
    rc = te.reduce_axis((0, cig), "rc")
    rk = [te.reduce_axis((0, k), f"rk{i}") for i, k in enumerate(kk)]

    def body(n, co, *o):
        ci = (co // cog) * cig + rc
        num = [o[i] + pb[i] - rk[i] * d[i] for i in range(nsp)]
        coords = [te.floordiv(num[i], s[i]) for i in range(nsp)]
        ok = _inside(coords, sizes)
        for i in range(nsp):
            if s[i] > 1:
                ok = tvm.tirx.And(ok, te.floormod(num[i], s[i]) == 0)
        xv = _lazy(tvm.tirx.And(ok, _inside(num, [s[i] * sizes[i] for i in range(nsp)])),
                   x[(n, ci) + tuple(coords)], _const(0, x.dtype))
        return te.sum(xv.astype(acc) * w[(ci, co % cog) + tuple(rk)].astype(acc),
                      axis=[rc] + rk)
    y = te.compute(out_shape, body, name="anchor_conv_transpose")
    if len(ins) > 2:
        b = ins[2]
        return te.compute(out_shape, lambda n, c, *o: (y[(n, c) + o] + b[c].astype(acc)
                                                       ).astype(dtype), name=ctx.name + "_bias")
    return te.compute(out_shape, lambda *i: y[i].astype(dtype), name=ctx.name)


# -- pooling ------------------------------------------------------------------------------------

def _pool_setup(attrs, x, out_shape):
    k = tuple(int(v) for v in attrs["kernel_shape"])
    nsp = len(k)
    s = _spatial(attrs, "strides", nsp, 1)
    pads = _spatial(attrs, "pads", 2 * nsp, 0)
    d = _spatial(attrs, "dilations", nsp, 1)
    rk = [te.reduce_axis((0, kv), f"rk{i}") for i, kv in enumerate(k)]
    sizes = [int(v) for v in x.shape[2:]]
    return k, s, pads[:nsp], pads[nsp:], d, rk, sizes


def _ipow(v, p: int):
    """|v| ** p for a small integer p, as repeated products (TVM warns on pow(x, >=3))."""
    a = te.abs(v)
    out = a
    for _ in range(p - 1):
        out = out * a
    return out


def _low(dtype):
    return -np.inf if "float" in dtype else int(np.iinfo(dtype).min)


@register("max_pool", "reduce")
def _max_pool(attrs, ins, outs, ctx):
    x = ins[0]
    (out_shape, dtype), (_, idx_dtype) = outs[0], outs[1]
    k, s, pb, pe, d, rk, sizes = _pool_setup(attrs, x, out_shape)
    nsp = len(k)
    low = _low(dtype)
    kflat_strides = [int(np.prod(k[i + 1:])) for i in range(nsp)]

    def fcombine(a, b):
        take_b = tvm.tirx.Or(b[1] > a[1], tvm.tirx.And(b[1] == a[1], b[0] < a[0]))
        return (tvm.tirx.Select(take_b, b[0], a[0]), tvm.tirx.Select(take_b, b[1], a[1]))

    def fidentity(t0, t1):
        return tvm.tirx.const(1 << 30, t0), _const(low, t1)

    reducer = te.comm_reducer(fcombine, fidentity, name="maxpool_arg")
    if not attrs.get("with_indices", True):
        return _max_pool_values(x, out_shape, k, s, pb, d, rk, sizes, _const(low, dtype),
                                idx_dtype, ctx.name)
    if nsp == 2 and k[0] * k[1] >= SEPARABLE_MIN_TAPS:
        kpos, y = _separable_max(x, out_shape, k, s, pb, d, sizes, _const(low, dtype),
                                 reducer)
    else:
        kpos, y = _windowed_max(x, out_shape, k, s, pb, d, rk, sizes, _const(low, dtype),
                                reducer, kflat_strides)
    column_major = int(attrs.get("storage_order", 0)) == 1
    total = int(np.prod(sizes))

    def index(n, c, *o):
        kp = kpos[(n, c) + o].astype("int64")
        coords = []
        for i in range(nsp):
            ki = te.floormod(te.floordiv(kp, kflat_strides[i]), k[i])
            coords.append(o[i].astype("int64") * s[i] - pb[i] + ki * d[i])
        lin = _const(0, "int64")
        order = reversed(range(nsp)) if column_major else range(nsp)
        for i in order:
            lin = lin * sizes[i] + coords[i]
        nc = n.astype("int64") * int(x.shape[1]) + c.astype("int64")
        return (nc * total + lin).astype(idx_dtype)
    idx = te.compute(out_shape, index, name=ctx.name + "_indices")
    out = te.compute(out_shape, lambda *i: y[i], name=ctx.name)
    return [out, idx]


def _max_pool_values(x, out_shape, k, s, pb, d, rk, sizes, low, idx_dtype, name):
    """The window max alone, for a node whose indices nobody reads (``with_indices``
    False: an ONNX MaxPool with one output), and its hidden indices output left zero.
    Why: the argmax reducer carries a position through every tap as a (position, value)
    pair LLVM does not vectorise; a plain max reduction it does (1 thread, one process:
    a 60 x 80 window dilated by 10 over 1000 x 1000 276 -> 82 us, 3-D 2x3x5x5x5 k2 s2
    0.175 -> 0.087 us)."""
    nsp = len(k)
    if nsp == 2 and k[0] * k[1] >= SEPARABLE_MIN_TAPS:
        g, r0, rows = _read_rows(pb[0], s[0], d[0], sizes[0])
        tap = te.reduce_axis((0, k[1]), "tap")

        def row_max(b, ch, q, j):
            col = j * s[1] - pb[1] + tap * d[1]
            inside = tvm.tirx.And(col >= 0, col < sizes[1])
            return te.max(_lazy(inside, x[b, ch, q * g + r0, col], low), axis=[tap])
        best = te.compute(tuple(out_shape[:2]) + (rows, out_shape[3]), row_max,
                          name="maxpool_rows")
        rh = te.reduce_axis((0, k[0]), "rh")

        def window(b, ch, i, j):
            r = i * s[0] - pb[0] + rh * d[0]
            inside = tvm.tirx.And(r >= 0, r < sizes[0])
            return te.max(_lazy(inside, best[b, ch, te.floordiv(r - r0, g), j], low),
                          axis=[rh])
        y = te.compute(out_shape, window, name="anchor_maxpool")
    else:
        def body(n, c, *o):
            coords = [o[i] * s[i] - pb[i] + rk[i] * d[i] for i in range(nsp)]
            return te.max(_lazy(_inside(coords, sizes), x[(n, c) + tuple(coords)], low),
                          axis=rk)
        y = te.compute(out_shape, body, name="anchor_maxpool")
    return [te.compute(out_shape, lambda *i: y[i], name=name),
            te.compute(out_shape, lambda *i: tvm.tirx.const(0, idx_dtype),
                       name=name + "_indices")]


def _read_rows(pad, stride, dilation, h):
    """The input rows some window reads, ``r0 + g * q`` for ``q < rows`` with ``g =
    gcd(stride, dilation)``: ``(g, r0, rows)``."""
    g = int(np.gcd(stride, dilation))
    r0 = (-pad) % g
    return g, r0, max(1, -(-(h - r0) // g))


def _windowed_max(x, out_shape, k, s, pb, d, rk, sizes, low, reducer, kflat_strides):
    """The window max in one pass over every tap, with the flat position of the first
    maximum: ``(position, value)``."""
    nsp = len(k)

    def body(n, c, *o):
        coords = [o[i] * s[i] - pb[i] + rk[i] * d[i] for i in range(nsp)]
        v = _lazy(_inside(coords, sizes), x[(n, c) + tuple(coords)], low)
        kpos = sum(rk[i] * kflat_strides[i] for i in range(nsp))
        return reducer((kpos.astype("int32") if not isinstance(kpos, int) else
                        tvm.tirx.const(kpos, "int32"), v), axis=rk)
    return te.compute(out_shape, body, name="anchor_maxpool")


def _separable_max(x, out_shape, k, s, pb, d, sizes, low, reducer):
    """A 2-D window max as the max over its rows of each row's max (with the first
    position of the maximum: the lowest column in a row, then the lowest row, which is the
    lowest flat position as the one-pass reducer picks). The row maxima are taken only on
    the input rows some window reads: rows ``r0 + g * q`` with ``g = gcd(stride,
    dilation)``. Why: the one-pass reducer did every tap of every window, scalar (a 60 x 80
    window dilated by 10 over 1000 x 1000: 5.2 M taps, 21.7 ms); by rows, 0.26 M."""
    n, c = int(x.shape[0]), int(x.shape[1])
    oh, ow = out_shape[2:]
    h, w = sizes
    g, r0, rows = _read_rows(pb[0], s[0], d[0], h)

    def row_tap(idx, tap):
        b, ch, q, j = idx
        col = j * s[1] - pb[1] + tap * d[1]
        inside = tvm.tirx.And(col >= 0, col < w)
        return tap.astype("int32"), _lazy(inside, x[b, ch, q * g + r0, col], low)
    col_at, row_best = _max_in_pieces((n, c, rows, ow), k[1], row_tap, low, reducer,
                                      "maxpool_rows")

    def row_of_window(idx, rh):
        b, ch, i, j = idx
        r = i * s[0] - pb[0] + rh * d[0]
        inside = tvm.tirx.And(r >= 0, r < h)
        q = te.floordiv(r - r0, g)
        kp = rh.astype("int32") * k[1] + _lazy(inside, col_at[b, ch, q, j],
                                               tvm.tirx.const(0, "int32"))
        return kp, _lazy(inside, row_best[b, ch, q, j], low)
    return _max_in_pieces(out_shape, k[0], row_of_window, low, reducer, "anchor_maxpool")


def _max_in_pieces(shape, taps, tap_of, low, reducer, name):
    """``(position, value)`` of the max over ``taps`` taps (``tap_of(index, tap)``), taken
    in pieces of :data:`MAX_PIECE` taps and then over the pieces' maxima; the taps past
    ``taps`` in the last piece read ``low`` at a later position, so they never win. A
    window of one piece or less is one reduction (a stage of one piece cost 6 x 8 taps 17%
    when the pieces were 8 long)."""
    if taps <= MAX_PIECE:
        r = te.reduce_axis((0, taps), "r")
        return te.compute(shape, lambda *i: reducer(tap_of(i, r), axis=[r]), name=name)
    pieces = -(-taps // MAX_PIECE)
    rv = te.reduce_axis((0, MAX_PIECE), "rv")

    def piece_max(*iu):
        tap = iu[-1] * MAX_PIECE + rv
        kp, v = tap_of(iu[:-1], tap)
        return reducer((kp, _lazy(tap < taps, v, low)), axis=[rv])
    piece_at, piece_best = te.compute(shape + (pieces,), piece_max,
                                      name=name.replace("anchor_", "") + "_pieces")
    ru = te.reduce_axis((0, pieces), "ru")
    return te.compute(shape, lambda *i: reducer(
        (piece_at[i + (ru,)], piece_best[i + (ru,)]), axis=[ru]), name=name)


#: a window row's taps (and the window's rows) are reduced in pieces of this many, then
#: over the pieces: short independent chains (LLVM unrolls a piece of 4 whole), where one
#: chain of 80 taps waited on each compare. 60 x 80 dilated 10 over 1000 x 1000 with
#: indices, 1 thread, one process: whole rows 1.01 ms, pieces of 2: 0.70, 3: 0.50, 4: 0.27,
#: 5: 0.34, 8: 0.75, 16: 1.0 (a 6 x 8 window over 61 x 57: 23.2 -> 20.0 us)
MAX_PIECE = 4

#: windows of at least this many taps take the max by rows, then over the rows' maxima
SEPARABLE_MIN_TAPS = 16


def _window_count(o, s, pb, k_i, d, lo, hi):
    """How many of the window's taps on one axis lie in [lo, hi) (a static loop)."""
    cnt = _const(0, "int32")
    for kv in range(k_i):
        pos = o * s - pb + kv * d
        cnt = cnt + tvm.tirx.Select(tvm.tirx.And(pos >= lo, pos < hi), 1, 0)
    return cnt


def _sum_pool(attrs, x, out_shape, transform, ctx):
    k, s, pb, pe, d, rk, sizes = _pool_setup(attrs, x, out_shape)
    nsp = len(k)
    acc = _acc(str(x.dtype))

    def body(n, c, *o):
        coords = [o[i] * s[i] - pb[i] + rk[i] * d[i] for i in range(nsp)]
        v = _lazy(_inside(coords, sizes), transform(x[(n, c) + tuple(coords)].astype(acc)),
                  _const(0, acc))
        return te.sum(v, axis=rk)
    total = te.compute(out_shape, body, name="anchor_pool")
    return total, (k, s, pb, pe, d, sizes)


@register("avg_pool", "reduce")
def _avg_pool(attrs, ins, outs, ctx):
    x = ins[0]
    out_shape, dtype = outs[0]
    total, (k, s, pb, pe, d, sizes) = _sum_pool(attrs, x, out_shape, lambda v: v, ctx)
    include = bool(attrs.get("count_include_pad"))
    acc = total.dtype

    def body(n, c, *o):
        cnt = None
        for i in range(len(k)):
            lo, hi = (-pb[i], sizes[i] + pe[i]) if include else (0, sizes[i])
            ci = _window_count(o[i], s[i], pb[i], k[i], d[i], lo, hi)
            cnt = ci if cnt is None else cnt * ci
        return (total[(n, c) + o] / cnt.astype(acc)).astype(dtype)
    return te.compute(out_shape, body, name=ctx.name)


@register("lp_pool", "reduce")
def _lp_pool(attrs, ins, outs, ctx):
    x = ins[0]
    out_shape, dtype = outs[0]
    p = int(attrs["p"])
    total, _ = _sum_pool(attrs, x, out_shape, lambda v: _ipow(v, p), ctx)
    return te.compute(out_shape, lambda *i: te.power(total[i], _const(1.0 / p, total.dtype)
                                                      ).astype(dtype), name=ctx.name)


def _global_rule(kind):
    def rule(attrs, ins, outs, ctx):
        x = ins[0]
        out_shape, dtype = outs[0]
        sizes = [int(v) for v in x.shape[2:]]
        rk = [te.reduce_axis((0, n), f"r{i}") for i, n in enumerate(sizes)]
        acc = _acc(dtype) if "float" in dtype else dtype
        if kind == "max":
            return te.compute(out_shape, lambda n, c, *o: te.max(x[(n, c) + tuple(rk)],
                                                                 axis=rk), name="anchor_gpool")
        if kind == "avg":
            t = te.compute(out_shape, lambda n, c, *o: te.sum(
                x[(n, c) + tuple(rk)].astype(acc), axis=rk), name="anchor_gpool")
            cnt = int(np.prod(sizes))
            return te.compute(out_shape, lambda *i: (t[i] / _const(cnt, acc)).astype(dtype),
                              name=ctx.name)
        p = int(attrs["p"])
        t = te.compute(out_shape, lambda n, c, *o: te.sum(_ipow(
            x[(n, c) + tuple(rk)].astype(acc), p), axis=rk), name="anchor_gpool")
        return te.compute(out_shape, lambda *i: te.power(t[i], _const(1.0 / p, acc)).astype(
            dtype), name=ctx.name)
    return rule


register("global_max_pool", "reduce")(_global_rule("max"))
register("global_avg_pool", "reduce")(_global_rule("avg"))
register("global_lp_pool", "reduce")(_global_rule("lp"))


# -- normalisation ------------------------------------------------------------------------------

def _moments(x, axes, acc, name, var=True):
    """mean (and biased variance) of ``x`` over ``axes``, keepdims, in ``acc``."""
    count = int(np.prod([int(x.shape[a]) for a in axes]))
    xa = te.compute(x.shape, lambda *i: x[i].astype(acc), name=name + "_acc")
    mean = topi.sum(xa, axis=list(axes), keepdims=True)
    mean = te.compute(mean.shape, lambda *i: mean[i] / _const(count, acc), name=name + "_mean")
    if not var:
        return xa, mean, None
    nd = len(x.shape)

    def at_mean(i):
        return mean[tuple(0 if d in axes else i[d] for d in range(nd))]
    dev = te.compute(x.shape, lambda *i: (xa[i] - at_mean(i)) * (xa[i] - at_mean(i)),
                     name=name + "_sq")
    v = topi.sum(dev, axis=list(axes), keepdims=True)
    v = te.compute(v.shape, lambda *i: v[i] / _const(count, acc), name=name + "_var")
    return xa, mean, v


def _stat(t, axes, nd):
    return lambda i: t[tuple(0 if d in axes else i[d] for d in range(nd))]


@register("batch_norm", "injective")
def _batch_norm(attrs, ins, outs, ctx):
    x, gamma, beta, mean, var = ins
    shape, dtype = outs[0]
    ax = attrs["axis"] % len(shape)
    eps = float(attrs["epsilon"])
    acc = _acc(dtype)

    def body(*i):
        c = i[ax]
        scale = _const(1, acc) / te.sqrt(var[c].astype(acc) + _const(eps, acc))
        if attrs["scale"]:
            scale = scale * gamma[c].astype(acc)
        y = (x[i].astype(acc) - mean[c].astype(acc)) * scale
        if attrs["center"]:
            y = y + beta[c].astype(acc)
        return y.astype(dtype)
    y = te.compute(shape, body, name=ctx.name)
    m = te.compute(mean.shape, lambda *i: mean[i], name=ctx.name + "_mean")
    v = te.compute(var.shape, lambda *i: var[i], name=ctx.name + "_var")
    return [y, m, v]


@register("layer_norm", "softmax")
def _layer_norm(attrs, ins, outs, ctx):
    x, scale = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    shape, dtype = outs[0]
    nd = len(shape)
    a0 = attrs["axis"] % nd
    axes = tuple(range(a0, nd))
    acc = _acc(dtype)
    xa, mean, var = _moments(x, axes, acc, ctx.name)
    inv = te.compute(var.shape, lambda *i: _const(1, acc) / te.sqrt(
        var[i] + _const(float(attrs["epsilon"]), acc)), name=ctx.name + "_inv")
    m_at, i_at = _stat(mean, axes, nd), _stat(inv, axes, nd)
    # scale and bias broadcast to the normalized dims as in NumPy (ONNX allows e.g. (1, D) or
    # a rank other than the normalized dims'); indexing them by i[a0:] raised a raw ValueError
    from .lowering_transform import _broadcast_read

    s_at = _broadcast_read(scale, shape)
    b_at = None if bias is None else _broadcast_read(bias, shape)

    def body(*i):
        y = (xa[i] - m_at(i)) * i_at(i) * s_at(i).astype(acc)
        if b_at is not None:
            y = y + b_at(i).astype(acc)
        return y.astype(dtype)
    y = te.compute(shape, body, name=ctx.name)
    return [y, te.compute(mean.shape, lambda *i: mean[i].astype(outs[1][1]),
                          name=ctx.name + "_m"),
            te.compute(inv.shape, lambda *i: inv[i].astype(outs[2][1]), name=ctx.name + "_i")]


@register("rms_norm", "softmax")
def _rms_norm(attrs, ins, outs, ctx):
    x, scale = ins
    shape, dtype = outs[0]
    nd = len(shape)
    a0 = attrs["axis"] % nd
    axes = tuple(range(a0, nd))
    acc = _acc(dtype)
    count = int(np.prod([shape[a] for a in axes]))
    xa = te.compute(shape, lambda *i: x[i].astype(acc), name=ctx.name + "_acc")
    sq = te.compute(shape, lambda *i: xa[i] * xa[i], name=ctx.name + "_sq")
    ss = topi.sum(sq, axis=list(axes), keepdims=True)
    at = _stat(ss, axes, nd)
    eps = float(attrs["epsilon"])
    return te.compute(shape, lambda *i: (xa[i] / te.sqrt(at(i) / _const(count, acc) + _const(
        eps, acc)) * scale[i[a0:]].astype(acc)).astype(dtype), name=ctx.name)


def _channel_norm(attrs, x, gamma, beta, shape, dtype, groups, name):
    """instance_norm (groups = C) and group_norm: statistics per (n, group).

    The statistics reduce over the trailing axes of a ``(n, group, channel, *spatial)`` view
    of ``x`` (kept dims), so the row template parallelises over (n, group) and computes them
    once per row; a reshape to ``(n, group, rest)`` made them depend on every spatial index,
    and the template recomputed them for each output row (InstanceNorm 1x64x128x128 ran
    123x off its roofline)."""
    acc = _acc(dtype)
    n, c, sp = shape[0], shape[1], tuple(shape[2:])
    per = c // groups
    xg = te.compute((n, groups, per) + sp, lambda b, g, p, *s: x[(b, g * per + p) + s],
                    name=name + "_view")
    _, mean, var = _moments(xg, tuple(range(2, 3 + len(sp))), acc, name)
    eps = float(attrs["epsilon"])
    zeros = (0,) * (len(sp) + 1)

    def body(b, ch, *s):
        at = (b, ch // per) + zeros
        norm = (x[(b, ch) + s].astype(acc) - mean[at]) / te.sqrt(var[at] + _const(eps, acc))
        return (norm * gamma[ch].astype(acc) + beta[ch].astype(acc)).astype(dtype)
    return te.compute(shape, body, name=name)


@register("instance_norm", "softmax")
def _instance_norm(attrs, ins, outs, ctx):
    shape, dtype = outs[0]
    return _channel_norm(attrs, *ins, shape, dtype, shape[1], ctx.name)


@register("group_norm", "softmax")
def _group_norm(attrs, ins, outs, ctx):
    shape, dtype = outs[0]
    return _channel_norm(attrs, *ins, shape, dtype, int(attrs["num_groups"]), ctx.name)


@register("lp_normalization", "softmax")
def _lp_normalization(attrs, ins, outs, ctx):
    x = ins[0]
    shape, dtype = outs[0]
    nd = len(shape)
    ax = attrs["axis"] % nd
    acc = _acc(dtype)
    if int(attrs["p"]) == 1:
        t = te.compute(shape, lambda *i: te.abs(x[i].astype(acc)), name=ctx.name + "_abs")
    else:
        t = te.compute(shape, lambda *i: x[i].astype(acc) * x[i].astype(acc),
                       name=ctx.name + "_sq")
    s = topi.sum(t, axis=[ax], keepdims=True)
    at = _stat(s, (ax,), nd)

    def body(*i):
        norm = at(i) if int(attrs["p"]) == 1 else te.sqrt(at(i))
        safe = tvm.tirx.Select(norm == _const(0, acc), _const(1, acc), norm)
        return tvm.tirx.Select(norm == _const(0, acc), _const(0, acc),
                               x[i].astype(acc) / safe).astype(dtype)
    return te.compute(shape, body, name=ctx.name)


@register("mean_variance_normalization", "softmax")
def _mvn(attrs, ins, outs, ctx):
    x = ins[0]
    shape, dtype = outs[0]
    nd = len(shape)
    axes = tuple(sorted(a % nd for a in attrs["axes"]))
    acc = _acc(dtype)
    xa, mean, var = _moments(x, axes, acc, ctx.name)
    m_at, v_at = _stat(mean, axes, nd), _stat(var, axes, nd)
    return te.compute(shape, lambda *i: ((xa[i] - m_at(i)) / (te.sqrt(v_at(i)) + _const(
        1e-9, acc))).astype(dtype), name=ctx.name)


#: LRN windows up to this many channels are summed as unrolled taps in one elementwise
#: kernel; wider ones (none seen in real models) keep a reduction
LRN_UNROLLED_TAPS = 32


def _pow_const(base, beta: float, acc: str):
    """``base ** beta`` for the exponents LRN uses, as square roots where they are exact
    enough (``sqrt`` is correctly rounded and vectorises; ``pow`` is a scalar libm call per
    element, 6 ns of AlexNet's 7 ns an element): 0.75 = sqrt(b) * sqrt(sqrt(b)), 0.5, 1."""
    if beta == 1.0:
        return base
    if beta == 0.5:
        return te.sqrt(base)
    if beta == 0.75:
        root = te.sqrt(base)
        return root * te.sqrt(root)
    return te.power(base, _const(beta, acc))


@register("lrn", "elemwise")
def _lrn(attrs, ins, outs, ctx):
    """Sum of squares over a window of ``size`` channels, then ``x / (bias + alpha/size *
    sum) ** beta``. The window is written as unrolled taps inside one elementwise body (no
    reduction stage): every tap is a channel plane, so the bounds test is the same for a
    whole row of pixels and the kernel vectorises along them. As a reduction the sums ran
    scalar in their own pass (LRN 1x192x27x27: 0.95 ms, 19x off the roof)."""
    x = ins[0]
    shape, dtype = outs[0]
    ax = attrs["axis"] % len(shape)
    size = int(attrs["size"])
    c = shape[ax]
    lo = (size - 1) // 2
    acc = _acc(dtype)
    alpha, beta, bias = float(attrs["alpha"]), float(attrs["beta"]), float(attrs["bias"])
    if dtype == "float32" and beta in (0.5, 0.75) and size <= LRN_UNROLLED_TAPS \
            and int(np.prod(shape[ax + 1:])) >= ctx.vector_lanes \
            and fastmath.rsqrt_estimated(ctx.vector_lanes):
        # explicit vectors, so the power comes from the CPU's rsqrt estimates (lrn_kernel);
        # planes narrower than a vector would be all scalar tail there
        return lrn_vectorised(x, shape, size, alpha, beta, bias, ax, ctx.vector_lanes,
                              ctx.name)

    def tap(i, ch):
        v = x[i[:ax] + (ch,) + i[ax + 1:]].astype(acc)
        return _lazy(tvm.tirx.And(ch >= 0, ch < c), v * v, _const(0, acc))

    if size <= LRN_UNROLLED_TAPS:
        def window(i):
            total = tap(i, i[ax] - lo)
            for k in range(1, size):
                total = total + tap(i, i[ax] - lo + k)
            return total
    else:
        r = te.reduce_axis((0, size), "r")
        sq = te.compute(shape, lambda *i: te.sum(tap(i, i[ax] - lo + r), axis=r),
                        name="anchor_lrn")

        def window(i):
            return sq[i]

    def body(*i):
        # the denominator's base bound once: as a repeated expression each root of
        # _pow_const recomputed it, and LLVM kept three roots an element, not two (LRN
        # 1x192x27x27: 89 -> 64 us at 1 thread)
        base = tvm.tirx.Var("lrn_base", acc)
        return tvm.tirx.Let(base, _const(bias, acc) + _const(alpha / size, acc) * window(i),
                            (x[i].astype(acc) / _pow_const(base, beta, acc)).astype(dtype))
    return te.compute(shape, body, name=ctx.name)


@register("hardmax", "softmax")
def _hardmax(attrs, ins, outs, ctx):
    from .lowering_transform import _arg_rule

    x = ins[0]
    shape, dtype = outs[0]
    ax = attrs["axis"] % len(shape)
    arg = _arg_rule(True)({"axis": (ax,), "keepdims": True}, [x],
                          [(tuple(1 if d == ax else n for d, n in enumerate(shape)), "int64")],
                          ctx)
    return te.compute(shape, lambda *i: tvm.tirx.Select(
        arg[i[:ax] + (0,) + i[ax + 1:]] == i[ax].astype("int64"), _const(1, dtype),
        _const(0, dtype)), name=ctx.name)

