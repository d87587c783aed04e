"""Convs with a tiny reduction (an RGB stem: 3 input channels x 3x3 taps) vectorised along
the output row instead of across output channels.

Why: the channel-vector template (``schedules.schedule_conv2d``) keeps each register tile
as channel vectors and transposes it on the way out to NCHW; with 27 multiply-adds per
output that transposition costs about as much as the arithmetic (MobileNet-v3's 3->16
3x3 stride-2 stem at 224x224 ran at 60 GFLOP/s). Here a tile is ``mr`` output channels x
16 output columns: each step of the (ic, kh, kw) reduction loads one vector of input row
and multiplies it by ``mr`` broadcast weights, and the tile is stored as ``mr`` row
vectors, as it lies in NCHW. A strided conv reads the (padded) image through a copy split
into its column phases (``w % stride``, ``w // stride``), so the input vector is
contiguous too.
"""

from __future__ import annotations

from .schedules import (PARALLEL_MIN_WORK, ScheduleInfo, _epilogue_into, _extent, _find,
                        _parallel_rows, _pick, _try)

#: most multiply-adds per output (ic x kh x kw) the row template takes: above, the
#: channel-vector template's transposed store is paid over enough arithmetic
MAX_REDUCTION = 32


def rows_tile(sch, anchor, info: ScheduleInfo, possible: bool = False):
    """``(mr, stride)`` when ``anchor`` takes the row template (a reduction of at most
    ``MAX_REDUCTION``, output rows whole vectors divide, the ``rows`` knob not saying no),
    else None; ``possible=True`` ignores the knob (the knob space)."""
    b, c, i, j, rc, rh, rw = sch.get_loops(anchor)
    ow = _extent(sch, j)
    if _extent(sch, rc) * _extent(sch, rh) * _extent(sch, rw) > MAX_REDUCTION:
        return None
    if ow % info.lanes or _extent(sch, i) < 2:
        return None
    mr = _pick(_extent(sch, c), (8, 6, 4))
    if mr < 4:
        return None
    img = _image(sch, anchor)
    if img is None:
        return None
    width = int(img.shape[3])
    stride = _column_stride(sch, anchor, width, ow, _extent(sch, rw))
    if stride is None:
        return None
    if not possible and not info.knobs.get("rows", True):
        return None
    return mr, stride


def _image(sch, anchor):
    return next((r.source for r in sch.get(anchor).reads if len(r.source.shape) == 4), None)


def _column_stride(sch, anchor, width: int, ow: int, kw: int):
    """The conv's column stride from the image width it reads (dilation 1 only)."""
    for s in (1, 2):
        if (ow - 1) * s + kw <= width < ow * s + kw + s:
            return s
    return None


def schedule_conv2d_rows(sch, func, anchor, info: ScheduleInfo, mr: int, stride: int) -> None:
    lanes = info.lanes
    src = _find(sch, "pad_")  # the image copy: the padded one, or the phase-split one
    if stride > 1:
        if src is None:
            reads = [r.source for r in sch.get(anchor).reads]
            src = sch.cache_read(anchor, next(k for k, r in enumerate(reads)
                                              if len(r.shape) == 4), "global")
        s = stride
        # (an odd padded width leaves one phase a column short: padded with a zero that no
        # tap reads)
        sch.transform_layout(src, ("write", 0),
                             lambda vb, vc, vh, vw: (vb, vc, vh, vw % s, vw // s),
                             pad_value=0.0)
    b, c, i, j, rc, rh, rw = sch.get_loops(anchor)
    co, ci = sch.split(c, [None, mr])
    jo, ji = sch.split(j, [None, lanes])
    sch.reorder(b, co, i, jo, rc, rh, rw, ci, ji)
    wb = sch.cache_write(anchor, 0, "local")
    sch.reverse_compute_at(wb, jo)
    _epilogue_into(sch, func, wb)
    outer = sch.fuse(b, co, i)
    work = _extent(sch, outer) * mr * _extent(sch, jo) * lanes * \
        _extent(sch, rc) * _extent(sch, rh) * _extent(sch, rw)
    if info.knobs.get("parallel", work >= PARALLEL_MIN_WORK):
        _try(sch.parallel, outer)
    _try(sch.unroll, ci)
    _try(sch.vectorize, ji)
    init = sch.decompose_reduction(anchor, rc)
    _try(sch.vectorize, sch.get_loops(init)[-1])
    _try(sch.vectorize, sch.get_loops(wb)[-1])
    if src is not None:
        _parallel_rows(sch, src)
