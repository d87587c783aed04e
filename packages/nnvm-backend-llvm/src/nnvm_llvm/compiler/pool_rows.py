"""Strided pools (the row kernel of ``window_schedule``) computed one channel plane per task,
the padded plane made inside the task, the output row left to LLVM's loop vectoriser.

Why, measured at 1 thread against the previous row kernel (interleaved, loaded 2-core Zen 4):
max 3 x 3 stride 2 over 192 x 56 x 56 (ceil mode) 292 -> 174 us, over 64 x 112 x 112 (pad 1)
313 -> 202 us; average 2 x 2 stride 2 over 128 x 56 x 56 101 -> 29 us. Two costs went:

* the whole input was padded first, in its own pass, with a bounds test on every element (a
  2.5 MB second pass through memory); here the padded plane (13 KiB for 57 x 57) is written
  per ``(n, c)`` task with the padding split from the copy, and read while it is in cache;
* TVM vectors along the output row made every stride-2 tap a gather built from scalar loads
  (``vinsertps`` per lane); as a plain loop, LLVM sees the taps of one input row as one
  interleaved group and loads it in whole vectors and de-interleaves with shuffles.

Rows whose windows tile them without overlap (2 x 2 stride 2) run best in short pieces
(``NON_OVERLAP_PIECE`` outputs: LLVM unrolls the taps and vectorises across pieces); others
in the widest vector-like piece that divides the row, or the whole row.
"""

from __future__ import annotations

from .flat_window import try_decompose_padding

#: outputs per piece of a row whose windows do not overlap (measured: 4 29 us, 7-28 140-158
#: us for 2 x 2 stride 2 over 128 x 56 x 56: longer pieces became gathers)
NON_OVERLAP_PIECE = 4


def _piece(ow: int, kw: int, row_in: int, lanes: int) -> int:
    if kw * ow <= row_in and ow % NON_OVERLAP_PIECE == 0:
        return NON_OVERLAP_PIECE
    return next((v for v in (lanes, 8, 14, 7) if v <= ow and ow % v == 0), ow)


def schedule_pool_rows(sch, anchor, pad, info, extent, parallel_min_work: int,
                       epilogue) -> bool:
    """Parallel over planes ``(n, c)``; per plane the padded copy (``pad``, or None: no
    padding), then per output row pieces of ``vw`` outputs with the taps outside the piece.
    Knobs: ``vw``, ``parallel``."""
    loops = sch.get_loops(anchor)
    b, c, i, j = loops[:4]
    red = loops[4:]
    ow = extent(sch, j)
    row_in = int(sch.get(anchor).reads[-1].source.shape[-1])
    vw = info.knobs.get("vw") or _piece(ow, extent(sch, red[-1]), row_in, info.lanes)
    jo, ji = sch.split(j, [None, vw])
    sch.reorder(b, c, i, jo, *red, ji)
    wb = sch.cache_write(anchor, 0, "local")
    sch.reverse_compute_at(wb, jo)
    epilogue(wb)
    bc = sch.fuse(b, c)
    if pad is not None:
        sch.compute_at(pad, bc)
    work = extent(sch, bc) * extent(sch, i) * ow
    if info.knobs.get("parallel", work >= parallel_min_work // 8) and extent(sch, bc) > 1:
        sch.parallel(bc)
    sch.decompose_reduction(anchor, red[0])
    if pad is not None:
        try_decompose_padding(sch, pad, info.lanes)
        _vector_copy(sch, pad, extent, info.lanes)
    return True


def _vector_copy(sch, block, extent, lanes: int) -> None:
    """The plane copy's rows in TVM vectors of the widest divisor of the row: left to LLVM,
    it vectorised across rows with scatters (the padded pitch differs from the input's)."""
    j = sch.get_loops(block)[-1]
    w = extent(sch, j)
    vec = max(v for v in range(1, lanes + 1) if w % v == 0)
    if vec >= 4:
        sch.vectorize(sch.split(j, [None, vec])[1])


def pool_rows_space(sch, anchor, info, extent, parallel_min_work: int) -> dict:
    """``nnvm tune``'s knobs of :func:`schedule_pool_rows`, the heuristic's choice first."""
    b, c, i, j, *red = sch.get_loops(anchor)
    ow = extent(sch, j)
    row_in = int(sch.get(anchor).reads[-1].source.shape[-1])
    first = _piece(ow, extent(sch, red[-1]), row_in, info.lanes)
    others = [v for v in (4, 8, info.lanes, 14, 7, ow) if v <= ow and ow % v == 0]
    work = extent(sch, b) * extent(sch, c) * extent(sch, i) * ow
    return {"vw": [first] + [v for v in dict.fromkeys(others) if v != first],
            "parallel": [work >= parallel_min_work // 8, work < parallel_min_work // 8]}
