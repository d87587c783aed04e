"""Kernel templates: the loop nests of heavy ops, each a function of a KernelBuilder.

A template writes the kernel's loops for its *master* node, reads inputs through
``builder.value`` (so injective prologues fuse into reductions) and hands each output
value to ``builder.store`` (so the group's elementwise epilogue fuses into GEMM, convolution
and pooling). Templates are keyed by op name in ``TEMPLATES``; ``elementwise`` is the
default one-work-item-per-output kernel used for every group without a heavy op.

GEMM-shaped ops (dense, batched matmul, convolution as implicit GEMM) share ``gemm``: a
local-memory tiled kernel whose work-group shape is chosen from the device's
``max_work_group_size`` and ``local_mem_size`` (``builder.limits``).
"""

from __future__ import annotations

from typing import Callable

from nnvm.ops.nn import ConvGeometry, PoolGeometry
from nnvm.ops.reduce import reduce_axes

from .builder import KernelBuilder, numel


def _gid_guard(b: KernelBuilder, total: int) -> str:
    gid = b.let(b.r.int_type, b.r.index("global", 0), "gid")
    b.emit(f"if ({gid} >= {total}) return;")
    local = min(int(b.limits.get("max_work_group_size", 64)), 64)
    b.local_size = (local,)
    b.global_size = (-(-max(total, 1) // local) * local,)
    return gid


def elementwise(b: KernelBuilder, nid: int, out_index: int = 0) -> None:
    """One work-item per element of the root's output ``out_index``."""
    entry = b.info.entry(b.root, out_index)
    shape = b.shape(entry)
    gid = _gid_guard(b, numel(shape))
    coords = b.delinearize(gid, shape)
    v = b.value(entry, coords)
    out = b.tensor(entry, output=True)
    b.emit(f"{out}[{gid}] = {b.r.cast(v, b.dtype(entry))};")


# -- reductions -------------------------------------------------------------------------------

_INIT = {"sum": 0, "mean": 0, "prod": 1, "max": "-inf", "min": "inf", "argmax": "-inf",
         "argmin": "inf", "collapse_sum_like": 0}


def reduce(b: KernelBuilder, nid: int) -> None:
    """One work-item per output element, a serial loop over the reduced extent."""
    name = b.node(nid).op.name
    src = b.inputs(nid)[0]
    ishape = b.shape(src)
    out = b.info.entry(nid, 0)
    oshape = b.shape(out)
    if name == "collapse_sum_like":
        like = oshape
        off = len(ishape) - len(like)
        axes = tuple(i for i in range(len(ishape))
                     if i < off or (like[i - off] == 1 and ishape[i] != 1))
    else:
        axes = reduce_axes(b.attrs(nid), len(ishape))
    kept = [i for i in range(len(ishape)) if i not in axes]
    gid = _gid_guard(b, numel(oshape))
    ocoords = b.delinearize(gid, oshape)
    if name == "collapse_sum_like":
        kc = [ocoords[i - off] for i in kept]
    elif len(oshape) == len(ishape):
        kc = [ocoords[i] for i in kept]
    else:
        kc = ocoords
    rshape = [ishape[i] for i in axes]
    rn = numel(rshape)
    dt = b.dtype(src)
    acc_t = b.r.ctype(dt)
    init = _INIT[name]
    if isinstance(init, str) and not dt.startswith("float"):
        import numpy as np

        info = np.iinfo(dt) if dt != "bool" else np.iinfo("uint8")
        init = int(info.min) if init == "-inf" else int(info.max)
    init_v = b.r.const(float(init) if isinstance(init, str) else init, dt)
    acc = b.let(acc_t, init_v, "acc", const=False)
    arg = b.let(b.r.int_type, "0", "arg", const=False) if name.startswith("arg") else None
    r = b.fresh("r")
    with b.block(f"for ({b.r.int_type} {r} = 0; {r} < {rn}; ++{r})"):
        rc = b.delinearize(r, rshape)
        coords = [None] * len(ishape)
        for i, c in zip(kept, kc):
            coords[i] = c
        for i, c in zip(axes, rc):
            coords[i] = c
        v = b.value(src, coords)
        if name in ("sum", "mean", "collapse_sum_like"):
            b.emit(f"{acc} += {v};")
        elif name == "prod":
            b.emit(f"{acc} *= {v};")
        elif name in ("max", "min"):
            op = ">" if name == "max" else "<"
            b.emit(f"{acc} = ({v} {op} {acc} || {b.r.func('isnan')}({v})) ? {v} : {acc};"
                   if dt.startswith("float") else f"{acc} = {v} {op} {acc} ? {v} : {acc};")
        else:
            op = ">" if name == "argmax" else "<"
            with b.block(f"if ({v} {op} {acc} || {r} == 0)"):
                b.emit(f"{acc} = {v};")
                b.emit(f"{arg} = {r};")
    if name == "mean":
        res = f"{acc} / {b.r.const(rn, dt)}"
    elif arg is not None:
        res = arg
    else:
        res = acc
    b.store(ocoords, res)


# -- softmax ----------------------------------------------------------------------------------

def softmax(b: KernelBuilder, nid: int) -> None:
    """One work-item per row along ``axis``: max, sum of exponentials, normalise."""
    src = b.inputs(nid)[0]
    shape = b.shape(src)
    ax = b.attrs(nid)["axis"] % len(shape)
    rows_shape = shape[:ax] + shape[ax + 1:]
    n = shape[ax]
    dt = b.dtype(src)
    t = b.r.ctype(dt)
    gid = _gid_guard(b, numel(rows_shape))
    rc = b.delinearize(gid, rows_shape)

    def at(j):
        return rc[:ax] + [j] + rc[ax:]
    m = b.let(t, b.r.const(float("-inf"), dt), "mx", const=False)
    with b.block(f"for (int j = 0; j < {n}; ++j)"):
        v = b.value(src, at("j"))
        b.emit(f"{m} = {v} > {m} ? {v} : {m};")
    s = b.let(t, b.r.const(0, dt), "sum", const=False)
    with b.block(f"for (int j = 0; j < {n}; ++j)"):
        b.emit(f"{s} += {b.r.func('exp', dt)}({b.value(src, at('j'))} - {m});")
    log = b.node(nid).op.name == "log_softmax"
    scale = b.let(t, f"{b.r.func('log', dt)}({s})" if log else f"{b.r.const(1, dt)} / {s}", "k")
    with b.block(f"for (int j = 0; j < {n}; ++j)"):
        v = b.value(src, at("j"))
        res = (f"({v} - {m} - {scale})" if log
               else f"{b.r.func('exp', dt)}({v} - {m}) * {scale}")
        b.store(at("j"), res)


# -- pooling ----------------------------------------------------------------------------------

def pool2d(b: KernelBuilder, nid: int) -> None:
    """max/avg pooling (NCHW): one work-item per output, a loop over the window."""
    attrs = b.attrs(nid)
    if attrs.get("layout", "NCHW") != "NCHW":
        raise b.unsupported(nid, f"pooling layout {attrs['layout']} (only NCHW)")
    src = b.inputs(nid)[0]
    n, c, h, w = b.shape(src)
    pl = PoolGeometry(attrs)
    (pt, plft, _, _), (oh, ow) = pl.pads(h, w)
    out = b.info.entry(nid, 0)
    dt = b.dtype(src)
    t = b.r.ctype(dt)
    is_max = b.node(nid).op.name == "max_pool2d"
    gid = _gid_guard(b, numel(b.shape(out)))
    on, oc, oy, ox = b.delinearize(gid, b.shape(out))
    y0 = b.int_let(f"{oy} * {pl.s[0]} - {pt}")
    x0 = b.int_let(f"{ox} * {pl.s[1]} - {plft}")
    acc = b.let(t, _lowest(b, dt) if is_max else b.r.const(0, dt), "acc", const=False)
    cnt = b.let(b.r.int_type, "0", "cnt", const=False)
    kh, kw = pl.k
    with b.block(f"for (int dy = 0; dy < {kh}; ++dy)"):
        iy = b.int_let(f"{y0} + dy")
        with b.block(f"if ({iy} >= 0 && {iy} < {h})"):
            with b.block(f"for (int dx = 0; dx < {kw}; ++dx)"):
                ix = b.int_let(f"{x0} + dx")
                with b.block(f"if ({ix} >= 0 && {ix} < {w})"):
                    v = b.value(src, [on, oc, iy, ix])
                    b.emit(f"{acc} = {v} > {acc} ? {v} : {acc};" if is_max else
                           f"{acc} += {v};")
                    b.emit(f"++{cnt};")
    if is_max:
        res = acc
    elif attrs.get("count_include_pad", False):
        res = f"{acc} / {b.r.const(kh * kw, dt)}"
    else:
        res = f"{acc} / ({t}){cnt}"
    b.store([on, oc, oy, ox], res)


def _lowest(b: KernelBuilder, dt: str) -> str:
    """The start value of a max: -inf for floats, the dtype's minimum for integers (an integer
    type has no infinity, and its minimum is the identity of max just the same)."""
    if dt.startswith("float"):
        return b.r.const(float("-inf"), dt)
    import numpy as np

    return b.r.const(int(np.iinfo(dt if dt != "bool" else "uint8").min), dt)


def global_pool2d(b: KernelBuilder, nid: int) -> None:
    attrs = b.attrs(nid)
    if attrs.get("layout", "NCHW") != "NCHW":
        raise b.unsupported(nid, f"pooling layout {attrs['layout']} (only NCHW)")
    src = b.inputs(nid)[0]
    n, c, h, w = b.shape(src)
    dt = b.dtype(src)
    t = b.r.ctype(dt)
    is_max = b.node(nid).op.name == "global_max_pool2d"
    gid = _gid_guard(b, n * c)
    on, oc = b.delinearize(gid, (n, c))
    acc = b.let(t, _lowest(b, dt) if is_max else b.r.const(0, dt), "acc", const=False)
    with b.block(f"for (int p = 0; p < {h * w}; ++p)"):
        iy, ix = b.delinearize("p", (h, w))
        v = b.value(src, [on, oc, iy, ix])
        b.emit(f"{acc} = {v} > {acc} ? {v} : {acc};" if is_max else f"{acc} += {v};")
    b.store([on, oc, "0", "0"], acc if is_max else f"{acc} / {b.r.const(h * w, dt)}")


# -- GEMM ---------------------------------------------------------------------------------------

def gemm_tiles(limits: dict, m: int, n: int, itemsize: int = 4) -> tuple[int, int, int, int, int]:
    """(TM, TN, TK, WM, WN): the work-group's output tile, K step and per-item block,
    chosen so that (TM/WM)*(TN/WN) items fit ``max_work_group_size`` and both local tiles
    fit ``local_mem_size``."""
    max_wg = int(limits.get("max_work_group_size", 256))
    lmem = int(limits.get("local_mem_size", 32768))
    tm = 64 if m >= 64 else (32 if m >= 16 else 8)
    tn = 64 if n >= 64 else (32 if n >= 16 else 8)
    tk = 16
    wm = 4 if tm >= 32 else (2 if tm >= 8 else 1)
    wn = 4 if tn >= 32 else (2 if tn >= 8 else 1)
    while (tm // wm) * (tn // wn) > max_wg:
        wm, wn = wm * 2, wn * 2
    while (tm + tn) * tk * itemsize > lmem and tk > 1:
        tk //= 2
    return tm, tn, tk, wm, wn


def gemm(b: KernelBuilder, batch: int, m: int, n: int, k: int,
         a_at: Callable, b_at: Callable, out_at: Callable, dtype: str) -> None:
    """Tiled ``C[z, i, j] = sum_l A(z, i, l) * B(z, l, j)`` with a fused epilogue.

    Args:
        a_at / b_at: ``f(z, row, col) -> C expr`` reading A / B (coordinates clamped in
            range by the caller of each load; out-of-range tile cells are zero-filled here).
        out_at: ``f(z, i, j) -> output coordinates`` handed to ``builder.store``.
    """
    tm, tn, tk, wm, wn = gemm_tiles(b.limits, m, n)
    t = b.r.ctype(dtype)
    lx, ly = tn // wn, tm // wm
    nthreads = lx * ly
    b.local_size = (lx, ly, 1)
    b.global_size = (-(-n // tn) * lx, -(-m // tm) * ly, batch)
    r = b.r
    b.emit(b.r.smem_decl(dtype, "As", tk * tm))
    b.emit(b.r.smem_decl(dtype, "Bs", tk * tn))
    tx = b.let(r.int_type, r.index("local", 0), "tx")
    ty = b.let(r.int_type, r.index("local", 1), "ty")
    z = b.let(r.int_type, r.index("group", 2), "z")
    row0 = b.let(r.int_type, f"{r.index('group', 1)} * {tm}", "row0")
    col0 = b.let(r.int_type, f"{r.index('group', 0)} * {tn}", "col0")
    tid = b.let(r.int_type, f"{ty} * {lx} + {tx}", "tid")
    b.emit(f"{t} acc[{wm}][{wn}];")
    b.emit(f"for (int i = 0; i < {wm}; ++i) for (int j = 0; j < {wn}; ++j) acc[i][j] = "
           f"{r.const(0, dtype)};")
    with b.block(f"for (int k0 = 0; k0 < {k}; k0 += {tk})"):
        with b.block(f"for (int e = {tid}; e < {tm * tk}; e += {nthreads})"):
            kk = b.int_let(f"e / {tm}")
            ii = b.int_let(f"e % {tm}")
            gi = b.int_let(f"{row0} + {ii}")
            gk = b.int_let(f"k0 + {kk}")
            ok = f"({gi} < {m} && {gk} < {k})"
            v = a_at(z, b.int_let(f"{gi} < {m} ? {gi} : {m - 1}"),
                     b.int_let(f"{gk} < {k} ? {gk} : {k - 1}"))
            b.emit(f"As[e] = {ok} ? {v} : {r.const(0, dtype)};")
        with b.block(f"for (int e = {tid}; e < {tn * tk}; e += {nthreads})"):
            kk = b.int_let(f"e / {tn}")
            jj = b.int_let(f"e % {tn}")
            gj = b.int_let(f"{col0} + {jj}")
            gk = b.int_let(f"k0 + {kk}")
            ok = f"({gj} < {n} && {gk} < {k})"
            v = b_at(z, b.int_let(f"{gk} < {k} ? {gk} : {k - 1}"),
                     b.int_let(f"{gj} < {n} ? {gj} : {n - 1}"))
            b.emit(f"Bs[e] = {ok} ? {v} : {r.const(0, dtype)};")
        b.emit(r.barrier)
        with b.block(f"for (int kk = 0; kk < {tk}; ++kk)"):
            b.emit(f"{t} a[{wm}], bb[{wn}];")
            b.emit(f"for (int i = 0; i < {wm}; ++i) a[i] = As[kk * {tm} + {ty} * {wm} + i];")
            b.emit(f"for (int j = 0; j < {wn}; ++j) bb[j] = Bs[kk * {tn} + {tx} + j * {lx}];")
            b.emit(f"for (int i = 0; i < {wm}; ++i) for (int j = 0; j < {wn}; ++j) "
                   f"acc[i][j] += a[i] * bb[j];")
        b.emit(r.barrier)
    with b.block(f"for (int i = 0; i < {wm}; ++i)"):
        gi = b.int_let(f"{row0} + {ty} * {wm} + i")
        with b.block(f"if ({gi} < {m})"):
            with b.block(f"for (int j = 0; j < {wn}; ++j)"):
                gj = b.int_let(f"{col0} + {tx} + j * {lx}")
                with b.block(f"if ({gj} < {n})"):
                    b.store(out_at(z, gi, gj), "acc[i][j]")


def dense(b: KernelBuilder, nid: int) -> None:
    ins = b.inputs(nid)
    x, w = ins[0], ins[1]
    xs = b.shape(x)
    units, kdim = b.shape(w)
    rows = numel(xs[:-1])
    lead = list(xs[:-1])
    bias = ins[2] if len(ins) > 2 else None

    def a_at(z, i, l):
        return b.load(x, b.delinearize(i, lead) + [l]) if len(lead) != 1 else b.load(x, [i, l])

    def b_at(z, l, j):
        return b.load(w, [j, l])

    def out_at(z, i, j):
        return (b.delinearize(i, lead) if len(lead) != 1 else [i]) + [j]

    if bias is not None:
        with_bias(b, nid, bias, lambda coords: [coords[-1]])
    gemm(b, 1, rows, units, kdim, a_at, b_at, out_at, b.dtype(x))


def with_bias(b: KernelBuilder, nid: int, bias: int, bias_coords: Callable) -> None:
    """Wrap ``builder.store`` so the master's value gets ``+ bias`` before the epilogue."""
    plain = b.store

    def store(coords, acc, out_index=0):
        bv = b.value(bias, bias_coords(coords))
        plain(coords, f"({acc} + {bv})", out_index)
    b.store = store


def matmul(b: KernelBuilder, nid: int) -> None:
    ea, eb = b.inputs(nid)
    sa, sb = b.shape(ea), b.shape(eb)
    ta, tb = b.attrs(nid)["transpose_a"], b.attrs(nid)["transpose_b"]
    out = b.info.entry(nid, 0)
    so = b.shape(out)
    if len(sa) == 1 or len(sb) == 1:
        a2 = (1, sa[0]) if len(sa) == 1 else sa
        b2 = (sb[0], 1) if len(sb) == 1 else sb
    else:
        a2, b2 = sa, sb
    m = a2[-1] if ta and len(sa) > 1 else a2[-2]
    kdim = a2[-2] if ta and len(sa) > 1 else a2[-1]
    n = b2[-2] if tb and len(sb) > 1 else b2[-1]
    bshape = tuple(so[:len(so) - (len(sa) > 1) - (len(sb) > 1)])
    nb = numel(bshape)

    def batch_coords(z, shape_batch):
        zc = b.delinearize(z, bshape) if nb > 1 else ["0"] * len(bshape)
        return b.broadcast_coords(shape_batch, bshape, zc)

    def a_at(z, i, l):
        if len(sa) == 1:
            return b.load(ea, [l])
        return b.load(ea, batch_coords(z, sa[:-2]) + ([l, i] if ta else [i, l]))

    def b_at(z, l, j):
        if len(sb) == 1:
            return b.load(eb, [l])
        return b.load(eb, batch_coords(z, sb[:-2]) + ([j, l] if tb else [l, j]))

    def out_at(z, i, j):
        zc = b.delinearize(z, bshape) if nb > 1 else ["0"] * len(bshape)
        return zc + ([i] if len(sa) > 1 else []) + ([j] if len(sb) > 1 else [])

    gemm(b, nb, m, n, kdim, a_at, b_at, out_at, b.dtype(ea))


def conv2d(b: KernelBuilder, nid: int) -> None:
    """Implicit GEMM per group: rows = output channels of the group, columns = N*OH*OW
    output pixels, K = C/g*KH*KW; the im2col address is computed in the tile load.
    Depthwise-like convolutions (few channels per group) use a direct loop instead."""
    attrs = b.attrs(nid)
    if attrs.get("layout", "NCHW") != "NCHW" or attrs.get("kernel_layout", "OIHW") != "OIHW":
        raise b.unsupported(nid, "conv2d layouts other than NCHW/OIHW")
    ins = b.inputs(nid)
    x, w = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    cv = ConvGeometry(attrs)
    nb, c, h, wd = b.shape(x)
    o = cv.channels
    g = cv.groups
    oh, ow = cv.out_hw(h, wd)
    cg, og = c // g, o // g
    kh, kw = cv.k
    if bias is not None:
        with_bias(b, nid, bias, lambda coords: [coords[1]])
    if og < 4:
        return _conv2d_direct(b, nid, cv, x, w)
    pt, pl = cv.p[0], cv.p[1]

    def a_at(z, i, l):  # weight (O, C/g, KH, KW) viewed as (g, O/g, K)
        return b.load(w, [b.int_let(f"{z} * {og} + {i}")] + b.delinearize(l, (cg, kh, kw)))

    def b_at(z, l, j):
        ci, ky, kx = b.delinearize(l, (cg, kh, kw))
        bn, y, xx = b.delinearize(j, (nb, oh, ow))
        iy = b.int_let(f"{y} * {cv.s[0]} - {pt} + {ky} * {cv.d[0]}")
        ix = b.int_let(f"{xx} * {cv.s[1]} - {pl} + {kx} * {cv.d[1]}")
        inside = f"({iy} >= 0 && {iy} < {h} && {ix} >= 0 && {ix} < {wd})"
        cy = b.int_let(f"{b.r.func('clampi')}({iy}, 0, {h - 1})")
        cx = b.int_let(f"{b.r.func('clampi')}({ix}, 0, {wd - 1})")
        ch = b.int_let(f"{z} * {cg} + {ci}") if g > 1 else ci
        v = b.load(x, [bn, ch, cy, cx])
        return f"({inside} ? {v} : {b.r.const(0, b.dtype(x))})"

    def out_at(z, i, j):
        bn, y, xx = b.delinearize(j, (nb, oh, ow))
        return [bn, b.int_let(f"{z} * {og} + {i}") if g > 1 else i, y, xx]

    gemm(b, g, og, nb * oh * ow, cg * kh * kw, a_at, b_at, out_at, b.dtype(x))


def _conv2d_direct(b: KernelBuilder, nid: int, cv, x: int, w: int) -> None:
    nb, c, h, wd = b.shape(x)
    out = b.info.entry(nid, 0)
    dt = b.dtype(x)
    g = cv.groups
    cg, og = c // g, cv.channels // g
    kh, kw = cv.k
    gid = _gid_guard(b, numel(b.shape(out)))
    on, oc, oy, ox = b.delinearize(gid, b.shape(out))
    c0 = b.int_let(f"({oc} / {og}) * {cg}")
    acc = b.let(b.r.ctype(dt), b.r.const(0, dt), "acc", const=False)
    with b.block(f"for (int ci = 0; ci < {cg}; ++ci)"):
        with b.block(f"for (int ky = 0; ky < {kh}; ++ky)"):
            iy = b.int_let(f"{oy} * {cv.s[0]} - {cv.p[0]} + ky * {cv.d[0]}")
            with b.block(f"if ({iy} >= 0 && {iy} < {h})"):
                with b.block(f"for (int kx = 0; kx < {kw}; ++kx)"):
                    ix = b.int_let(f"{ox} * {cv.s[1]} - {cv.p[1]} + kx * {cv.d[1]}")
                    with b.block(f"if ({ix} >= 0 && {ix} < {wd})"):
                        xv = b.load(x, [on, f"{c0} + ci", iy, ix])
                        wv = b.load(w, [oc, "ci", "ky", "kx"])
                        b.emit(f"{acc} += {xv} * {wv};")
    b.store([on, oc, oy, ox], acc)


def conv_transpose(b: KernelBuilder, nid: int) -> None:
    """2-D transposed convolution (NCHW, weight (C_in, C_out/g, KH, KW)) in gather form:
    one work-item per output element sums the input pixels whose strided footprint covers
    it, so no two work-items write the same element (no atomics, no col2im buffer)."""
    from nnvm.ops.nn_nd import conv_transpose_pads

    attrs = b.attrs(nid)
    ins = b.inputs(nid)
    x, w = ins[0], ins[1]
    xs, ws = b.shape(x), b.shape(w)
    if len(xs) != 4:
        raise b.unsupported(nid, "conv_transpose kernels are 2-D (NCHW) only")
    s, pb, _, d, _ = conv_transpose_pads(attrs, xs, ws)
    if min(pb) < 0:
        raise b.unsupported(nid, "conv_transpose with negative pads (from output_shape)")
    nb, c, h, wd = xs
    cog, kh, kw = ws[1], ws[2], ws[3]
    g = attrs["groups"]
    cig = c // g
    out = b.info.entry(nid, 0)
    dt = b.dtype(x)
    if len(ins) > 2:
        with_bias(b, nid, ins[2], lambda coords: [coords[1]])
    gid = _gid_guard(b, numel(b.shape(out)))
    on, oc, oy, ox = b.delinearize(gid, b.shape(out))
    c0 = b.int_let(f"({oc} / {cog}) * {cig}") if g > 1 else "0"
    col = b.int_let(f"{oc} % {cog}") if g > 1 else oc
    acc = b.let(b.r.ctype(dt), b.r.const(0, dt), "acc", const=False)
    with b.block(f"for (int ky = 0; ky < {kh}; ++ky)"):
        ty = b.int_let(f"{oy} + {pb[0]} - ky * {d[0]}")
        b.emit(f"if ({ty} < 0 || {ty} % {s[0]} != 0 || {ty} / {s[0]} >= {h}) continue;")
        iy = b.int_let(f"{ty} / {s[0]}")
        with b.block(f"for (int kx = 0; kx < {kw}; ++kx)"):
            tx = b.int_let(f"{ox} + {pb[1]} - kx * {d[1]}")
            b.emit(f"if ({tx} < 0 || {tx} % {s[1]} != 0 || {tx} / {s[1]} >= {wd}) continue;")
            ix = b.int_let(f"{tx} / {s[1]}")
            with b.block(f"for (int ci = 0; ci < {cig}; ++ci)"):
                ch = b.int_let(f"{c0} + ci") if g > 1 else "ci"
                xv = b.load(x, [on, ch, iy, ix])
                wv = b.load(w, [ch, col, "ky", "kx"])
                b.emit(f"{acc} += {xv} * {wv};")
    b.store([on, oc, oy, ox], acc)


def lstm(b: KernelBuilder, nid: int) -> None:
    """ONNX LSTM, one direction, in ONE work-group: work-item (batch b, unit j) computes its
    four gates over the input and the shared hidden state (local memory) per time step, with
    a barrier before and after the state update. Recurrent models run many small steps, so
    a kernel per step or a host round trip per step would cost more than the arithmetic.
    Falls back (host step) for peepholes, clip, coupled gates, sequence_lens, bidirectional
    layers, non-default activations, or more units than one work-group holds."""
    from nnvm.ops.sequence import rnn_input_names

    attrs = b.attrs(nid)
    names = rnn_input_names("lstm")(attrs)
    ins = dict(zip(names, b.inputs(nid)))
    acts = [a.lower() for a in attrs["activations"]]
    why = ("peepholes" if attrs["use_peepholes"] else "clip" if attrs["clip"] else
           "input_forget" if attrs["input_forget"] else
           "sequence_lens" if attrs["use_sequence_lens"] else
           "bidirectional" if attrs["direction"] == "bidirectional" else
           "activations" if acts not in ([], ["sigmoid", "tanh", "tanh"]) else None)
    x = ins["X"]
    dt = b.dtype(x)
    layout = attrs["layout"]
    xs = b.shape(x)
    seq, batch, isz = (xs[0], xs[1], xs[2]) if layout == 0 else (xs[1], xs[0], xs[2])
    hid = attrs["hidden_size"]
    n = batch * hid
    itemsize = 8 if dt == "float64" else 4
    if why is None and (n > int(b.limits.get("max_work_group_size", 256)) or
                        n * itemsize > int(b.limits.get("local_mem_size", 16384))):
        why = f"{n} units exceed one work-group"
    if why is None and not dt.startswith("float"):
        why = f"dtype {dt}"
    if why is not None:
        raise b.unsupported(nid, f"lstm kernel: {why} not supported")
    r = b.r
    t = r.ctype(dt)
    one = r.const(1, dt)
    b.local_size = (n,)
    b.global_size = (n,)
    lid = b.let(r.int_type, r.index("local", 0), "lid")
    bi = b.int_let(f"{lid} / {hid}", "b")
    j = b.int_let(f"{lid} % {hid}", "j")
    hs = b.fresh("hs")
    b.emit(r.smem_decl(dt, hs, n))

    def state(name: str) -> str:
        if name not in ins:
            return r.const(0, dt)
        return b.load(ins[name], ["0", bi, j] if layout == 0 else [bi, "0", j])

    c = b.let(t, state("initial_c"), "c", const=False)
    b.emit(f"{hs}[{lid}] = {state('initial_h')};")
    b.emit(r.barrier)
    reverse = attrs["direction"] == "reverse"
    with b.block(f"for (int s = 0; s < {seq}; ++s)"):
        tt = b.int_let(f"{seq - 1} - s" if reverse else "s", "t")
        rows = [b.int_let(f"{q * hid} + {j}", "row") for q in range(4)]
        acc = []
        for q in range(4):
            bias = (f"{b.load(ins['B'], ['0', rows[q]])} + "
                    f"{b.load(ins['B'], ['0', f'{4 * hid} + {rows[q]}'])}"
                    if "B" in ins else r.const(0, dt))
            acc.append(b.let(t, bias, "g", const=False))
        with b.block(f"for (int k = 0; k < {isz}; ++k)"):
            xv = b.let(t, b.load(x, [tt, bi, "k"] if layout == 0 else [bi, tt, "k"]), "x")
            for q in range(4):
                b.emit(f"{acc[q]} += {xv} * {b.load(ins['W'], ['0', rows[q], 'k'])};")
        with b.block(f"for (int k = 0; k < {hid}; ++k)"):
            hv = b.let(t, f"{hs}[{bi} * {hid} + k]", "h")
            for q in range(4):
                b.emit(f"{acc[q]} += {hv} * {b.load(ins['R'], ['0', rows[q], 'k'])};")

        def sigmoid(v):
            return f"({one} / ({one} + {r.func('exp', dt)}(-{v})))"
        gi, go, gf = (b.let(t, sigmoid(acc[q]), "s") for q in (0, 1, 2))
        b.emit(f"{c} = {gf} * {c} + {gi} * {r.func('tanh', dt)}({acc[3]});")
        hn = b.let(t, f"{go} * {r.func('tanh', dt)}({c})", "hn")
        b.emit(r.barrier)  # every work-item has read the old state
        b.emit(f"{hs}[{lid}] = {hn};")
        y = b.info.entry(nid, 0)
        yc = [tt, "0", bi, j] if layout == 0 else [bi, tt, "0", j]
        b.emit(f"{b.tensor(y, output=True)}[{b.linear(yc, b.shape(y))}] = {hn};")
        b.emit(r.barrier)
    for k, value in ((1, f"{hs}[{lid}]"), (2, c)):
        e = b.info.entry(nid, k)
        coords = ["0", bi, j] if layout == 0 else [bi, "0", j]
        b.emit(f"{b.tensor(e, output=True)}[{b.linear(coords, b.shape(e))}] = {value};")


Template = Callable[[KernelBuilder, int], None]

TEMPLATES: dict[str, Template] = {
    "dense": dense, "matmul": matmul, "conv2d": conv2d, "conv_transpose": conv_transpose,
    "lstm": lstm,
    "max_pool2d": pool2d, "avg_pool2d": pool2d,
    "global_max_pool2d": global_pool2d, "global_avg_pool2d": global_pool2d,
    "softmax": softmax, "log_softmax": softmax,
    **{name: reduce for name in ("sum", "mean", "max", "min", "prod", "argmax", "argmin",
                                 "collapse_sum_like")},
}
