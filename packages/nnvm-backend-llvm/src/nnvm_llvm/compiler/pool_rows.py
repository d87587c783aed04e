"""Strided pools (the row kernel of ``window_schedule``): one channel plane per task, the
padded input rows made per output row, the output row left to LLVM's loop vectoriser.

Why, measured at 1 thread against the previous row kernel (interleaved, loaded 2-core Zen 4):
max 3 x 3 stride 2 over 192 x 56 x 56 (ceil mode) 292 -> 125 us, over 64 x 112 x 112
(pad 1) 313 -> 160 us, over 64 x 111 x 111 (no padding) 134 -> 89 us; average 2 x 2
stride 2 over 128 x 56 x 56 101 -> 29 us. Two costs went:

* the whole input was padded first, in its own pass, with a bounds test on every element (a
  2.5 MB second pass through memory); here the input rows one output row reads are padded
  just before it (3 x 114 floats for a 3 x 3 window over 112 columns), so the window reads
  them from L1. Measured against the alternatives: the whole padded plane per task, the
  padding split from the copy, ran 1.2-1.3x slower (114 x 114 floats fall out of L1; the
  fill and the copy both write the plane); the padding inlined as bounds tests in the
  window 1.4-1.6x slower. A plane that fits in L1 (``PLANE_PAD_MAX_BYTES``) is padded
  whole, once per task: each input row copied once, not once per output row reading it;
* TVM vectors along the output row made every stride-2 tap a gather built from scalar loads
  (``vinsertps`` per lane); as a plain loop over the output columns with the taps unrolled
  in its body, LLVM sees the taps of one input row as one interleaved group, loads it in
  whole vectors and de-interleaves with shuffles. Pieces of the row (``vw`` outputs, the
  taps outside the piece) measured slower at every width tried (2-28), some 3-5x (gathers).
"""

from __future__ import annotations

import tvm


#: pools of at most this many output elements have their plane loop unrolled (below)
TINY_POOL_OUTPUTS = 1024

#: storage scope of a pool's window accumulator (``cache_write``): TVM lowers a "local"
#: buffer on the CPU to a ``TVMBackendAllocWorkspace``/``FreeWorkspace`` pair on every call
#: (about 12 ns, and its stores stay, as the pointer escapes), a "global" one under 1 KB to
#: a stack array LLVM keeps in registers. 1 thread, one process: AveragePool 2x3x6x1 k(2, 1)
#: s(2, 1) 0.028 -> 0.016 us (a one-element Relu's time), 2x3x6x6 k2 s2 0.038 -> 0.029 us,
#: MaxPool 1x5x7x7 k3 s2 ceil 0.102 -> 0.095 us; through ``flat_window`` MaxPool 1x3x8x8 k3
#: pad 1 0.148 -> 0.137 us (a depthwise 3 x 3 over 8 x 8 x 8 ran 6% slower: it keeps "local")
POOL_ACCUMULATOR_SCOPE = "global"

#: a padded plane of at most this many bytes is made whole, once per plane, and stays in L1
#: (32 KB on Zen 4); larger planes have the rows each output row reads padded just before
#: it. 1 thread, one process, plane against rows: max 3 x 3 stride 2 over 40 x 40 (pad 1,
#: 7 KB planes; average) 64 -> 39 us, 56 x 56 (ceil, 13 KB) 126 -> 112 us, 64 x 64 (ceil,
#: 17 KB) 116 -> 97 us, 72 x 72 (ceil, 21 KB) 74 -> 64 us; 80 x 80 (pad 1, 27 KB) 70 -> 93 us
#: and 112 x 112 (52 KB) 157 -> 179 us the other way. Not for tiny pools (their planes
#: unrolled): AveragePool 2x3x9x9 k3 s2 pad 1 0.16 -> 0.27 us, MaxPool 1x16x14x14 0.72 -> 1.0
PLANE_PAD_MAX_BYTES = 24 << 10


def schedule_pool_rows(sch, anchor, pad, info, extent, parallel_min_work: int,
                       epilogue) -> bool:
    """Parallel over planes ``(n, c)``; per output row the padded input rows it reads
    (``pad``, or None: no padding), then the columns, with the taps inside (``vw`` = 1)
    or outside pieces of ``vw`` columns. Knobs: ``vw``, ``parallel``."""
    loops = sch.get_loops(anchor)
    b, c, i, j = loops[:4]
    red = loops[4:]
    ow = extent(sch, j)
    # a padded output row of at most a vector is one vector, its taps outside it: as a plain
    # loop LLVM unrolled it and vectorised the rows above it into gathers (1 thread:
    # AveragePool 2x3x9x9 k3 s2 pad 1 0.51 -> 0.17 us, 1x8x13x13 0.95 -> 0.45 us, MaxPool
    # 1x16x14x14 k3 s2 pad 1 2.04 -> 0.74 us)
    whole = "vw" not in info.knobs and pad is not None and 1 < ow <= info.lanes
    vw = ow if whole else info.knobs.get("vw") or 1
    jo, ji = sch.split(j, [None, vw])
    sch.reorder(b, c, i, jo, *red, ji)
    wb = sch.cache_write(anchor, 0, POOL_ACCUMULATOR_SCOPE)
    sch.reverse_compute_at(wb, jo)
    epilogue(wb)
    bc = sch.fuse(b, c)
    work = extent(sch, bc) * extent(sch, i) * ow
    if info.knobs.get("parallel", work >= parallel_min_work // 8) and extent(sch, bc) > 1:
        sch.parallel(bc)
    elif work <= TINY_POOL_OUTPUTS:
        # a tiny plane's loops are fully unrolled by LLVM, which then vectorised the plane
        # loop: every tap a gather, every output a scatter (1 thread: AveragePool 2x3x6x6
        # k2 s2 0.140 -> 0.039 us, MaxPool 1x5x7x7 k3 s2 ceil 0.20 -> 0.10 us)
        sch.unroll(bc)
    if whole:  # the window's loop before decompose_reduction: after it, TVM refuses
        sch.vectorize(ji)
    init = sch.decompose_reduction(anchor, red[0])
    if whole:
        for blk in (init, wb):
            sch.vectorize(sch.get_loops(blk)[-1])
    if pad is not None:  # the padded plane, or the rows one output row reads, in L1
        whole_plane = work > TINY_POOL_OUTPUTS and plane_bytes(sch, pad) <= PLANE_PAD_MAX_BYTES
        sch.compute_at(pad, bc if whole_plane else i)
    return True


def plane_bytes(sch, pad) -> int:
    """Bytes of one padded plane: the pad block's buffer without its batch and channel."""
    buf = sch.get(pad).writes[0].source
    n = (tvm.DataType(str(buf.dtype)).bits + 7) // 8
    for d in buf.shape[2:]:
        n *= int(d)
    return n


def pool_rows_space(sch, anchor, info, extent, parallel_min_work: int) -> dict:
    """``nnvm tune``'s knobs of :func:`schedule_pool_rows`, the heuristic's choice first."""
    b, c, i, j = sch.get_loops(anchor)[:4]
    ow = extent(sch, j)
    pieces = [v for v in (4, 8, info.lanes, 14, 7) if v <= ow and ow % v == 0]
    work = extent(sch, b) * extent(sch, c) * extent(sch, i) * ow
    return {"vw": [1] + list(dict.fromkeys(pieces)),
            "parallel": [work >= parallel_min_work // 8, work < parallel_min_work // 8]}
