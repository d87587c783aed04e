"""Depthwise convolution (and unit-stride pooling) over one channel's plane at a time,
computed on the *flattened* padded plane (strided pooling keeps the row template of
``window_schedule.schedule_window``: measured on the roofline grid, its stride-2 windows do
too little work per input element to pay for the phase copy below). Small planes, where the
flat tile wastes half its lanes, take ``window_blocked``'s channel-blocked kernel instead.

Why: computed row by row on a fully materialised padded tensor (the earlier lowering), a
depthwise conv paid three times over. The padded copy of the whole input was a second pass
through memory (half the time of MobileNet's stride-2 layers); stride 2 made every vector
load along the row a stride-2 gather, nine times per output; and rows no vector divides (7,
14, 28, 38 wide) got 7-, 14- or 2-lane vectors or none.

Here, per (n, c) plane, inside the parallel loop:

1. the plane is padded into a small buffer that stays in cache (``pad_*``), split into its
   ``sh x sw`` *stride phases* (phase ``(a, e)`` holds padded rows ``a, a + sh, ...`` and
   columns ``e, e + sw, ...``), so every tap of a strided window reads a phase at unit
   stride; the copy is paid once, the loads ``kh x kw`` times. Only the border is written
   with the pad value (:func:`_partition_padding`), and strided phases are read straight
   from the input (:func:`_phase_columns`), no padded plane in between: made first (a
   padded plane, or ``sh`` padded rows at a time), 3 x 3 s2 over 144 x 56 x 56 took 1.41x
   as long, over 32 x 400 x 304 1.17x, over 64 x 200 x 152 and 32 x 112 x 112 1.01-1.04x
   (1 thread, A/B in one process);
2. the window is computed over the phase planes *flattened*: output ``(i, j)`` sits at
   ``p = i * Wrow + j`` where ``Wrow`` is the phase planes' row pitch, and tap ``(rh, rw)``
   reads the flat phase plane at ``p + off(rh, rw)``, one contiguous vector load per tap
   for any row width. Columns ``j >= ow`` of each flat row are computed and dropped (they
   read the next row's padding: ``Wrow >= ow + (kw - 1) * dw // sw`` keeps the valid ones
   from wrapping), so a 7 x 7 plane is five 16-lane vectors instead of seven 7-lane ones;
3. the output rows are read back out of the flat result, the epilogue fused into that copy.

A depthwise window whose output rows round up to whole vectors at little waste
(:func:`row_tiled_width`) is computed as rows of that width instead of flat, in register
tiles of one vector in each of ``rt`` consecutive rows, every tap unrolled: the input row a
tap ``(rh, rw)`` of output row ``r`` reads is the one tap ``(rh - 1, rw)`` of row ``r + 1``
reads, so LLVM loads it once for both (5 x 5 over 256 x 50 x 38: 523 -> 374 us; 3 x 3 over
16 x 400 x 304, whose rows are whole vectors and need no crop: 990 -> 566 us; 1 thread).

A large unit-stride plane whose rows half vectors divide but whole ones do not (152 wide
at 16 lanes) is row-tiled in half vectors over rows exactly ``ow`` wide
(:func:`half_vector_rows`): the register tiles store the output itself, with no crop
(3 x 3 over 64 x 200 x 152: 1006 -> 729 us at 1 thread, 422 -> 328 us at 2).

An A/B of two variants built in one process must call ``cache.clear_memory()`` between the
builds: the in-memory kernel cache is keyed by the graph, not by this module's constants,
so the second build reuses the first kernel (earlier A/Bs of padding per strip, the crop
fused into the register tile, one-pass padding and strided phases read from the input
compared a kernel with itself and are void). Measured so: dropping the unit-stride pad copy
altogether (wrong output, a bound) makes 3 x 3 over 2 x 200 x 152 1.22x faster at 1 thread,
so reading the input directly is worth a kernel of its own.

Strided windows over planes of 256 KB and more (48 KB for 3 x 3 s2) are computed in
strips of output rows instead (``depthwise_strided``: :func:`flat_planes` and
:func:`flat_window` build its compute), so the input streams in from DRAM while the taps
run: 3 x 3 s2 over 32 x 400 x 304 1.26 -> 0.78 ms at 1 thread (best of 11 blocks, loaded
box), over 64 x 200 x 152 0.367 -> 0.296 ms (medians). So are unit-stride depthwise
windows over input planes of 32 KB and more (3 x 3 over 64 x 200 x 152 713 -> 538 us at 1
thread, min of 7 interleaved blocks); :func:`half_vector_rows` and the row tiles below
then serve smaller planes (and the A/B with ``UNIT_STRIDE_STRIPS`` off).

Shapes are static; the geometry is :class:`FlatPlane`. ``window_schedule.schedule_window`` hands
a window whose input is phase planes (:func:`is_flat`) to :func:`schedule_flat`.
"""

from __future__ import annotations

import dataclasses
import math

from tvm import te, tirx
from tvm.sym import Analyzer, detect_linear_equation

from .depthwise_strided import strip_planes, strip_window, wants_strips
from .pool_rows import POOL_ACCUMULATOR_SCOPE

#: output vectors per register tile (independent accumulators): an FMA chain of one vector
#: per tile waits on its own latency at every tap
REG_TILE_PREFS = (4, 5, 3, 6, 7, 2, 8)
#: output rows a plane of short rows may have for its row loop to be unrolled
SHORT_ROWS_UNROLLED = 32
#: most outputs a depthwise row tile may compute per flat-tile output (its rounded rows):
#: at 1.4 rather than 1.15, 3 x 3 over 128 x 50 x 50 ran 155 -> 130 us and 32 x 35 x 35
#: 21.5 -> 17.9 us; at 2, stride-2 rows of 19 ran slower than flat (1 thread)
ROW_TILE_WASTE_MAX = 1.4
#: rows per register tile of a row-tiled depthwise window, in order of preference
ROW_TILE_PREFS = (5, 4, 6, 3, 7, 8, 2)
#: narrowest half vector (AVX-512's 8 lanes; AVX2's 4 would halve its FMAs), and smallest
#: output plane, a depthwise window is row-tiled in half vectors for (:func:`half_vector_rows`)
HALF_VECTOR_MIN_LANES = 8
HALF_VECTOR_MIN_PLANE_BYTES = 64 * 1024


@dataclasses.dataclass(frozen=True)
class FlatPlane:
    """Geometry of one window on the flattened phase planes of an ``h x w`` input."""

    kh: int
    kw: int
    sh: int
    sw: int
    dh: int
    dw: int
    pt: int
    pl: int
    h: int
    w: int
    oh: int
    ow: int
    lanes: int

    @property
    def gh(self) -> int:  # phases a dilated tap can land on are multiples of gcd(d, s)
        return math.gcd(self.dh, self.sh)

    @property
    def gw(self) -> int:
        return math.gcd(self.dw, self.sw)

    @property
    def phases_h(self) -> int:
        return max((r * self.dh) % self.sh for r in range(self.kh)) // self.gh + 1

    @property
    def phases_w(self) -> int:
        return max((r * self.dw) % self.sw for r in range(self.kw)) // self.gw + 1

    @property
    def reach(self) -> tuple[int, int]:
        """How far (phase rows, phase columns) the last tap lies from the first."""
        return (self.kh - 1) * self.dh // self.sh, (self.kw - 1) * self.dw // self.sw

    @property
    def tile(self) -> tuple[int, int]:
        """``(R, Wrow)``: flat rows computed and their pitch, ``R >= oh``, ``Wrow >= ow +
        reach`` (so valid columns never wrap into the next row), ``R * Wrow`` whole vectors:
        the fewest such, preferring (within 1/32 more) a count a register tile divides."""
        wmin = self.ow + self.reach[1]
        cands = sorted((r * w, r, w) for r in range(self.oh, self.oh + self.lanes + 1)
                       for w in range(wmin, wmin + self.lanes + 1) if (r * w) % self.lanes == 0)
        best = cands[0][0]
        tiled = [c for c in cands if c[0] * 32 <= best * 33
                 and _reg_tile(c[0] // self.lanes) > 1]
        _, r, w = (tiled or cands)[0]
        return r, w

    @property
    def rows(self) -> int:
        """Rows of each phase plane: the computed rows, the taps' reach, and one more for the
        wrap of the dropped columns of the last row."""
        return self.tile[0] + self.reach[0] + (1 if self.reach[1] else 0)


def flat_planes(x, g: FlatPlane, pad_value, name: str, depthwise: bool = False):
    """``pad_phases_<name>``: ``(n, c, phases_h, phases_w, rows, Wrow)`` padded phase planes.
    Strided, they are de-interleaved from a padded plane (``pad_<name>``), which the
    schedule inlines: its padding and columns tell :func:`_phase_columns` where the checks
    can be split off (in the phase layout itself the check ties two loops, row and phase).
    ``depthwise``: a depthwise conv's planes (large unit-stride ones take strips too; unit-
    stride pools keep the whole plane, their strips unmeasured)."""
    if wants_strips(g, depthwise):  # large planes: strips of rows (``depthwise_strided``)
        return strip_planes(x, g, pad_value, name, _padded_at)
    n, c = x.shape[0], x.shape[1]
    shape = (n, c, g.phases_h, g.phases_w, g.rows, g.tile[1])
    if g.sh == g.sw == 1:
        return te.compute(shape, lambda b, ch, a, e, r, t: _padded_at(
            x, g, pad_value, b, ch, r, t), name="pad_phases_" + name)
    hp = (g.rows - 1) * g.sh + (g.phases_h - 1) * g.gh + 1
    wp = (g.tile[1] - 1) * g.sw + (g.phases_w - 1) * g.gw + 1
    xp = te.compute((n, c, hp, wp), lambda b, ch, r, t: _padded_at(
        x, g, pad_value, b, ch, r, t), name="pad_" + name)
    return te.compute(shape, lambda b, ch, a, e, r, t: xp[
        b, ch, r * g.sh + a * g.gh, t * g.sw + e * g.gw], name="pad_phases_" + name)


def _padded_at(x, g: FlatPlane, pad_value, b, ch, r, t):
    """Element ``(r, t)`` of the padded plane: the input, or ``pad_value`` outside it."""
    hi, wi = r - g.pt, t - g.pl
    inside = tirx.all(hi >= 0, hi < g.h, wi >= 0, wi < g.w)
    return tirx.if_then_else(inside, x[b, ch, hi, wi], tirx.const(pad_value, x.dtype))


def flat_window(xq, g: FlatPlane, combine, tap, name: str):
    """The window over the flat phase planes: ``(n, c, R, Wrow)``, reduced by ``combine``
    (``te.sum``/``te.max``) over ``tap(value, c, rh, rw)`` (the weight multiply, or the
    value itself); then cropped to ``(n, c, oh, ow)``."""
    if xq.op.name.startswith("pad_strips_"):  # strip phases (:func:`flat_planes`)
        return strip_window(xq, g, combine, tap, name)
    n, c = xq.shape[0], xq.shape[1]
    rows, wrow = g.tile
    width = row_tiled_width(g) if name.startswith("anchor_depthwise") else wrow
    rows = row_tiled_rows(g) if width % g.lanes == 0 or width != wrow else rows
    rh, rw = te.reduce_axis((0, g.kh), "rh"), te.reduce_axis((0, g.kw), "rw")

    def at(b, ch, r, t):
        dy, dx = rh * g.dh, rw * g.dw
        q = (r + dy // g.sh) * wrow + t + dx // g.sw  # flat: a tap may wrap a dropped column
        v = xq[b, ch, (dy % g.sh) // g.gh, (dx % g.sw) // g.gw, q // wrow, q % wrow]
        return combine(tap(v, ch, rh, rw), axis=[rh, rw])
    acc = te.compute((n, c, rows, width), at, name=name)
    if (rows, width) == (g.oh, g.ow) and (width % g.lanes == 0 or width != wrow):
        return acc  # row-tiled over exactly the output: nothing to crop
    # otherwise always a crop, even of the whole: a flat schedule flattens the window's own
    # buffer, which must never be the kernel's output
    return te.compute((n, c, g.oh, g.ow), lambda b, ch, i, j: acc[b, ch, i, j],
                      name=name + "_rows")


def row_tiled_width(g: FlatPlane) -> int:
    """Columns per computed row of a depthwise window tiled across rows: ``Wrow`` rounded up
    to whole vectors, or ``Wrow`` itself (flat tiles) where that wastes more than
    ``ROW_TILE_WASTE_MAX`` or would read past the phase planes (the columns past ``Wrow``
    read the next row, so ``Wrow`` must be at least that overhang plus the taps' reach).

    Why: flat register tiles are consecutive vectors, so each of ``kh x kw`` taps is its
    own unaligned load per output vector (the asm of 5 x 5 over 256 x 50 x 38: 25 loads
    feeding 25 FMAs, load bound at 2.4x the roof). Tiles of one vector in ``K`` consecutive
    rows share their loads: the row ``r + rh`` is the same vector for every ``(r, rh)`` of
    equal sum, so ``(K + kh - 1) x kw`` loads feed ``K x kh x kw`` FMAs. That needs rows
    of whole vectors, hence the rounded width."""
    rows, wrow = g.tile
    if half_vector_rows(g):
        return g.ow
    width = -(-g.ow // g.lanes) * g.lanes
    fits = width + g.reach[1] <= 2 * wrow if g.reach[1] else width == wrow
    if fits and width * row_tiled_rows(g) <= ROW_TILE_WASTE_MAX * rows * wrow:
        return width
    return wrow


def half_vector_rows(g: FlatPlane) -> bool:
    """Whether a depthwise window is row-tiled in vectors of half the lanes over rows exactly
    ``ow`` wide, so its register tiles store the output itself: unit-stride windows over
    planes of at least ``HALF_VECTOR_MIN_PLANE_BYTES`` whose rows half vectors divide but
    whole ones do not (152 wide at 16 lanes), and whose rows a register tile divides.

    Why: rounded up to whole vectors (160), the rows are computed into a plane of their
    own and cropped into the output, a pass that cost more than the taps lose in half
    vectors: 3 x 3 over 64 x 200 x 152 ran 1006 -> 729 us at 1 thread and 422 -> 328 us
    at 2 (A/B in one process). Strided (3 x 3 s2 over 32 x 400 x 304, rows of 152), half
    vectors ran 4% slower at 1 thread, so strided windows keep the crop."""
    half = g.lanes // 2
    return (g.sh == g.sw == 1 and half >= HALF_VECTOR_MIN_LANES and g.ow % g.lanes != 0
            and g.ow % half == 0 and g.oh * g.ow * 4 >= HALF_VECTOR_MIN_PLANE_BYTES
            and _row_tile(g.oh) > 1)


def row_tiled_rows(g: FlatPlane) -> int:
    """Rows a row-tiled window computes: ``oh`` rounded up to whole tiles of
    ``ROW_TILE_PREFS`` rows (the fewest, in that order), at most the phase planes' ``R``."""
    rows = g.tile[0]
    return min((-(-g.oh // k) * k for k in ROW_TILE_PREFS if -(-g.oh // k) * k <= rows),
               default=rows)


def _phase_planes(sch, anchor):
    """The ``pad_*`` block making ``anchor``'s phase planes, or None."""
    return next((pr for pr in sch.get_producers(anchor)
                 if sch.get(pr).name_hint.startswith("pad_")
                 and not sch.get(pr).name_hint.startswith("pad_strips_")
                 and len(sch.get(pr).writes[0].source.shape) == 6), None)


def is_flat(sch, anchor) -> bool:
    """Whether ``anchor`` was lowered by :func:`flat_window` (it reads phase planes)."""
    return _phase_planes(sch, anchor) is not None


def schedule_flat(sch, anchor, info, extent, parallel_min_work: int) -> bool:
    """Per plane (the parallel loop over ``n x c``): the padded phase planes, then register
    tiles of ``rt`` vectors of ``vw`` flat outputs (the taps outside the tile, so every tap
    feeds ``rt`` independent accumulators), then the output rows with the epilogue. A
    depthwise window whose rows are whole vectors (:func:`row_tiled_width`) is tiled across
    ``rt`` rows instead, one vector per row, so the rows' taps share loads. Knobs: ``vw``,
    ``rt``, ``parallel``."""
    rows, width, work = _sizes(sch, anchor, extent)
    name = sch.get(anchor).name_hint
    depthwise = name.startswith("anchor_depthwise")
    row_vector = _row_vector(sch, anchor, width, info.lanes)
    row_tiled = row_vector > 0
    vw = info.knobs.get("vw") or row_vector or info.lanes
    rt = info.knobs.get("rt") or (_row_tile(rows) if row_tiled else
                                  _reg_tile(rows * width // info.lanes))
    if (rows * width) % vw or row_tiled and (rows % rt or width % vw):
        return False
    pad = _phase_planes(sch, anchor)
    if not row_tiled:  # one flat output axis: p = r * Wrow + t, tiles run across rows
        sch.transform_block_layout(anchor, lambda vb, vc, vr, vt, vh, vw_: (
            vb, vc, vr * width + vt, vh, vw_))
    b, c, *_ = sch.get_loops(anchor)
    bc = sch.fuse(b, c)
    # rows and padding placed per plane while the accesses are still (row, column) pairs,
    # then both buffers flat, so each tap's index (q // Wrow, q % Wrow) simplifies to q
    consumers = sch.get_consumers(anchor)
    for consumer in consumers:
        sch.reverse_compute_at(consumer, bc)  # their rows: _output_rows, below
    plane = next((pr for pr in sch.get_producers(pad)
                  if sch.get(pr).name_hint.startswith("pad_")), None)
    sch.compute_at(pad, bc)
    bounds = columns = None
    if plane is not None:  # strided: the phases read straight from the input
        columns = _phase_columns(sch, pad, plane)
        sch.compute_inline(plane)
        _deinterleave(sch, pad)
    else:
        bounds = _input_bounds(sch, pad)
        if bounds is None:
            try_decompose_padding(sch, pad, info.lanes)
    _flatten_rows(sch, pad)
    if row_tiled:
        anchor = sch.get_sblock(name)  # the re-layout above renewed the block
        _, r, t, *red = sch.get_loops(anchor)
        outer = sch.split(r, [None, rt])
        to, ti = sch.split(t, [None, vw])
        sch.reorder(outer[0], to, *red, outer[1], ti)
        tile, inner, lane = to, outer[1], ti
    else:
        _flatten_rows(sch, anchor)
        _, p, *red = sch.get_loops(anchor)
        po, lane = sch.split(p, [None, vw])
        tile, inner = sch.split(po, [None, rt])
        sch.reorder(tile, *red, inner, lane)
    wb = sch.cache_write(anchor, 0, "local" if depthwise else POOL_ACCUMULATOR_SCOPE)
    sch.reverse_compute_at(wb, tile)
    if info.knobs.get("parallel", work >= parallel_min_work) and extent(sch, bc) > 1:
        sch.parallel(bc)
    sch.unroll(inner)
    sch.vectorize(lane)
    if row_tiled:  # every tap unrolled, so LLVM sees the loads the rows share
        for red_loop in red:
            sch.unroll(red_loop)
    init = sch.decompose_reduction(anchor, red[0])
    sch.vectorize(sch.get_loops(init)[-1])
    for consumer in consumers:
        # an epilogue's depthwise rows take pairs; a plain crop, and pools, pieces of 4
        epilogue = not sch.get(consumer).name_hint.endswith("_rows")
        _output_rows(sch, consumer, extent, info.lanes, 2 if depthwise and epilogue else 4)
    if row_tiled:
        sch.unroll(sch.get_loops(wb)[-2])
        sch.vectorize(sch.get_loops(wb)[-1])
    else:
        wo, wi = sch.split(sch.get_loops(wb)[-1], [None, vw])
        sch.unroll(wo)
        sch.vectorize(wi)
    if bounds is not None:
        _partition_padding(sch, sch.get(pad).name_hint, bounds)
    elif columns is not None:  # the phase columns all inside the input, apart
        _partition_padding(sch, sch.get(pad).name_hint, [columns], (-2,))
    return True


def _phase_columns(sch, phases, plane):
    """``(lo, n)``: the phase columns ``t`` whose every phase ``e`` reads an input column
    (not padding) of the padded ``plane`` the ``phases`` block de-interleaves (at column
    ``sw * t + gw * e``), or None where ``plane`` pads nothing."""
    bounds = _input_bounds(sch, plane, len(sch.get_loops(plane)))
    if bounds is None:
        return None
    (pl, w), block = bounds[1], sch.get(phases)
    sw, gw, base = (int(v) for v in detect_linear_equation(
        block.body.value.indices[-1], [iv.var for iv in block.iter_vars[-1:-4:-2]]))
    last = (int(block.writes[0].source.shape[3]) - 1) * gw  # the last phase's offset
    lo = max(0, -(-(pl - base) // sw))
    return lo, (pl + w - 1 - base - last) // sw + 1 - lo


def _input_bounds(sch, pad, nloops: int = 3):
    """``((pt, h), (pl, w))`` of a padded plane (``pad`` reads input row ``r - pt`` and
    column ``t - pl`` of an ``h x w`` plane), or None where it is no ``if_then_else`` of an
    input element (no padding) or it has not ``nloops`` loops (TVM drops a unit row loop:
    a 1-D window has only the task loop and the columns)."""
    if len(sch.get_loops(pad)) != nloops:
        return None
    block = sch.get(pad)
    value = block.body.value  # if_then_else(inside, x[b, c, r - pt, t - pl], pad value)
    if not str(getattr(getattr(value, "op", None), "name", "")).endswith("if_then_else"):
        return None
    load = value.args[1]
    analyzer = Analyzer()
    bounds = []
    for k in (-2, -1):
        offset = analyzer.simplify(block.iter_vars[k].var - load.indices[k])
        if not isinstance(offset, tirx.IntImm):
            return None
        bounds.append((int(offset), int(load.source.shape[k])))
    return tuple(bounds)


def _partition_padding(sch, name: str, bounds, depths=(-2, -1)) -> None:
    """The padded plane's loops at ``depths`` (rows, then the interior rows' columns) split
    into the border (before and after the input, ``bounds``) and the interior, so the
    interior is a plain copy and only the border is written with the pad value. Strided
    planes made ``sh`` rows at a time split their columns only (rows 2a, 2a + 1 are two
    loops; LLVM hoists their row check): 3 x 3 s2 over 32 x 400 x 304 1.20x, 64 x 200 x 152
    1.18x, 5 x 5 s2 over 24 x 75 x 75 1.11x, 3 x 3 s2 over 144 x 56 x 56 (whole planes)
    1.08x, over 32 x 112 x 112 0.99x (1 thread). Made as a pad-value plane and then
    the copy (``try_decompose_padding``), the fill cost 3 x 3 over 64 x 200 x 152 1.08x
    at 1 thread and 1.17x at 2 (799 -> 715 us, 311 -> 267 us), over 16 x 400 x 304
    1.18x, 32 x 112 x 112 1.15x, and a 3 x 3 s1 max pool over 16 x 28 x 28 1.14x (A/B
    in one process, load 1.6); no plane measured ran slower (832 x 7 x 7 max: 1.00x)."""
    block = sch.get_sblock(name)
    for depth, (lo, n) in zip(depths, bounds):
        loop = sch.get_loops(block)[depth]
        extent = int(sch.get(loop).extent)
        cuts = sorted({c for c in (lo, lo + n) if 0 < c < extent})
        if not cuts:
            continue
        parts = sch.loop_partition(loop, [b - a for a, b in zip([0] + cuts, cuts)] + [None])
        inner = parts[1 if 0 < lo else 0]
        block = sch.get_child_blocks(inner)[0]  # the interior rows, for their columns


def _row_vector(sch, anchor, width: int, lanes: int) -> int:
    """Lanes per vector of a row-tiled depthwise window of rows ``width`` wide: whole
    vectors, half ones for rows exactly the output's (narrower than the phase planes'
    rows: :func:`half_vector_rows`), or 0 for a flat window."""
    if not sch.get(anchor).name_hint.startswith("anchor_depthwise"):
        return 0
    if width % lanes == 0:
        return lanes
    pitch = int(sch.get(_phase_planes(sch, anchor)).writes[0].source.shape[-1])
    return lanes // 2 if width != pitch and width % (lanes // 2) == 0 else 0


def _row_tile(rows: int) -> int:
    return next((k for k in ROW_TILE_PREFS if rows % k == 0), 1)


def _output_rows(sch, block, extent, lanes: int, narrowest: int = 4) -> None:
    """The output rows (the epilogue fused in). Short rows (7, 14 wide) are unrolled into
    straight-line code: as a loop, LLVM vectorised across the rows with gathers and
    scatters (3x slower). Rows of at most half a vector, and wide rows in pieces of the
    widest divisor of the row (at least ``narrowest``), are TVM vectors when the epilogue
    has no ``isnan`` (TVM's vectoriser scalarises ReLU6's NaN-keeping clamp, which LLVM's
    loop vectoriser handles better; a SiLU epilogue ran 10-25% faster in TVM's vectors).
    Depthwise rows with an epilogue take pieces of 2: a bias-only epilogue over 38-wide
    rows (5 x 5 over 256 x 50 x 38), left to LLVM's loop, made the whole kernel 1.6x
    slower (867 -> 557 us at 1 thread, interleaved, load 2.1); the plain crop (no epilogue)
    ran 6-13% slower in pairs than in LLVM's loop, so it keeps the loop."""
    i, j = sch.get_loops(block)[-2:]
    ow = extent(sch, j)
    vectorisable = "isnan" not in str(sch.get(block).body)
    if ow <= lanes:
        if vectorisable and 4 <= ow <= lanes // 2:
            sch.vectorize(j)
        if extent(sch, i) <= SHORT_ROWS_UNROLLED:
            sch.unroll(i)
        return
    vec = max(v for v in range(1, lanes + 1) if ow % v == 0)
    if vec >= narrowest and vectorisable:
        sch.vectorize(sch.split(j, [None, vec])[1])


def _deinterleave(sch, phases) -> None:
    """The phase copy with the column phase innermost and unrolled, so LLVM sees the loads
    of one input row at ``sw * t + e`` together (one interleaved group: wide loads and
    shuffles, not gathers)."""
    a, e, r, t = sch.get_loops(phases)[-4:]
    sch.reorder(r, a, t, e)
    sch.unroll(e)


def _sizes(sch, anchor, extent) -> tuple[int, int, int]:
    """``(R, Wrow, multiply-adds)`` of a flat window kernel."""
    _, _, r, t = sch.get_loops(anchor)[:4]
    return extent(sch, r), extent(sch, t), window_work(sch, anchor, extent)


def window_work(sch, anchor, extent) -> int:
    """Multiply-adds (or compares) of a window kernel: the product of its loops."""
    work = 1
    for lp in sch.get_loops(anchor):
        work *= extent(sch, lp)
    return work


def flat_space(sch, anchor, info, extent, parallel_min_work: int) -> dict:
    """``nnvm tune``'s knobs of :func:`schedule_flat`, the heuristic's choice first: vector
    width, vectors per register tile (divisors of the flat length in whole vectors, valid at
    either width; rows per tile, dividing the rows, for a row-tiled depthwise window) and
    whether to run the planes in parallel."""
    rows, wrow, work = _sizes(sch, anchor, extent)
    row_vector = _row_vector(sch, anchor, wrow, info.lanes)
    if row_vector:
        first = _row_tile(rows)  # row-tiled: rows per tile, dividing the rows
        tiles = [r for r in ROW_TILE_PREFS if rows % r == 0 and r != first]
    else:
        vecs = rows * wrow // info.lanes
        first = _reg_tile(vecs)
        tiles = [r for r in REG_TILE_PREFS if vecs % r == 0 and r != first]
    widths = [row_vector] if row_vector and row_vector < info.lanes else [
        info.lanes, info.lanes // 2]
    return {"vw": widths,
            "rt": [first] + tiles,
            "parallel": [work >= parallel_min_work, work < parallel_min_work]}


def _reg_tile(vecs: int) -> int:
    return next((r for r in REG_TILE_PREFS if vecs % r == 0), 1)


def _flatten_rows(sch, block) -> None:
    """The buffer ``block`` writes with its last two axes (rows, Wrow) made one, so the flat index
    ``(q // Wrow, q % Wrow)`` of every tap simplifies to ``q``: a contiguous vector."""
    ndim = len(sch.get(block).writes[0].source.shape)
    wrow = int(sch.get(block).writes[0].source.shape[-1])

    def flat(*ax):
        return (*ax[:ndim - 2], ax[ndim - 2] * wrow + ax[ndim - 1])
    sch.transform_layout(block, ("write", 0), flat)


def try_decompose_padding(sch, pad, lanes: int | None = None, under=None) -> None:
    """The padding split from the copy, so neither carries a per-element bound check; with
    ``lanes``, the fill of the pad value made one flat loop (in vectors of ``lanes`` where
    they divide it, else LLVM's): left as rows, LLVM vectorised it down the columns as one
    16-lane scatter per column, which took half of a 3 x 3 max pool over 512 x 14 x 14
    (93 -> 44 us) and two thirds over 832 x 7 x 7 (69 -> 22 us). Vectors of a divisor
    narrower than ``lanes`` (9 for a 57 x 57 plane) ran slower than LLVM's loop. ``under``
    is the loop ``pad`` was placed under (default: its first, the task loop)."""
    loops = sch.get_loops(pad)
    depth = 0 if under is None else next(
        k for k, lp in enumerate(loops) if sch.get(lp).same_as(sch.get(under)))
    try:
        sch.decompose_padding(pad, loops[depth + 1])
    except Exception:  # noqa: BLE001 - no padding pattern: the plain copy stays
        return
    if lanes is not None:
        try:
            _flat_fill(sch, sch.get_sblock(sch.get(pad).name_hint + "_pad_const"),
                       sch.get(sch.get_loops(pad)[depth]), lanes)
        except Exception:  # noqa: BLE001 - nothing to fill, or TVM refuses: rows stay
            pass


def _flat_fill(sch, fill, task, lanes: int) -> None:
    """The loops of ``fill`` under the ``task`` loop fused into one, vectorised by
    ``lanes`` where they divide it."""
    loops = sch.get_loops(fill)
    inner = loops[next(k for k, lp in enumerate(loops) if sch.get(lp).same_as(task)) + 1:]
    flat = sch.fuse(*inner) if len(inner) > 1 else inner[0]
    if int(sch.get(flat).extent) % lanes == 0:
        sch.vectorize(sch.split(flat, [None, lanes])[1])
