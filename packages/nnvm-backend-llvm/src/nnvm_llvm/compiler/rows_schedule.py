"""The ``reduce`` and ``softmax`` templates: kernels whose output rows each need a reduction.

Softmax, the normalisations (layer/instance/group/RMS), global pooling and plain reductions:
one task per group of rows, each row's statistics computed under the row loop with vector
partial sums (``rfactor``), so the row is read from cache, not memory, by the epilogue. N-d
max pools (kind ``reduce``: a window max and its argmax indices, two outputs as wide as each
other) run both outputs in one pass (:func:`_schedule_twins`). Kept apart from
``schedules`` (which dispatches here by kind).
"""

from __future__ import annotations

import tvm

from .schedules import (PARALLEL_MIN_WORK, ScheduleInfo, _blocks, _choices, _extent,
                        _is_reduction, _output_buffers, _pick, _try, _writes_output)


def schedule_rows(sch, func, info: ScheduleInfo) -> bool:
    """Reductions and softmax: one task per group of rows, reductions computed per row."""
    outs = _output_buffers(sch.mod['main'])
    out_blocks = [b for b in _blocks(sch) if _writes_output(sch, b, outs)]
    if not out_blocks:
        return False
    out, stats = _main_output(sch, out_blocks)
    if stats is None:
        return False
    if _is_reduction(sch, out):
        # the reduction writes the output itself (a global max/mean over a fused epilogue
        # such as GELU): partial results in vector lanes, or the fused math runs scalar
        rf = _rfactor_widest(sch, out, info.lanes)
        spatial = [lp for lp, iv in zip(sch.get_loops(out), sch.get(out).iter_vars)
                   if int(iv.iter_type) == 0]
        if len(spatial) > 1:
            spatial = [sch.fuse(*spatial)]
        if spatial and _extent(sch, spatial[0]) > 1:
            _try(sch.parallel, spatial[0])
        if rf is not None and spatial:
            _try(sch.compute_at, rf, spatial[0])
            _vectorize_partials(sch, rf)
        return True
    loops = sch.get_loops(out)
    if any(_work(sch, b) == _work(sch, out) for b in stats):
        return _schedule_twins(sch, [out, *stats], info)
    if len(loops) < 2:
        return False
    keep = _kept_axes(sch, out)
    # vector partial reductions first, so compute_at below places them in the row loop too
    rfs = [rf for b in _blocks(sch) if not sch.get(b).same_as(sch.get(out))
           and _is_reduction(sch, b)
           for rf in [_rfactor_widest(sch, _fuse_reduction_tail(sch, b), info.lanes)]
           if rf is not None for rf in [rf, *_halve_partials(sch, b)]]
    loops = sch.get_loops(out)
    whole = keep >= len(loops)
    if whole:
        # every output element is one whole reduction (a global mean to (n, c) without
        # kept dims): the statistics go under the fused output loop, one per element, with
        # their partial sums along the reduced axes. Before, they were computed for all
        # channels at once with scalar strided partials (1280x7x7: 64 us; keepdims: 6 us)
        outer, inner = sch.fuse(*loops), None
    elif 0 < keep < len(loops) - 1:
        # statistics over several trailing axes (instance norm's H x W): one row is all of
        # them, so the statistics are computed once per row, not once per output line
        outer = sch.fuse(*loops[:keep])
        inner = sch.fuse(*loops[keep:])
        vec = _pick(_extent(sch, inner), (info.lanes, info.lanes // 2, 4))
        if vec > 1:
            _try(sch.vectorize, sch.split(inner, [None, vec])[1])
    else:
        outer = sch.fuse(*loops[:-1])
        inner = None
    outer = _merge_stats(sch, outer, stats)
    others = [b for b in _blocks(sch) if not sch.get(b).same_as(sch.get(out))
              and not any(sch.get(b).same_as(sch.get(s)) for s in stats)]
    for p in reversed(others):  # consumers first, so each producer lands under `outer`
        _try(sch.compute_at, p, outer)
    total = _work(sch, out)
    buffers = [b for b in others if _unit(sch, b) and _work(sch, b) == total]  # row buffers
    pair = None
    if buffers and inner is None and not whole and total // _extent(sch, outer) <= info.lanes \
            and _extent(sch, outer) % INTERLEAVED_ROWS == 0:
        outer, pair = sch.split(outer, [None, INTERLEAVED_ROWS])
    if info.knobs.get("parallel", total >= PARALLEL_MIN_WORK // 4) and _extent(sch, outer) > 1:
        _try(sch.parallel, outer)
    for rf in rfs:
        _vectorize_partials(sch, rf)
    if inner is None and not whole:  # last: a partitioned row refuses the steps above
        for b in [out, *buffers]:
            _vectorize_row(sch, sch.get_loops(b)[-1], info.lanes)
    if pair is not None:
        _try(sch.unroll, pair)
    return True


#: short softmax rows (at most a vector) computed this many at a time, unrolled: rows whose
#: vectors do not divide them (a tail) overlap their dependent chains of maxima, exponentials
#: and sums (1 thread, interleaved: Softmax 1x8x40x12 6.04 -> 5.17 us, 3x4x12 0.231 ->
#: 0.203 us; rows of 8 and 16 and log-softmax's rows, which keep no row buffer, were as fast
#: either way)
INTERLEAVED_ROWS = 2


def _vectorize_row(sch, row, lanes: int) -> None:
    """Vectorise an elementwise row loop (the output, a row buffer) in whole vectors; a row
    no vector divides is partitioned into its whole vectors and a tail of under one vector
    (one vector when at least a quarter of one). Why: left to LLVM's vectoriser, a row of 91
    ran its 16 x 4 interleaved body once and 27 elements, ``exp`` included, as a scalar
    remainder (Softmax 1x3234x91: 240 -> 167 us; 1x40x6625: 128 -> 65 us); one vector as
    wide as the row was 1.4x slower than LLVM's loop (Whisper's 1500-wide softmax)."""
    n = _extent(sch, row)
    vec = _pick(n, (lanes, lanes // 2))
    if vec > 1:
        _try(sch.vectorize, sch.split(row, [None, vec])[1] if n > vec else row)
        return
    n0 = n - n % lanes
    parts = _try(sch.loop_partition, row, [n0, None]) if n0 >= lanes else None
    if parts is None:
        return
    _try(sch.vectorize, sch.split(parts[0], [None, lanes])[1])
    if n - n0 >= lanes // 4:  # the tail starts at n0, where split refuses: one vector
        _try(sch.vectorize, parts[1])


def _main_output(sch, out_blocks):
    """``(out, stats)``: the output block the rows are scheduled by (the widest) and the
    others, each a per-row statistic (layer norm's mean and inverse deviation, written
    whether or not the graph reads them); ``(None, None)`` when an extra output is a
    reduction. Why: the template took kernels of one output only, and layer norm's three
    left every statistic a scalar chain in its own pass (LayerNormalization 1x197x128: 1.9x
    onnxruntime). An extra output as wide as the main one (max_pool's argmax indices) goes
    to :func:`_schedule_twins`."""
    ranked = sorted(out_blocks, key=lambda b: _work(sch, b), reverse=True)
    out, stats = ranked[0], ranked[1:]
    if stats and (_is_reduction(sch, out) or any(_is_reduction(sch, b) for b in stats)):
        return None, None
    return out, stats


def _work(sch, block) -> int:
    """Iterations of the loops around ``block``."""
    return _extent_product(sch, sch.get_loops(block))


def _extent_product(sch, loops) -> int:
    total = 1
    for lp in loops:
        total *= max(_extent(sch, lp), 1)
    return total


def _merge_stats(sch, outer, stats):
    """Merge the row loop of each statistics output into ``outer`` (the main output's row
    loop), so every consumer of the row reductions sits under it and ``compute_at`` can put
    the reductions there too: with a consumer outside, TVM refuses and the statistics ran
    in their own pass over the tensor. Returns the (merged) row loop."""
    for b in stats:
        loops = sch.get_loops(b)
        if not loops:
            continue
        loop = sch.fuse(*loops) if len(loops) > 1 else loops[0]
        if _extent(sch, loop) == _extent(sch, outer):
            outer = _try(sch.merge, outer, loop) or outer
    return outer


def _kept_axes(sch, out) -> int:
    """How many leading axes of the output the row statistics vary along: the rank of the
    widest reduction result, trailing kept (size-1) dims dropped. ``(n, c, 1, 1)`` moments
    of an NCHW instance norm give 2, a softmax over the last axis ``len(shape) - 1``."""
    keep = 0
    for b in _blocks(sch):
        if sch.get(b).same_as(sch.get(out)) or not _is_reduction(sch, b) or _unit(sch, b):
            continue
        dims = [int(d) if isinstance(d, tvm.tirx.IntImm) else -1
                for d in sch.get(b).writes[0].source.shape]
        while dims and dims[-1] == 1:
            dims.pop()
        keep = max(keep, len(dims))
    return keep


#: 1-D pools with output rows at most this long run as one loop over every output element;
#: longer rows (and N-d pools) stay rows, which LLVM vectorises
SHORT_POOL_ROW = 8


def _schedule_twins(sch, outs, info: ScheduleInfo) -> bool:
    """Outputs as wide as each other that read one reduction writing a value per output
    element (an N-d max_pool's window max and its argmax indices): their loops merged, the
    window computed under them, one row (or, for short 1-D rows, one element) at a time, so
    the window's results stay in registers; parallel when worth a thread-pool launch.
    Why: unscheduled, the window, the values and the indices ran as three scalar passes
    (1 thread, interleaved: MaxPool 1-D 2x10x4 kernel 4 0.060 -> 0.035 us, 3x5x12 kernel 2
    0.258 -> 0.033 us, 3-D 2x3x5x5x5 kernel 2 0.323 -> 0.250 us). One loop over every
    element lost LLVM's vectorising along long rows (1x64x4001 kernel 4: 40 -> 221 us) and
    paid div/mod per element on a 3-D pool (0.31 us); rows there."""
    reds = [b for b in _blocks(sch) if _is_reduction(sch, b) and not _unit(sch, b)]
    if len(reds) != 1:
        return False
    anchor = reds[0]
    spatial = [lp for lp, iv in zip(sch.get_loops(anchor), sch.get(anchor).iter_vars)
               if int(iv.iter_type) == 0]
    if len(spatial) != len(sch.get(outs[0]).iter_vars) or _extent_product(
            sch, spatial) != _work(sch, outs[0]):
        return False  # not one reduction per output element
    whole = len(spatial) < 2 or len(spatial) <= 3 and \
        _extent(sch, spatial[-1]) <= SHORT_POOL_ROW
    taps = _work(sch, anchor)

    def row_loop(loops):
        loops = loops if whole else loops[:-1]
        return sch.fuse(*loops) if len(loops) > 1 else loops[0]
    outer = sch.merge(*[row_loop(sch.get_loops(b)) for b in outs])
    sch.compute_at(anchor, outer)
    if taps >= PARALLEL_MIN_WORK // 4 and _extent(sch, outer) > 1:
        _try(sch.parallel, outer)
    elif _extent(sch, outer) <= UNROLLED_POOL_ROWS:
        # LLVM unrolled the window and the short row under it, then vectorised this loop:
        # a gather per tap, a scatter per output (1 thread, interleaved: MaxPool 2x10x4
        # kernel 4 0.035 -> 0.027 us, 3-D 2x3x5x5x5 kernel 2 0.25 -> 0.18 us)
        _try(sch.unroll, outer)
    return True


#: max pools with at most this many rows (or, short 1-D rows fused, elements) have their
#: row loop unrolled; 90 elements with their padding tests unrolled were 2x slower
UNROLLED_POOL_ROWS = 32


def _unit(sch, block) -> bool:
    """Whether ``block`` reduces over one element only: a stage a lowering rule keeps from
    the inliner (softmax's row of exponentials), a row buffer rather than a statistic."""
    return all(int(iv.dom.extent) == 1 for iv in sch.get(block).iter_vars
               if int(iv.iter_type) == 2)


def _fuse_reduction_tail(sch, block):
    """Fuse the trailing reduction loops of ``block`` into one (instance norm's H x W), so
    its vector partial sums run along contiguous memory: split over the last axis alone,
    compute_at put the lanes outside the other axes and the partials became strided loads.
    Returns ``block``."""
    loops = sch.get_loops(block)
    n_red = 0
    for iv in reversed(sch.get(block).iter_vars):
        if int(iv.iter_type) != 2:
            break
        n_red += 1
    if 1 < n_red <= len(loops):
        _try(sch.fuse, *loops[-n_red:])
    return block


#: rows shorter than this many vectors keep half a vector of partial results
SHORT_ROW_VECTORS = 4


def _rfactor_widest(sch, block, lanes: int):
    """:func:`_rfactor_lanes` with one vector, half a vector, else the widest count of lanes
    (at least 4) that divides the row: a 152-wide row keeps 8 partial sums and a 3199-wide
    one (7 x 457) 7, instead of a scalar chain of dependent adds (2.5x slower). A short
    row (under ``SHORT_ROW_VECTORS`` vectors) takes half a vector first: the final scalar
    chain over the partials costs as much as the vector pass there (softmax rows of 32:
    2.0 -> 1.5 us, of 40: 12.7 -> 10.4 us; rows of 1500 were 8% slower so). Since the
    partials are halved in vector steps (:func:`_halve_partials`), rows from 4 vectors
    take whole vectors again (LogSoftmax 2x128: 0.17 -> 0.13 us, Softmax rows of 197:
    38.8 -> 36.8 us; up to 16 vectors they took half ones)."""
    loops = sch.get_loops(block)
    short = bool(loops) and _extent(sch, loops[-1]) < SHORT_ROW_VECTORS * lanes
    first = (lanes // 2, lanes) if short else (lanes, lanes // 2)
    for n in (*first, *range(lanes - 1, 3, -1)):
        rf = _try(_rfactor_lanes, sch, block, n)
        if rf is not None:
            return rf
    return None


#: the widest partial-sum vector a row reduction gets (one AVX-512 vector of float32)
MAX_PARTIAL_LANES = 16


def _vectorize_partials(sch, rf) -> None:
    """Vectorise an rfactor block over its lanes axis, then split off its init (vectorise
    before decompose_reduction: after it, TVM refuses)."""
    rf_loops = sch.get_loops(rf)
    if _binds_reduction(sch, rf_loops[-1]):  # compute_at made (lanes, rest)
        _try(sch.reorder, rf_loops[-1], rf_loops[-2])
        rf_loops = sch.get_loops(rf)
    if _extent(sch, rf_loops[-1]) > MAX_PARTIAL_LANES:
        # no row loop above the partials (a global mean to (n, c): 1024 channels innermost):
        # a 1024-lane vector of gathers took LLVM minutes to compile; leave them scalar
        return
    _try(sch.vectorize, rf_loops[-1])
    init = _try(sch.decompose_reduction, rf, rf_loops[-2])
    if init is not None:
        _try(sch.vectorize, sch.get_loops(init)[-1])


def _binds_reduction(sch, loop) -> bool:
    """Whether ``loop`` (directly around one block) drives a reduction axis of it."""
    realize = sch.get(loop).body
    if not hasattr(realize, "iter_values"):
        return False
    var = sch.get(loop).loop_var
    return any(int(iv.iter_type) == 2 and any(
        v.same_as(var) for v in tvm.tirx.analysis.undefined_vars(value))
        for iv, value in zip(realize.block.iter_vars, realize.iter_values))


def _halve_partials(sch, block) -> list:
    """Reduce the partial results of a row (``block``: the reduction over them, before
    ``compute_at``) in halves, 8 -> 4 -> 2 -> 1, each step one vector operation, not a chain
    of 8 dependent scalar steps. Returns the new partial blocks, outermost first, for
    :func:`_vectorize_partials`. Why: a short row is latency-bound on the chains of its
    max and its sum (Softmax 1x8x40x40: 9.1 -> 8.4 us, 1x2x49x49: 3.3 -> 3.1 us)."""
    found = []
    loops = sch.get_loops(block)
    lanes = _extent(sch, loops[-1]) if loops else 0
    while lanes >= 4 and lanes % 2 == 0:
        lanes //= 2
        ndim = len(sch.get(block).writes[0].region)
        try:
            found.append(sch.rfactor(sch.split(sch.get_loops(block)[-1], [None, lanes])[1],
                                     ndim))
        except Exception:  # noqa: BLE001 - ScheduleError: the partials stay a chain
            break
    return found


def _rfactor_lanes(sch, block, lanes: int):
    """Split a row reduction over a contiguous axis into ``lanes`` partial results (one
    vector, the factor axis innermost) reduced in parallel, then one horizontal step;
    without it the reduction is a scalar chain of dependent adds (or max), and an ``exp``
    inside it a scalar call per element (softmax's denominator). Returns the rfactor
    block, or None when the reduction does not fit."""
    loops = sch.get_loops(block)
    iters = sch.get(block).iter_vars
    if not loops or int(iters[-1].iter_type) != 2:
        return None
    last = loops[-1]
    if _extent(sch, last) % lanes or _extent(sch, last) < 2 * lanes:
        return None
    ndim = len(sch.get(block).writes[0].region)
    _, ri = sch.split(last, [None, lanes])
    return sch.rfactor(ri, factor_axis=ndim)


def rows_space(sch, info: ScheduleInfo) -> dict:
    outs = _output_buffers(sch.mod["main"])
    out = [b for b in _blocks(sch) if _writes_output(sch, b, outs)]
    if len(out) != 1 or _is_reduction(sch, out[0]):
        return {}  # the global-reduction path parallelises unconditionally: nothing to tune
    total = _work(sch, out[0])
    return {"parallel": _choices(total >= PARALLEL_MIN_WORK // 4, True, False)}
