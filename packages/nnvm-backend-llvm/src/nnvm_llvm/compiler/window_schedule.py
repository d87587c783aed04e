"""The ``depthwise``, ``pool`` and ``tconv`` templates: sliding-window kernels.

Depthwise convs and pools on small planes take ``window_blocked``'s kernel (16 channels in a
vector); depthwise convs and unit-stride pools whose plane ``flat_window`` can flatten take
its kernel (the padded plane split into stride phases, register tiles of whole vectors),
depthwise convs over large planes (strided, or unit-stride from 32 KB)
``depthwise_strided``'s (the same in strips of output rows);
other pools (strided) take ``pool_rows``'s (a plane per task, the output row a plain loop
LLVM vectorises); every other window kernel (strided depthwise, transposed-conv windows)
gets vectors along the output row, parallel over ``(n, c, oh)``. Kept apart from
``schedules`` (which dispatches here by kind) so the window kernels can change without
touching the dense and conv templates.
"""

from __future__ import annotations

from .depthwise_strided import is_strips, schedule_strips, strips_space
from .flat_window import flat_space, is_flat, schedule_flat
from .pool_rows import pool_rows_space, schedule_pool_rows
from .window_blocked import blocked_space, is_blocked, schedule_blocked
from .schedules import (PARALLEL_MIN_WORK, ScheduleInfo, _choices, _divisors, _epilogue_into,
                        _extent, _find, _parallel_rows, _pick, _try)


def schedule_window(sch, func, info: ScheduleInfo, prefix: str) -> bool:
    """Depthwise conv and pooling: vectors along the output row."""
    anchor = _find(sch, prefix)
    if anchor is None:
        return False
    if is_blocked(sch, anchor):
        return schedule_blocked(sch, anchor, info, _extent, PARALLEL_MIN_WORK)
    if is_flat(sch, anchor):
        return schedule_flat(sch, anchor, info, _extent, PARALLEL_MIN_WORK)
    if is_strips(sch, anchor):
        return schedule_strips(sch, anchor, info, _extent, PARALLEL_MIN_WORK)
    if prefix == "anchor_pool":
        return schedule_pool_rows(sch, anchor, _find(sch, "pad_"), info, _extent,
                                  PARALLEL_MIN_WORK, lambda wb: _epilogue_into(sch, func, wb))
    loops = sch.get_loops(anchor)
    b, c, i, j = loops[:4]
    red = loops[4:]
    ow = _extent(sch, j)
    vw = info.knobs.get("vw") or _pick(ow, (info.lanes, 8, 14, 7, 4, 2))
    jo, ji = sch.split(j, [None, vw])
    sch.reorder(b, c, i, jo, *red, ji)
    wb = sch.cache_write(anchor, 0, "local")
    sch.reverse_compute_at(wb, jo)
    _epilogue_into(sch, func, wb)
    outer = sch.fuse(b, c, i)
    if info.knobs.get("parallel", _extent(sch, outer) * ow >= PARALLEL_MIN_WORK // 8):
        _try(sch.parallel, outer)  # before decompose_reduction: after it, TVM refuses
    _try(sch.vectorize, ji)
    init = sch.decompose_reduction(anchor, red[0])
    for blk in (init, wb):
        bl = sch.get_loops(blk)
        if len(bl) > 2:
            _try(sch.vectorize, bl[-1])
    pad = _find(sch, "pad_")
    if pad is not None:
        _parallel_rows(sch, pad)
    return True


def window_space(sch, info: ScheduleInfo, prefix: str) -> dict:
    """The knobs :func:`schedule_window` reads for the anchor block named ``prefix``."""
    anchor = _find(sch, prefix)
    if is_blocked(sch, anchor):
        return blocked_space(sch, anchor, info, _extent, PARALLEL_MIN_WORK)
    if is_flat(sch, anchor):
        return flat_space(sch, anchor, info, _extent, PARALLEL_MIN_WORK)
    if is_strips(sch, anchor):
        return strips_space(sch, anchor, info, _extent, PARALLEL_MIN_WORK)
    if prefix == "anchor_pool":
        return pool_rows_space(sch, anchor, info, _extent, PARALLEL_MIN_WORK)
    b, c, i, j = sch.get_loops(anchor)[:4]
    ow = _extent(sch, j)
    rows = _extent(sch, b) * _extent(sch, c) * _extent(sch, i)
    return {"vw": _choices(_pick(ow, (info.lanes, 8, 14, 7, 4, 2)),
                           *_divisors(ow, (info.lanes, 8, 4, 2 * info.lanes))),
            "parallel": _choices(rows * ow >= PARALLEL_MIN_WORK // 8, True, False)}
