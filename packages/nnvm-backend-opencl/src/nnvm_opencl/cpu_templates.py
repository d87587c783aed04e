"""CPU-device variants of the GEMM-shaped templates: register blocking, vectors, no barriers.

A CPU OpenCL driver (PoCL) runs a work-group as a loop over its work-items; a barrier splits
that loop into parallel regions and turns every private variable that lives across it into
a per-work-item array in memory, so the local-memory tiled GEMM of
``nnvm_codegen_c.templates.gemm`` is
slow there. These variants give each work-item a register block of the output instead
(``MR`` rows x ``NR`` columns or ``MR`` rows x one vector of pixels), read operands straight
from global memory (the CPU caches do the tiling), and spell the innermost arithmetic with
the dialect's vector types so the work-item's loop is already SIMD; work-groups are one
work-item (``reqd_work_group_size(1, 1, 1)``), which PoCL runs as a plain function call.

``OpenCLRenderer.template_variant`` offers them to ``nnvm_codegen_c.lower.lower_group`` when
the device limits say ``device_type == "cpu"`` (they live here, not in the shared generator,
because only OpenCL has CPU drivers). A variant returns False when a shape or layout does
not fit it, and the portable template runs instead. Three kernels:

* ``dot`` -- ``C[i, j] = sum_l A[i, l] * B[j, l]`` (both operands contiguous along K): dense
  and ``matmul(transpose_b=True)``; one vector accumulator per (row, column), summed at the
  end.
* ``axpy`` -- ``C[i, j] = sum_l A[i, l] * B[l, j]`` (B contiguous along columns): plain
  matmul; a row of vectors per output row.
* ``conv2d`` -- direct NCHW convolution: ``MR`` output channels x up to ``CONV_VECTORS``
  vectors of consecutive output pixels of one row; stride-1 interior rows are read with
  vector loads.
"""

from __future__ import annotations

from typing import Callable

from nnvm.ops.nn import ConvGeometry, PoolGeometry
from nnvm_codegen_c.builder import KernelBuilder, numel
from nnvm_codegen_c.templates import with_bias

#: output rows x columns per work-item of the dot kernel (16 vector accumulators).
DOT_BLOCK = (4, 4)
#: output rows per work-item of the axpy kernel, and vectors per row.
AXPY_BLOCK = (4, 2)
#: output channels per work-item of the direct convolution.
CONV_CHANNELS = 8
#: vectors of consecutive output pixels per work-item of the direct convolution (each input
#: vector load and weight broadcast then feeds more FMAs; 8 x 3 accumulators fit 32 zmm).
CONV_VECTORS = 3
#: ... and when the vectors tile the row exactly (with 4 channels per work-item past 3)
CONV_VECTORS_EXACT = 5




def _width(b: KernelBuilder, extent: int, exact: bool = False) -> int:
    """The widest vector width <= the device's preferred float width that ``extent`` fills
    (divides, when ``exact``); 0 when none does."""
    pref = int(b.limits.get("preferred_vector_width_float", 8) or 8)
    widths = sorted((w for w in b.r.vector_widths if w <= max(pref, 4)), reverse=True)
    for w in widths:
        if w <= extent and (not exact or extent % w == 0):
            return w
    return 0


def _launch(b: KernelBuilder, *sizes: int) -> list[str]:
    b.local_size = (1,) * len(sizes)
    b.global_size = tuple(max(int(s), 1) for s in sizes)
    return [b.let(b.r.int_type, b.r.index("global", d), f"g{d}_") if s > 1 else "0"
            for d, s in enumerate(sizes)]


def _clamp_row(i0: str, i: int, m: int) -> str:
    """``i0 + i`` clamped to the last row, so a partial block's loads stay in bounds."""
    return f"({i0} + {i} < {m} ? {i0} + {i} : {m - 1})"


def _hsum(b: KernelBuilder, vec: str, width: int, dtype: str) -> str:
    """The sum of ``vec``'s lanes (a tree of half additions), as a mutable scalar."""
    cur = vec
    while width > 1:
        width //= 2
        ctype = b.r.vec_type(dtype, width) if width > 1 else b.r.ctype(dtype)
        cur = b.let(ctype, f"{b.r.vec_half(cur, False)} + {b.r.vec_half(cur, True)}", "h",
                    const=width > 1)
    return cur


def _store_block(b: KernelBuilder, row0: str, nrows: int, col0: str, ncols: int,
                 value: Callable, out_at: Callable, z: str, guard_rows: int | str | None,
                 guard_cols: int | None, dtype: str) -> None:
    """Store ``value(i, j)`` at ``out_at(z, row0 + i, col0 + j)`` for an ``nrows`` x
    ``ncols`` block, guarded where it may overhang ``guard_rows``/``guard_cols``.

    The block goes through a private array and ONE loop nest whose body is the group's
    fused epilogue: unrolled per element (up to 8 x 80 here) every epilogue, with its
    inlined exp/erf, was emitted once per element, which made model sources megabytes long
    and PoCL's cold compile take tens of seconds.
    """
    r = b.r
    blk = b.fresh("blk")
    b.emit(f"{r.ctype(dtype)} {blk}[{nrows * ncols}];")
    for i in range(nrows):
        for j in range(ncols):
            b.emit(f"{blk}[{i * ncols + j}] = {value(i, j)};")
    bi, bj = b.fresh("bi"), b.fresh("bj")
    with b.block(f"for (int {bi} = 0; {bi} < {nrows}; ++{bi})"):
        gi = b.int_let(f"{row0} + {bi}", "gi") if nrows > 1 else row0
        with b.block(f"for (int {bj} = 0; {bj} < {ncols}; ++{bj})"):
            gj = b.int_let(f"{col0} + {bj}", "gj")
            conds = ([f"{gi} < {guard_rows}"] if guard_rows is not None else []) + \
                    ([f"{gj} < {guard_cols}"] if guard_cols is not None else [])
            if conds:
                b.emit(f"if (!({' && '.join(conds)})) continue;")
            b.store(out_at(z, gi, gj), f"{blk}[{bi} * {ncols} + {bj}]")


def dot_gemm(b: KernelBuilder, batch: int, m: int, n: int, k: int, a: str, a_row: Callable,
             bt: str, b_row: Callable, out_at: Callable, dtype: str) -> bool:
    """``C[z, i, j] = sum_l A[z, i, l] * B[z, j, l]``; ``a_row(z, i)`` / ``b_row(z, j)`` are
    element offsets of a K-contiguous row inside the tensors named ``a`` / ``bt``."""
    r = b.r
    v = _width(b, k)
    if not v:
        return False
    mr, nr = min(DOT_BLOCK[0], m), min(DOT_BLOCK[1], n)
    ib, jb, z = _launch(b, -(-m // mr), -(-n // nr), batch)
    i0 = b.int_let(f"{ib} * {mr}", "i0_")
    j0 = b.int_let(f"{jb} * {nr}", "j0_")
    pa, pb = [], []
    for i in range(mr):
        pa.append(b.fresh("pa"))
        b.emit(r.ptr_decl(dtype, pa[-1], f"{a} + {a_row(z, _clamp_row(i0, i, m))}"))
    for j in range(nr):
        pb.append(b.fresh("pb"))
        b.emit(r.ptr_decl(dtype, pb[-1], f"{bt} + {b_row(z, _clamp_row(j0, j, n))}"))
    vt = r.vec_type(dtype, v)
    acc = [[b.let(vt, r.vec_splat(dtype, v, r.const(0, dtype)), "acc", const=False)
            for _ in range(nr)] for _ in range(mr)]
    kv = k // v * v
    with b.block(f"for (int l = 0; l < {kv}; l += {v})"):
        av = [b.let(vt, r.vload(v, f"{p} + l", dtype), "a") for p in pa]
        bv = [b.let(vt, r.vload(v, f"{p} + l", dtype), "b") for p in pb]
        for i in range(mr):
            for j in range(nr):
                b.emit(f"{acc[i][j]} += {av[i]} * {bv[j]};")
    sums = [[_hsum(b, acc[i][j], v, dtype) for j in range(nr)] for i in range(mr)]
    if k % v:
        with b.block(f"for (int l = {kv}; l < {k}; ++l)"):
            for i in range(mr):
                for j in range(nr):
                    b.emit(f"{sums[i][j]} += {pa[i]}[l] * {pb[j]}[l];")
    _store_block(b, i0, mr, j0, nr, lambda i, j: sums[i][j], out_at, z,
                 m if m % mr else None, n if n % nr else None, dtype)
    return True


def axpy_gemm(b: KernelBuilder, batch: int, m: int, n: int, k: int, a: str, a_row: Callable,
              bt: str, b_row: Callable, out_at: Callable, dtype: str) -> bool:
    """``C[z, i, j] = sum_l A[z, i, l] * B[z, l, j]``; ``a_row(z, i)`` is the offset of A's
    K-contiguous row i, ``b_row(z, l)`` of B's N-contiguous row l."""
    r = b.r
    v = _width(b, n, exact=True)
    if not v:
        return False
    mr = min(AXPY_BLOCK[0], m)
    nc = AXPY_BLOCK[1] if (n // v) % AXPY_BLOCK[1] == 0 else 1
    ib, jb, z = _launch(b, -(-m // mr), n // (v * nc), batch)
    i0 = b.int_let(f"{ib} * {mr}", "i0_")
    j0 = b.int_let(f"{jb} * {v * nc}", "j0_")
    pa = []
    for i in range(mr):
        pa.append(b.fresh("pa"))
        b.emit(r.ptr_decl(dtype, pa[-1], f"{a} + {a_row(z, _clamp_row(i0, i, m))}"))
    pb = b.fresh("pb")
    b.emit(r.ptr_decl(dtype, pb, f"{bt} + {b_row(z, '0')} + {j0}"))
    vt = r.vec_type(dtype, v)
    acc = [[b.let(vt, r.vec_splat(dtype, v, r.const(0, dtype)), "acc", const=False)
            for _ in range(nc)] for _ in range(mr)]
    with b.block(f"for (int l = 0; l < {k}; ++l)"):
        bv = [b.let(vt, r.vload(v, f"{pb} + l * {n} + {c * v}", dtype), "b")
              for c in range(nc)]
        for i in range(mr):
            av = b.let(r.ctype(dtype), f"{pa[i]}[l]", "a")
            for c in range(nc):
                b.emit(f"{acc[i][c]} += {av} * {bv[c]};")
    _store_block(b, i0, mr, j0, v * nc, lambda i, j: r.vec_lane(acc[i][j // v], j % v),
                 out_at, z, m if m % mr else None, None, dtype)
    return True


def dense(b: KernelBuilder, nid: int) -> bool:
    ins = b.inputs(nid)
    x, w = ins[0], ins[1]
    xs = b.shape(x)
    units, kdim = b.shape(w)
    lead = list(xs[:-1])
    rows = numel(lead)
    if kdim < 4:
        return False

    def out_at(z, i, j):
        return (b.delinearize(i, lead) if len(lead) != 1 else [i]) + [j]

    plain = b.store
    if len(ins) > 2:
        with_bias(b, nid, ins[2], lambda coords: [coords[-1]])
    ok = dot_gemm(b, 1, rows, units, kdim, b.tensor(x), lambda z, i: f"({i}) * {kdim}",
                  b.tensor(w), lambda z, j: f"({j}) * {kdim}", out_at, b.dtype(x))
    if not ok:
        b.store = plain
    return ok


def matmul(b: KernelBuilder, nid: int) -> bool:
    ea, eb = b.inputs(nid)
    sa, sb = b.shape(ea), b.shape(eb)
    ta, tb = b.attrs(nid)["transpose_a"], b.attrs(nid)["transpose_b"]
    if len(sa) < 2 or len(sb) < 2 or ta:
        return False
    so = b.shape(b.info.entry(nid, 0))
    m, kdim = sa[-2], sa[-1]
    n = sb[-2] if tb else sb[-1]
    bshape = tuple(so[:-2])
    nb = numel(bshape)

    def base(z, shape):
        zc = b.delinearize(z, bshape) if nb > 1 else ["0"] * len(bshape)
        return b.linear(b.broadcast_coords(shape[:-2], bshape, zc) + ["0", "0"], shape)

    def out_at(z, i, j):
        zc = b.delinearize(z, bshape) if nb > 1 else ["0"] * len(bshape)
        return zc + [i, j]

    a_row = lambda z, i: f"{base(z, sa)} + ({i}) * {kdim}"  # noqa: E731
    if tb:
        b_row = lambda z, j: f"{base(z, sb)} + ({j}) * {kdim}"  # noqa: E731
        return dot_gemm(b, nb, m, n, kdim, b.tensor(ea), a_row, b.tensor(eb), b_row, out_at,
                        b.dtype(ea))
    b_row = lambda z, l: f"{base(z, sb)} + ({l}) * {n}"  # noqa: E731
    return axpy_gemm(b, nb, m, n, kdim, b.tensor(ea), a_row, b.tensor(eb), b_row, out_at,
                     b.dtype(ea))


def _conv_segment(b: KernelBuilder, ow: int, masked: bool) -> tuple[int, int]:
    """(vector width, vectors) of the output-row segment one work-item computes.

    A segment of >= 16 lanes that tiles the row exactly wastes nothing. Otherwise the widest
    ragged segment is best when row edges are read as masked whole vectors (``masked``:
    20-wide rows ran 23 GFLOP/s as 4-lane vectors, 63 as 3 x 8 lanes); without masked loads
    every lane past the row's end is a guarded scalar read, so exact small segments win
    (40-wide rows: 43 GFLOP/s as 5 x 8 lanes, 31 as 2 x 24 lanes with a ragged end).
    """
    widths = [w for w in (16, 8) if w <= max(_width(b, ow) or 4, 8)]
    for w in widths:
        if ow % w == 0:
            per_row = ow // w
            nc = max(k for k in range(1, CONV_VECTORS_EXACT + 1) if per_row % k == 0)
            if w * nc >= 16 or not masked:
                return w, nc
    best = (0.0, 4, 1)
    for w in widths + [4]:
        for nc in range(1, CONV_VECTORS + 1):
            seg = w * nc
            lanes = -(-ow // seg) * seg
            score = (ow / lanes) ** 2 * min(seg, ow)  # wasted lanes cost twice
            best = max(best, (score, w, nc))
    return best[1], best[2]


def _lane_in_row(base: str, offset: int, width: int) -> str:
    """Mask lane ``-1`` when column ``base + offset`` lies in ``[0, width)``, else ``0``;
    folded here when ``base`` is a literal (clang warns on constant ``&&`` operands)."""
    try:
        col = int(base) + offset
    except ValueError:
        return f"({base} + {offset} >= 0 && {base} + {offset} < {width} ? -1 : 0)"
    return "-1" if 0 <= col < width else "0"


def _edge_masks(b: KernelBuilder, ix0: str, v: int, nc: int, kw: int, sx: int, dx: int,
                wd: int) -> dict[tuple[int, int], str]:
    """Per (kx, vector q): an int vector, -1 on lanes whose input column lies in the row,
    0 outside (left padding, or past the row's end). Computed once per work-item."""
    r = b.r
    ivt = r.vec_type("int32", v)
    masks = {}
    for kx in range(kw):
        for q in range(nc):
            lanes = [_lane_in_row(ix0, q * v * sx + kx * dx + t * sx, wd) for t in range(v)]
            masks[kx, q] = b.let(ivt, f"(({ivt})({', '.join(lanes)}))", "m")
    return masks


def _conv_row_guarded(b, row, ix0, v, nc, kw, sx, dx, wd, vt, dt, lanes_at, fma_taps):
    """The kx loop of one input row, each lane outside the row read as zero by a guarded
    scalar load (when the arena has no guard bytes for masked whole-vector reads)."""
    r = b.r
    zero = r.const(0, dt)
    with b.block(f"for (int kx = 0; kx < {kw}; ++kx)"):
        xvs = []
        for q in range(nc):
            ix = b.int_let(f"{ix0} + {q * v * sx} + kx * {dx}", "x")
            xv = b.fresh("xv")
            xvs.append(xv)
            b.emit(f"{vt} {xv};")
            inside = f"{ix} >= 0 && {ix} + {(v - 1) * sx} < {wd}"
            with b.block(f"if ({inside})"):
                if sx == 1:
                    b.emit(f"{xv} = {r.vload(v, f'{row} + {ix}', dt)};")
                else:
                    b.emit(f"{xv} = {lanes_at(row, ix)};")
            with b.block("else"):
                for t in range(v):
                    xq = f"{ix} + {t * sx}"
                    b.emit(f"{r.vec_lane(xv, t)} = ({xq} >= 0 && {xq} < {wd}) ? "
                           f"{row}[{xq}] : {zero};")
        fma_taps(row, "kx", xvs)


def conv2d(b: KernelBuilder, nid: int) -> bool:
    """Direct NCHW/OIHW convolution, ``CONV_CHANNELS`` channels x a vector of pixels."""
    attrs = b.attrs(nid)
    if attrs.get("layout", "NCHW") != "NCHW" or attrs.get("kernel_layout", "OIHW") != "OIHW":
        return False
    ins = b.inputs(nid)
    x, w = ins[0], ins[1]
    cv = ConvGeometry(attrs)
    nb, c, h, wd = b.shape(x)
    g = cv.groups
    cg, og = c // g, cv.channels // g
    oh, ow = cv.out_hw(h, wd)
    kh, kw = cv.k
    (sy, sx), (dy, dx) = cv.s, cv.d
    pt, pl = cv.p[0], cv.p[1]
    dt = b.dtype(x)
    guard = int(b.limits.get("overread_guard_bytes", 0))
    # masked whole-vector reads at row edges may touch up to a segment (+ kernel) past a
    # tensor: allowed when the arena keeps that many bytes readable around its tensors
    over = (16 * CONV_VECTORS_EXACT * sx + kw * dx + pl) * 4
    masked = dt == "float32" and guard >= over
    v, nc = _conv_segment(b, ow, masked)
    mr = CONV_CHANNELS if og % CONV_CHANNELS == 0 or og > 2 * CONV_CHANNELS else 4
    if nc > CONV_VECTORS:  # keep mr x nc accumulators within the vector registers
        mr = 4
    mr = min(mr, og)  # depthwise-like groups (1-3 output channels): one block per group
    seg_w = v * nc
    nxb, nob = -(-ow // seg_w), -(-og // mr)
    r = b.r
    vt = r.vec_type(dt, v)
    if len(ins) > 2:
        with_bias(b, nid, ins[2], lambda coords: [coords[1]])
    seg, ob, n = _launch(b, oh * nxb, g * nob, nb)
    oy = b.int_let(f"{seg} / {nxb}" if nxb > 1 else seg, "oy")
    ox0 = b.int_let(f"({seg} % {nxb}) * {seg_w}" if nxb > 1 else "0", "ox")
    gi = b.int_let(f"{ob} / {nob}" if g > 1 else "0", "gi")
    oc0 = b.int_let(f"{gi} * {og} + ({ob} % {nob}) * {mr}" if g > 1 else f"{ob} * {mr}", "oc")
    px = b.fresh("px")
    b.emit(r.ptr_decl(dt, px, f"{b.tensor(x)} + ({n} * {c} + {gi} * {cg}) * {h * wd}"))
    ksz = cg * kh * kw
    pw = []
    for i in range(mr):
        pw.append(b.fresh("pw"))
        last = f"{gi} * {og} + {og - 1}"
        b.emit(r.ptr_decl(dt, pw[-1], f"{b.tensor(w)} + ({oc0} + {i} < {last} + 1 ? {oc0} + "
                                      f"{i} : {last}) * {ksz}"))
    acc = [[b.let(vt, r.vec_splat(dt, v, r.const(0, dt)), "acc", const=False)
            for _ in range(nc)] for _ in range(mr)]
    iy0 = b.int_let(f"{oy} * {sy} - {pt}", "iy")
    ix0 = str(-pl) if ox0 == "0" else b.int_let(f"{ox0} * {sx} - {pl}", "ix")
    masks = _edge_masks(b, ix0, v, nc, kw, sx, dx, wd) if masked else None

    def fma_taps(row: str, kx: str, xvs: list[str]) -> None:
        widx = b.int_let(f"ci * {kh * kw} + ky * {kw} + {kx}", "wi")
        for i in range(mr):
            wv = b.let(r.ctype(dt), f"{pw[i]}[{widx}]", "wv")
            for q in range(nc):
                b.emit(f"{acc[i][q]} += {wv} * {xvs[q]};")

    def lanes_at(row: str, ix: str) -> str:
        return f"(({vt})({', '.join(f'{row}[{ix} + {t * sx}]' for t in range(v))}))"

    with b.block(f"for (int ci = 0; ci < {cg}; ++ci)"):
        with b.block(f"for (int ky = 0; ky < {kh}; ++ky)"):
            iy = b.int_let(f"{iy0} + ky * {dy}", "y")
            b.emit(f"if ({iy} < 0 || {iy} >= {h}) continue;")
            row = b.fresh("row")
            b.emit(r.ptr_decl(dt, row, f"{px} + (ci * {h} + {iy}) * {wd}"))
            if masks is not None:  # kx unrolled: each tap's lanes masked by its edge mask
                for kx in range(kw):
                    xvs = []
                    for q in range(nc):
                        ix = b.int_let(f"{ix0} + {q * v * sx + kx * dx}", "x")
                        raw = r.vload(v, f"{row} + {ix}", dt) if sx == 1 else lanes_at(row, ix)
                        xvs.append(b.let(vt, r.vec_and_mask(raw, masks[kx, q], dt, v), "xv"))
                    fma_taps(row, str(kx), xvs)
            else:
                _conv_row_guarded(b, row, ix0, v, nc, kw, sx, dx, wd, vt, dt, lanes_at,
                                  fma_taps)

    lim_c = b.int_let(f"{gi} * {og} + {og}", "ocend") if og % mr else None
    _store_block(b, oc0, mr, ox0, seg_w, lambda i, q: r.vec_lane(acc[i][q // v], q % v),
                 lambda z, oc, ox: [n, oc, oy, ox], "0", lim_c, ow if ow % seg_w else None,
                 dt)
    return True


def pool2d(b: KernelBuilder, nid: int) -> bool:
    """max/avg pooling (NCHW, float32): a work-item computes vectors of consecutive outputs
    of one row; each window tap is one (masked) vector read, stride 2 as a double-width
    read keeping the even lanes. Needs the arena's guard bytes (masked edge reads)."""
    attrs = b.attrs(nid)
    src = b.inputs(nid)[0]
    dt = b.dtype(src)
    if attrs.get("layout", "NCHW") != "NCHW" or dt != "float32":
        return False
    n, c, h, wd = b.shape(src)
    pl = PoolGeometry(attrs)
    (pt, plft, _, _), (oh, ow) = pl.pads(h, w=wd)
    (kh, kw), (sy, sx) = pl.k, pl.s
    v = 8 if sx == 2 else 16
    if _width(b, 16) < v or sx > 2:
        return False
    nc = max(1, min(2, -(-ow // v)))
    seg_w = v * nc
    if int(b.limits.get("overread_guard_bytes", 0)) < (2 * seg_w * sx + kw + plft) * 4:
        return False
    r = b.r
    vt, ivt = r.vec_type(dt, v), r.vec_type("int32", v)
    is_max = b.node(nid).op.name == "max_pool2d"
    nxb = -(-ow // seg_w)
    seg, ch, bn = _launch(b, oh * nxb, c, n)
    oy = b.int_let(f"{seg} / {nxb}" if nxb > 1 else seg, "oy")
    ox0 = b.int_let(f"({seg} % {nxb}) * {seg_w}" if nxb > 1 else "0", "ox")
    x0 = str(-plft) if ox0 == "0" else b.int_let(f"{ox0} * {sx} - {plft}", "x0")
    y0 = b.int_let(f"{oy} * {sy} - {pt}", "y0")
    plane = b.fresh("plane")
    b.emit(r.ptr_decl(dt, plane, f"{b.tensor(src)} + ({bn} * {c} + {ch}) * {h * wd}"))
    start = r.vec_splat(dt, v, r.const(float("-inf") if is_max else 0, dt))
    acc = [b.let(vt, start, "acc", const=False) for _ in range(nc)]
    cnt = [b.let(vt, r.vec_splat(dt, v, r.const(0, dt)), "cnt", const=False)
           for _ in range(nc)] if not is_max else []
    masks = _edge_masks(b, x0, v, nc, kw, sx, 1, wd)
    ninf = b.let(ivt, f"as_{ivt}({start})", "ninf") if is_max else None
    one = b.let(ivt, f"as_{ivt}({r.vec_splat(dt, v, r.const(1, dt))})", "one") \
        if not is_max else None
    with b.block(f"for (int dy = 0; dy < {kh}; ++dy)"):
        iy = b.int_let(f"{y0} + dy", "iy")
        b.emit(f"if ({iy} < 0 || {iy} >= {h}) continue;")
        row = b.fresh("row")
        b.emit(r.ptr_decl(dt, row, f"{plane} + {iy} * {wd}"))
        for dx in range(kw):
            for q in range(nc):
                at = f"{row} + {x0} + {q * v * sx + dx}"
                raw = r.vload(v, at, dt) if sx == 1 else f"{r.vload(2 * v, at, dt)}.even"
                m = masks[dx, q]
                bits = b.let(ivt, f"as_{ivt}({raw})", "xb")
                if is_max:
                    xv = b.let(vt, f"as_{vt}(({bits} & {m}) | ({ninf} & ~{m}))", "xv")
                    b.emit(f"{acc[q]} = {xv} > {acc[q]} ? {xv} : {acc[q]};")
                else:
                    b.emit(f"{acc[q]} += as_{vt}({bits} & {m});")
                    b.emit(f"{cnt[q]} += as_{vt}({one} & {m});")
    if not is_max:
        for q in range(nc):
            div = (r.vec_splat(dt, v, r.const(kh * kw, dt))
                   if attrs.get("count_include_pad", False) else cnt[q])
            b.emit(f"{acc[q]} = {acc[q]} / {div};")
    _store_block(b, "0", 1, ox0, seg_w, lambda i, t: r.vec_lane(acc[t // v], t % v),
                 lambda z, _, x: [bn, ch, oy, x], "0", None, ow if ow % seg_w else None, dt)
    return True


CPU_TEMPLATES: dict[str, Callable[[KernelBuilder, int], bool]] = {
    "dense": dense, "matmul": matmul, "conv2d": conv2d,
    "max_pool2d": pool2d, "avg_pool2d": pool2d,
}


def cpu_variant(op: str, limits: dict) -> Callable[[KernelBuilder, int], bool] | None:
    """The CPU variant of ``op``'s template on a device with ``limits``, or None: a GPU or
    accelerator keeps the portable local-memory templates of nnvm_codegen_c."""
    return CPU_TEMPLATES.get(op) if limits.get("device_type") == "cpu" else None
