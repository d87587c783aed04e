"""Strided depthwise convolution over large planes, in *strips* of output rows: per (n, c)
plane and per strip of ``K`` output rows, the strip's input rows are split into their
column phases straight from the input into a buffer that stays in L1 (the rows are not
split by row phase: the taps read rows ``sh`` apart at no cost), the taps run over it in
register tiles of one vector in each of ``rt`` rows (every tap unrolled), and the strip's
rows are cropped into the output with the epilogue.

Why: ``flat_window`` splits the whole plane into its phases before any tap runs. For a
3 x 3 s2 window over 32 x 400 x 304 (rows of 152; the corpus OCR/detection models) a plane
is 486 KB of input, read from DRAM in one burst, then the taps and the crop run on the
498 KB of phases with DRAM idle: 1.8x its memory roof at 1 thread (1.54 ms) while the same
window over 64 x 200 x 152 (planes of 121 KB, the input mostly in L3 between runs) ran at
1.06x. In strips the input streams in while the taps run: each strip reads its few input
rows (the hardware prefetcher runs ahead of them) and computes on them at once, so the
DRAM stream and the arithmetic overlap.

Measured (AMD EPYC Zen 4, 2-core VM, A/B interleaved in one process, the kernel cache
cleared between builds, loaded box): the smaller the strip the faster, as the stream then
pauses least: over 32 x 400 x 304 at 1 thread, medians whole-plane 1.56 ms, strips of
K = 2 rows 1.09, K = 3 1.28, K = 4 1.48, K = 6 1.78 (load 3.4); K = 1 (no row tile, each
input row copied twice) 1.35 against K = 2's 1.20 (load 3.6). Best of 11 blocks, load
5.5: 1 thread 1.55 -> 1.25 ms (medians 1.65 -> 1.29), 2 threads 1.14 -> 0.90 ms (1.32 ->
0.99). Planes under ``STRIP_MIN_PLANE_BYTES`` keep the whole-plane kernel: strips of 2 ran
64 x 200 x 152 alike (0.36 ms both), 144 x 56 x 56 1.39x and 5 x 5 s2 over 24 x 75 x 75
1.41x slower (more copy per output row: the strip's rows of reach are copied again).
Those strips split the rows by row phase too (``sh x sw`` phases of ``K + 1`` rows, one
of them read by no tap); copying the strip's ``(K - 1) * sh + kh`` rows unsplit made the
kernel 1.10x faster with the input in cache (8 x 400 x 304: 0.167 -> 0.150 ms, 16 x 400 x
304: 0.339 -> 0.310) and alike from DRAM. Final A/B against the whole-plane kernel (best /
median of 11 blocks, load 4-5): 32 x 400 x 304 1 thread 1.26 / 1.43 -> 0.78 / 1.10 ms,
2 threads 0.96 / 1.37 -> 0.60 / 0.96 ms; 16 x 400 x 304 1 thread 0.36 / 0.39 -> 0.31 /
0.31 ms. With the rows unsplit the strip size still wants 2 rows from DRAM (32 x 400 x
304, medians, load 1.9: K = 2 0.78 ms, 3 1.08, 4 1.44, 4 in one register tile of 4 rows
1.42), though in cache (16 x 400 x 304) the tile of 4 ran 0.29 against 0.31 ms.

Tried and dropped: a software prefetch (``llvm.prefetch`` of each cache line of the input
rows 1 to 4 strips ahead, at the top of each strip) made 32 x 400 x 304 1.3-1.9x slower;
the copy as one column loop per column phase (so each loop's padding split is exact) ran
1.03x slower in cache and 1.17x from DRAM. perf (1 thread, cpu-clock) puts two thirds of
the kernel in the copy, a quarter in the taps and 3% in the crop, so removing the crop
is not worth a kernel of its own.

Unit-stride depthwise windows (stride 1 both ways) over input planes of at least
``UNIT_STRIP_MIN_PLANE_BYTES`` take the same strips (one column phase, so the copy is the
strip's rows padded at their ends only; its interior columns carry no check): strips of 8
output rows (4 where 8 would copy more than ``UNIT_STRIP_BYTES``, rows of 304), register
tiles of 4 rows. Rows of half vectors (152 wide at 16 lanes) are computed exactly ``ow``
wide in 8-lane vectors, the strip height a divisor of ``oh`` (``UNIT_STRIP_ROWS_EXACT``),
and the epilogue inlined into the tiles' store, so the tiles store the output itself
(:func:`strips_exact`). Why: the whole-plane kernel (``flat_window``) padded a plane of
121 KB (64 x 200 x 152) before any tap ran, DRAM idle during the taps; in strips the copy
is 10 rows (6 KB, in L1) per 8 new. Measured (AMD EPYC Zen 4 VM, 1 thread ``taskset -c
0``, A/B interleaved in one process, kernel cache cleared between builds, min / median of
7-9 blocks, load 1.2-3.0, no bias unless said): 3 x 3 over 64 x 200 x 152 713 / 743 ->
538 / 573 us and 754 / 1092 -> 599 / 671 us (with bias 842 / 1027 -> 570 / 585), over
16 x 400 x 304 575 / 633 -> 531 / 554 us, 64 x 112 x 112 203 -> 180 us, 32 x 150 x 150
(bias) 273 -> 254 us, 5 x 5 over 32 x 128 x 128 (bias) 347 -> 294 us; 2 threads 64 x 200
x 152 580 / 622 -> 313 / 534 us, 16 x 400 x 304 597 / 659 -> 525 / 571 us. Strip heights
over 64 x 200 x 152 (1 thread, min): 2 rows 1773, 4 rows (tile 4) 1499, 6 rows (tile 3)
1951, 8 rows 1723 us against whole-plane 1940 (a timing through ``lib.run``, copies
included: void in absolute terms, the order held); later K = 8 and 4 within 5% of each
other, except over 16 x 400 x 304 (rows of 1.2 KB) where 4 ran 702 / 851 against 8's
839 / 950 (hence ``UNIT_STRIP_BYTES``). Rows of 152 rounded up to 160 and cropped ran
1.1-1.3x slower than the exact half-vector strips, but only with the epilogue inlined
(left as its own pass over the strip, exact was slower). Smaller planes keep their
kernels: 5 x 5 over 256 x 50 x 38 (7.6 KB planes) 414 -> 491 us and 3 x 3 over 96 x 28
x 28 27 -> 34 us in strips; 128 x 100 x 76 (30 KB) alike (686 -> 680 us); 144 x 56 x 56
(12 KB) ran 164 -> 112 us in strips, but planes under 32 KB are left out until more of
them are measured (the two smaller ones above ran slower).
Unit-stride pools keep the whole plane (``flat_window.flat_planes``' ``depthwise``).

Shapes are static; the geometry is ``flat_window.FlatPlane``. ``flat_window.flat_planes``
and ``flat_window.flat_window`` build this kernel's compute for the planes
:func:`wants_strips` picks; ``window_schedule.schedule_window`` hands an anchor reading strip
phases (:func:`is_strips`) to :func:`schedule_strips`.
"""

from __future__ import annotations

from tvm import te
from tvm.sym import detect_linear_equation

#: smallest input plane (bytes) a strided depthwise window is computed in strips for
STRIP_MIN_PLANE_BYTES = 256 * 1024
#: smallest input plane (bytes) computed in strips when a strip copies few rows twice
#: (at most ``STRIP_COPY_MAX`` input rows copied per new one)
STRIP_MIN_PLANE_BYTES_CHEAP = 48 * 1024
STRIP_COPY_MAX = 1.25
#: output rows per strip (see the module docstring for the measurements)
STRIP_ROWS = 2
#: rows per register tile, in order of preference (the first dividing ``STRIP_ROWS``)
STRIP_TILE_PREFS = (2, 1)
#: whether unit-stride depthwise windows over planes of ``UNIT_STRIP_MIN_PLANE_BYTES`` take
#: strips (off: the whole-plane ``flat_window`` kernel, for A/Bs and its tests)
UNIT_STRIDE_STRIPS = True
UNIT_STRIP_MIN_PLANE_BYTES = 32 * 1024
#: output rows per strip of a unit-stride window, in order of preference: the first whose
#: copied input rows fit in ``UNIT_STRIP_BYTES`` (else 2)
UNIT_STRIP_ROWS_PREFS = (8, 4)
UNIT_STRIP_BYTES = 8 * 1024
#: strip rows of half-vector rows, in order of preference (the first dividing ``oh``)
UNIT_STRIP_ROWS_EXACT = (8, 10, 6, 5, 9, 7, 4)
UNIT_STRIP_TILE_PREFS = (4, 5, 3, 7, 2, 1)
#: whether unit-stride strips of half-vector rows store the output directly
UNIT_STRIP_EXACT = True


def wants_strips(g, unit_stride: bool = True) -> bool:
    """Whether a depthwise window over ``g`` is computed in strips: unit stride both ways
    over a plane of at least ``UNIT_STRIP_MIN_PLANE_BYTES`` (``unit_stride``: the caller is
    a depthwise conv, not a pool; see the module docstring); or strided along the rows
    with taps on more than one column phase (the schedule reorders the copy's three loops
    ``e, r, t``: a phase axis of one would have no loop), over an input plane of at least
    ``STRIP_MIN_PLANE_BYTES``, or of ``STRIP_MIN_PLANE_BYTES_CHEAP`` where a strip copies
    at most ``STRIP_COPY_MAX`` input rows per new row (3 x 3 s2: 5 rows for 4).

    Why the two sizes (1 thread, A/B interleaved, strips of 2 rows against the whole-plane
    kernel): 3 x 3 s2 over 64 x 200 x 152 (121 KB planes) 0.367 -> 0.296 ms, 48 x 150 x 150
    (90 KB) 0.199 -> 0.178, 32 x 112 x 112 (50 KB) 0.077 -> 0.074; but 24 x 75 x 75 (22 KB)
    0.030 -> 0.038 and 144 x 56 x 56 (12 KB) 0.080 -> 0.086 slower, and 5 x 5 s2 (7 rows
    copied for 4) over 32 x 150 x 150 0.238 -> 0.261 and 24 x 75 x 75 0.039 -> 0.056
    slower (medians, load 2-3)."""
    plane = g.h * g.w * 4
    if g.sh == g.sw == 1:
        return unit_stride and UNIT_STRIDE_STRIPS and plane >= UNIT_STRIP_MIN_PLANE_BYTES
    if g.phases_w <= 1:
        return False
    plane = g.h * g.w * 4
    cheap = strip_input_rows(g) <= STRIP_COPY_MAX * strip_rows(g) * g.sh
    return plane >= STRIP_MIN_PLANE_BYTES or cheap and plane >= STRIP_MIN_PLANE_BYTES_CHEAP


def strip_rows(g) -> int:
    """Output rows per strip: ``STRIP_ROWS`` (``UNIT_STRIP_ROWS_PREFS`` at unit stride, or for
    rows of half vectors the first of ``UNIT_STRIP_ROWS_EXACT`` dividing ``oh``, so the
    strips can store the output itself), at most ``oh`` (where it does not divide ``oh``,
    the last strip's rows past the output are computed over padding, not stored)."""
    k = STRIP_ROWS
    if g.sh == g.sw == 1:
        row = (-(-g.ow // g.lanes) * g.lanes + g.reach[1]) * 4  # bytes of a copied row
        k = next((r for r in UNIT_STRIP_ROWS_PREFS
                  if (r + (g.kh - 1) * g.dh) * row <= UNIT_STRIP_BYTES), 2)
        if _half_vector_rows(g):
            k = next((r for r in UNIT_STRIP_ROWS_EXACT if g.oh % r == 0), k)
    return max(1, min(k, g.oh))


def _half_vector_rows(g) -> bool:
    """Rows half vectors divide and whole ones do not (152 at 16 lanes), at least 8 lanes."""
    half = g.lanes // 2
    return UNIT_STRIP_EXACT and half >= 8 and g.ow % g.lanes != 0 and g.ow % half == 0


def strip_width(g) -> int:
    """Columns computed per output row: ``ow`` rounded up to whole vectors, or ``ow``
    itself where the strips store the output directly (:func:`strips_exact`)."""
    return g.ow if strips_exact(g) else -(-g.ow // g.lanes) * g.lanes


def strips_exact(g) -> bool:
    """Whether the strips compute exactly the output (rows ``ow`` wide in half vectors,
    ``oh`` a whole number of strips), so the register tiles store it with no crop: a
    unit-stride window whose rows half vectors divide but whole ones do not (152 wide at
    16 lanes), as ``flat_window.half_vector_rows``."""
    return g.sh == g.sw == 1 and _half_vector_rows(g) and g.oh % strip_rows(g) == 0


def strip_input_rows(g) -> int:
    """Input rows one strip reads: its ``K`` output rows' windows."""
    return (strip_rows(g) - 1) * g.sh + (g.kh - 1) * g.dh + 1


def strip_planes(x, g, pad_value, name: str, padded_at):
    """``pad_strips_<name>``: ``(n, c, S, phases_w, rows, width + reach_w)``: strip ``s``'s
    column phase ``e`` holds the padded rows ``s * K * sh + r`` (the strip's input rows,
    not split by row phase: a row-tiled window reads rows at any stride) at columns
    ``t * sw + e * gw``; ``padded_at`` gives a padded element."""
    n, c = x.shape[0], x.shape[1]
    k = strip_rows(g)
    strips = -(-g.oh // k)
    shape = (n, c, strips, g.phases_w, strip_input_rows(g), strip_width(g) + g.reach[1])
    return te.compute(shape, lambda b, ch, s, e, r, t: padded_at(
        x, g, pad_value, b, ch, s * k * g.sh + r, t * g.sw + e * g.gw),
        name="pad_strips_" + name)


def strip_window(xs, g, combine, tap, name: str):
    """The window over the strip phases: ``(n, c, S * K, width)`` reduced by ``combine``
    over ``tap(value, c, rh, rw)``, then cropped to ``(n, c, oh, ow)``."""
    n, c, k = xs.shape[0], xs.shape[1], strip_rows(g)
    rows = int(xs.shape[2]) * k
    rh, rw = te.reduce_axis((0, g.kh), "rh"), te.reduce_axis((0, g.kw), "rw")

    def at(b, ch, i, j):
        dx = rw * g.dw
        v = xs[b, ch, i // k, (dx % g.sw) // g.gw, i % k * g.sh + rh * g.dh, j + dx // g.sw]
        return combine(tap(v, ch, rh, rw), axis=[rh, rw])
    acc = te.compute((n, c, rows, strip_width(g)), at, name=name)
    if g.sh == g.sw == 1 and (rows, strip_width(g)) == (g.oh, g.ow):
        return acc  # unit stride, the strips' rows are the output's: nothing to crop
    return te.compute((n, c, g.oh, g.ow), lambda b, ch, i, j: acc[b, ch, i, j],
                      name=name + "_rows")


def _strip_phases(sch, anchor):
    return next((pr for pr in sch.get_producers(anchor)
                 if sch.get(pr).name_hint.startswith("pad_strips_")), None)


def is_strips(sch, anchor) -> bool:
    """Whether ``anchor`` was lowered by :func:`strip_window` (it reads strip phases)."""
    return _strip_phases(sch, anchor) is not None


def schedule_strips(sch, anchor, info, extent, parallel_min_work: int) -> bool:
    """Per plane (the parallel loop over ``n x c``) and per strip of ``K`` output rows: the
    strip's phases, register tiles of one vector in each of ``rt`` rows (every tap
    unrolled, so the rows' shared loads are loaded once), then the strip's output rows
    with the epilogue. Knobs: ``rt``, ``parallel``."""
    from .flat_window import _output_rows, _partition_padding, window_work

    pad = _strip_phases(sch, anchor)
    k = _strip_rows_of(sch, anchor)
    b, c, r, t, *red = sch.get_loops(anchor)
    width = extent(sch, t)
    lanes = info.lanes
    if width % lanes and width % (lanes // 2) == 0:  # rows exactly ``ow`` (strips_exact)
        lanes //= 2
    rt = info.knobs.get("rt") or next((p for p in _tile_prefs(sch, pad) if k % p == 0), 1)
    if k % rt or width % lanes:
        return False
    work = window_work(sch, anchor, extent)
    bc = sch.fuse(b, c)
    so, ri = sch.split(r, [None, k])
    consumers = sch.get_consumers(anchor)
    for consumer in consumers:
        sch.reverse_compute_at(consumer, so)
    sch.compute_at(pad, so)
    tile, inner = sch.split(ri, [None, rt])
    to, lane = sch.split(t, [None, lanes])
    sch.reorder(tile, to, *red, inner, lane)
    wb = sch.cache_write(anchor, 0, "local")
    sch.reverse_compute_at(wb, to)
    if info.knobs.get("parallel", work >= parallel_min_work) and extent(sch, bc) > 1:
        sch.parallel(bc)
    sch.unroll(inner)
    sch.vectorize(lane)
    for red_loop in red:
        sch.unroll(red_loop)
    init = sch.decompose_reduction(anchor, red[0])
    sch.vectorize(sch.get_loops(init)[-1])
    if width == extent(sch, sch.get_loops(consumers[0])[-1]) if consumers else False:
        consumers = _epilogue_into_tiles(sch, consumers)
    sch.unroll(sch.get_loops(wb)[-2])
    sch.vectorize(sch.get_loops(wb)[-1])
    for consumer in consumers:
        epilogue = not sch.get(consumer).name_hint.endswith("_rows")
        _output_rows(sch, consumer, extent, info.lanes, 2 if epilogue else 4)
    phases = int(sch.get(pad).writes[0].source.shape[3])
    if phases > 1:  # one column phase (unit stride): TVM drops its unit loop
        _deinterleave_strip(sch, pad)
    columns = _interior_columns(sch, pad)
    if columns is not None:
        _partition_padding(sch, sch.get(pad).name_hint, [columns], (-2 if phases > 1 else -1,))
    return True


def _epilogue_into_tiles(sch, consumers) -> list:
    """The elementwise epilogue of strips that compute exactly the output
    (:func:`strips_exact`) inlined into the register tiles' store, so the tiles store the
    output itself; returns the consumers left (those TVM refused to inline)."""
    left = []
    for consumer in consumers:
        try:
            sch.reverse_compute_inline(consumer)
        except Exception:  # noqa: BLE001 - not elementwise: it keeps its own rows
            left.append(consumer)
    return left


def _interior_columns(sch, pad):
    """``(lo, n)``: the phase columns ``t`` whose every phase ``e`` reads an input column,
    not padding (the strip copy reads input column ``sw * t + gw * e - pl``), or None
    where the copy is no ``if_then_else`` of an input element."""
    block = sch.get(pad)
    value = block.body.value
    if not str(getattr(getattr(value, "op", None), "name", "")).endswith("if_then_else"):
        return None
    load = value.args[1]
    sw, gw, base = (int(v) for v in detect_linear_equation(
        load.indices[-1], [iv.var for iv in block.iter_vars[-1:-4:-2]]))
    width, phases = int(load.source.shape[-1]), int(block.writes[0].source.shape[3])
    lo = max(0, -(-(-base) // sw))
    hi = (width - 1 - base - (phases - 1) * gw) // sw  # the last such t
    return lo, max(0, hi + 1 - lo)


def _tile_prefs(sch, pad) -> tuple[int, ...]:
    """Rows per register tile, in order of preference: ``UNIT_STRIP_TILE_PREFS`` for a
    unit-stride window (one column phase), else ``STRIP_TILE_PREFS``."""
    unit = int(sch.get(pad).writes[0].source.shape[3]) == 1
    return UNIT_STRIP_TILE_PREFS if unit else STRIP_TILE_PREFS


def _strip_rows_of(sch, anchor) -> int:
    """``K``: the anchor computes ``S * K`` rows over the ``S`` strips of its phases."""
    strips = int(sch.get(_strip_phases(sch, anchor)).writes[0].source.shape[2])
    return int(sch.get(anchor).writes[0].source.shape[2]) // strips


def _deinterleave_strip(sch, pad) -> None:
    """The strip's phase copy with the column phase innermost and unrolled, so LLVM sees
    the loads of one input row at ``sw * t + e`` together (an interleaved group)."""
    e, r, t = sch.get_loops(pad)[-3:]
    sch.reorder(r, t, e)
    sch.unroll(e)


def strips_space(sch, anchor, info, extent, parallel_min_work: int) -> dict:
    """``nnvm tune``'s knobs of :func:`schedule_strips`: rows per register tile (dividing
    the strip's rows) and whether to run the planes in parallel."""
    from .flat_window import window_work

    k = _strip_rows_of(sch, anchor)
    tiles = [p for p in _tile_prefs(sch, _strip_phases(sch, anchor)) if k % p == 0] or [1]
    work = window_work(sch, anchor, extent)
    return {"rt": tiles, "parallel": [work >= parallel_min_work, work < parallel_min_work]}
