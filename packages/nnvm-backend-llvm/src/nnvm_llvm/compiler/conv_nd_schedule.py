"""The ``conv_nd`` template: ``schedule_conv2d``'s register tile for ``conv_nd.blocked_conv``
with any number of spatial axes.

The tile is one vector of output channels times ``reg_n`` output columns (the last spatial
axis), accumulated in registers over the whole reduction (an input-channel cache block,
then every kernel tap); the other spatial axes, the batch and the channel blocks are one
fused parallel loop. Each weight vector loaded is used ``reg_n`` times and each input
element broadcast once per tile, as in TVM's ``conv2d_NCHWc`` and its 3-D variant.

A conv whose vector holds channels times output columns (``conv_nd.column_block``) has
the column within the vector as its anchor's last axis: fused under the channel lanes
into one vector, ``reg_n`` counting columns. A one-thread tile short of accumulators takes
the batch too (``_batch_tile``).
"""

from __future__ import annotations

import dataclasses
import re

import tvm

from . import schedules as S


def _anchor_loops(sch):
    anchor = S._find(sch, "anchor_convnd")
    if anchor is None:
        return None, None
    loops = sch.get_loops(anchor)
    nred = sum(1 for iv in sch.get(anchor).iter_vars if int(iv.iter_type) == 2)
    return anchor, (loops[:len(loops) - nred], loops[len(loops) - nred:])


def _conv_nd_tile(sch, spatial, reduce, info):
    """``(bn, cols, reg_n, rc_bn)`` of the kernel: the conv2d heuristic on its last spatial
    axis; ``spatial`` without the anchor's column axis (``_columns``), ``reg_n`` counted
    in output columns, a multiple of the ``cols`` columns each vector holds."""
    cols, named = _columns(sch, S._find(sch, "anchor_convnd"))
    oc, ic = S._extent(sch, spatial[1]), S._extent(sch, reduce[0])
    groups = S._extent(sch, spatial[-1])
    bn = named or _wpack_block(sch)
    _, reg_n, rc_bn = S._conv_tile(oc, groups * cols, ic,
                                   dataclasses.replace(info, conv_block=bn))
    vectors = max(d for d in range(1, groups + 1) if groups % d == 0 and d * cols <= reg_n) \
        if reg_n >= cols else 1
    return bn, cols, vectors * cols, rc_bn


def _wpack_block(sch) -> int | None:
    """The channel block ``blocked_conv`` packed the weight with: the last axis of its
    ``wpack_`` stage, or of the weight packed at load (the anchor's one read with an axis
    more than its output); None when the anchor is not ``blocked_conv``'s."""
    wpack = S._find(sch, "wpack_")
    if wpack is not None:
        return S._extent(sch, sch.get_loops(wpack)[-1])
    anchor = S._find(sch, "anchor_convnd")
    rank = len(sch.get(anchor).writes[0].source.shape) + 1 - (_columns(sch, anchor)[0] > 1)
    packed = [r.source for r in sch.get(anchor).reads if len(r.source.shape) == rank]
    return int(packed[0].shape[-1]) if len(packed) == 1 else None


def _columns(sch, anchor) -> tuple[int, int | None]:
    """``(columns, channels)`` per vector of ``blocked_conv``'s anchor where it names them
    (``anchor_convnd_{e}x{bn}``: a weight block of copies, ``column_block``), else
    ``(1, None)`` (the channel block is the weight's)."""
    found = re.fullmatch(r"anchor_convnd_(\d+)x(\d+)", sch.get(anchor).name_hint)
    return (int(found[1]), int(found[2])) if found else (1, None)


def _column_axis(sch, anchor, spatial) -> list:
    """The anchor's last axis when it is the column within a vector (``_columns``)."""
    return spatial[-1:] if _columns(sch, anchor)[0] > 1 else []


def schedule_conv_nd(sch, func, info) -> bool:
    anchor, axes = _anchor_loops(sch)
    if anchor is None or _wpack_block(sch) is None:
        return False
    spatial, reduce = axes
    lane_cols = _column_axis(sch, anchor, spatial)  # lanes (channel, column)
    spatial = spatial[:len(spatial) - len(lane_cols)]
    b, c, *rows, j = spatial
    rc, *taps = reduce
    bn, cols, reg_n, rc_bn = _conv_nd_tile(sch, spatial, reduce, info)
    work = S._extent(sch, b) * S._extent(sch, c) * cols
    for lp in (*rows, j, *reduce):
        work *= S._extent(sch, lp)
    co, ci = sch.split(c, [None, bn])
    reg_n //= cols  # vectors per tile row
    jo, ji = sch.split(j, [None, reg_n])
    rco, rci = sch.split(rc, [None, rc_bn])
    reg_h = info.knobs.get("reg_h") or _row_tile(sch, rows, reg_n)
    tile_rows = []
    if reg_h > 1:
        ro, ri = sch.split(rows[-1], [None, reg_h])
        rows, tile_rows = [*rows[:-1], ro], [ri]
    reg_d = _row_tile(sch, rows[:-1], reg_n * reg_h, 2 * MIN_ACCUMULATORS)
    if reg_d > 1:
        do, di = sch.split(rows[-2], [None, reg_d])
        rows, tile_rows = [*rows[:-2], do, rows[-1]], [di, *tile_rows]
    parallel = info.knobs.get("parallel", work >= S.PARALLEL_MIN_WORK)
    batch = _batch_tile(sch, anchor, b, reg_n * reg_h * reg_d, parallel)
    outer_b, tile_b = ([], [b]) if batch else ([b], [])
    sch.reorder(*outer_b, *rows, co, rco, jo, rci, *taps, *tile_b, *tile_rows, ji, ci,
                *lane_cols)
    wb = sch.cache_write(anchor, 0, ACCUMULATOR_SCOPE if not parallel else "local")
    # channel lane innermost in the register tile, or its vector stores become scatters
    S._try(sch.transform_layout, anchor, ("write", 0),
           lambda vb, vc, *vo: (vb, vc // bn) + tuple(vo[:len(vo) - 1 + (cols == 1)]) + (
               vc % bn,) + tuple(vo[len(vo) - 1 + (cols == 1):]))
    sch.reverse_compute_at(wb, co)
    S._epilogue_into(sch, func, wb)
    _unpad_at(sch, wb, co)
    if lane_cols and not parallel and (bn * cols) & (bn * cols - 1):
        _writeback_in_lane_order(sch, wb, co, cols)
    outer = sch.fuse(*outer_b, *rows, co) if len(outer_b) + len(rows) else co
    if parallel:
        S._try(sch.parallel, outer)  # before decompose_reduction: after it, TVM refuses
    if info.knobs.get("unroll", True):
        for lp in (*tile_b, *tile_rows, ji):
            S._try(sch.unroll, lp)
    S._try(sch.vectorize, sch.fuse(ci, *lane_cols) if lane_cols else ci)
    init = sch.decompose_reduction(anchor, rco)
    init_loops = sch.get_loops(init)
    if init_loops:
        S._try(sch.vectorize, init_loops[-1])
    for prefix in ("pad_", "wpack_"):
        blk = S._find(sch, prefix)
        if blk is not None and (parallel or prefix == "pad_"):
            S._parallel_rows(sch, blk)
        elif blk is not None:
            _copies_unrolled(sch, blk)
    return True


def _writeback_in_lane_order(sch, wb, co, cols: int) -> None:
    """The write-back of a one-thread tile of 3 channels x 2 columns (6 lanes, no whole
    register) walks each accumulator's lanes in order: the channel loop moved in next to
    the column loop, the columns one short vector (a 64-bit store of a channel's pair),
    the rest unrolled. Why: in output order LLVM spilled the 6-lane accumulators to the
    stack in 128- and 64-bit pieces and read them back as 512-bit vectors spanning
    several pieces (store-to-load forwarding fails), a fixed cost of a tiny conv (1 thread,
    one process: Conv 2x4x4x5x4 by 6x2x3x3x3 in 2 groups 0.261 -> 0.242 us, 2x4x6x5 by
    6x2x3x2 0.086 -> 0.084 us; 8-lane tiles gained nothing, a 2x3x5x5x5 one lost 2 ns).
    A row that the columns do not divide keeps its order (its spare column's predicate
    leaves a binding the reorder refuses)."""
    loops = sch.get_loops(wb)
    at = next(k for k, lp in enumerate(loops) if sch.get(lp).same_as(sch.get(co)))
    below = loops[at + 1:]
    realize = sch.get(loops[-1]).body
    if len(below) < 2 or S._extent(sch, below[-1]) != cols \
            or not hasattr(realize, "iter_values"):
        return
    channel = tvm.tirx.analysis.undefined_vars(realize.iter_values[1])  # (b, c, *spatial)
    found = [lp for lp in below[:-1]
             if any(v.same_as(sch.get(lp).loop_var) for v in channel)]
    if len(found) != 1:
        return
    rest = [lp for lp in below[:-1] if not sch.get(lp).same_as(sch.get(found[0]))]
    try:
        sch.reorder(*rest, found[0], below[-1])
    except Exception:  # noqa: BLE001 - ScheduleError: the spare column's predicate
        return
    S._try(sch.vectorize, below[-1])
    for lp in (*rest, found[0]):
        S._try(sch.unroll, lp)


def _copies_unrolled(sch, wpack) -> None:
    """A one-thread kernel's per-call weight packing: each block's lanes unrolled. Why:
    vectorised by LLVM, the copies a column vector wants (lane ``channel * cols + col``
    reads channel ``lane // cols``) became AVX-512 gathers and scatters, a 36-weight
    1-D conv's packing alone 0.05 us."""
    S._try(sch.unroll, sch.get_loops(wpack)[-1])


#: storage scope of a one-thread kernel's accumulators (``cache_write``): TVM lowers a
#: "local" buffer to a ``TVMBackendAllocWorkspace``/``FreeWorkspace`` pair on every call
#: (``pool_rows.POOL_ACCUMULATOR_SCOPE``), a small "global" one to a stack array. A
#: parallel kernel keeps "local" (each thread its own).
ACCUMULATOR_SCOPE = "global"

#: independent accumulators a register tile wants at least: an FMA's latency (4 cycles) times
#: the one 512-bit FMA issued per cycle, with room to spare
MIN_ACCUMULATORS = 6


def _row_tile(sch, rows, reg_n: int, want: int = MIN_ACCUMULATORS) -> int:
    """Output rows per register tile (1: the tile is one row of ``reg_n`` columns).

    Why: a narrow last axis (a 3-D test conv 2 columns wide) leaves ``reg_n`` accumulators,
    so every tap waits on the previous tap's FMA (latency-bound at a quarter of the FMA
    rate); taking a few rows of the next axis into the tile gives the chains to overlap.
    A 3-D conv still short of twice that takes planes of the axis before too (called with
    ``reg_n`` times the rows taken and ``want`` doubled): ONNX's Conv3d_groups test (2x3x2
    outputs per plane block) 0.58 -> 0.49 us, Conv3d (2x2x2) 0.32 -> 0.21 us, a strided
    video block 1x16x4x10x10 by 32x16x3x3x3 26.7 -> 25.2 us."""
    if reg_n >= want or not rows:
        return 1
    h = S._extent(sch, rows[-1])
    return max((d for d in range(1, h + 1) if h % d == 0 and d * reg_n <= 2 * MIN_ACCUMULATORS),
               default=1)


def _batch_tile(sch, anchor, b, accumulators: int, parallel: bool) -> bool:
    """Whether the register tile takes the whole batch too. Why: a tiny conv's tile (3-D
    test convs of 2x2x2 or 2x3 outputs per image, a column pair per vector) held 4 to 6
    accumulators, fewer than the 8 FMAs in flight (4 cycles of latency, 2 issued per
    cycle), so each tap waited on the last; the batch's images share every weight vector
    loaded. Only a kernel that runs on one thread (the batch no longer a parallel axis),
    and with 6 accumulators only where the input is read without bounds tests (a padded
    2x3x5x5x5 conv's 12 tests per tap ran 0.236 -> 0.257 us with its batch taken)."""
    n = S._extent(sch, b)
    want = MIN_ACCUMULATORS if "if_then_else" in str(sch.get(anchor).body) \
        else 2 * MIN_ACCUMULATORS
    return not parallel and n > 1 and accumulators < want \
        and n * accumulators <= 2 * MIN_ACCUMULATORS


def _unpad_at(sch, wb, co) -> None:
    """Channels padded per group (6 real of each 8) leave the output a separate pass
    over a scratch copy, which ``_epilogue_into`` cannot fold into the tile's write-back:
    under the channel block if TVM can place it there, else in parallel rows."""
    outs = S._output_buffers(sch.mod["main"])
    if S._writes_output(sch, wb, outs):
        return
    for c in sch.get_consumers(wb):
        if S._writes_output(sch, c, outs) and not S._is_reduction(sch, c):
            if S._try(sch.reverse_compute_at, c, co) is None:
                S._parallel_rows(sch, c)


def conv_nd_space(sch, info) -> dict:
    """The knobs of ``schedule_conv_nd`` (``nnvm tune``); the block is the packed one."""
    anchor, (spatial, reduce) = _anchor_loops(sch)
    spatial = spatial[:len(spatial) - len(_column_axis(sch, anchor, spatial))]
    _bn, cols, reg_n, rc_bn = _conv_nd_tile(sch, spatial, reduce, info)
    ow, ic = S._extent(sch, spatial[-1]) * cols, S._extent(sch, reduce[0])
    rows = spatial[2:-1]
    reg_h = _row_tile(sch, rows, reg_n // cols)
    extra = {"reg_h": S._choices(reg_h, *S._divisors(S._extent(sch, rows[-1]), (1, 2, 3, 4)))} \
        if rows else {}
    return {**extra,
            "reg_n": S._choices(reg_n, *(n for n in (
                *S._divisors(ow, (4, 6, 7, 8, 12, 14, 16, 28)), *((8, 16) if ow >= 16 else ()))
                if n % cols == 0)),
            "rc_bn": S._choices(rc_bn, *S._divisors(ic, (4, 8, 16, 32, 64, ic))),
            "unroll": [True, False]}
