"""Sliding windows over small planes with the *channels* in the vector (NCHW16c inside the
kernel): depthwise convs and pooling whose output plane is a few vectors at most.

Why: ``flat_window`` vectorises along the flattened plane, which for a 7 x 7 output with a
5 x 5 window computes a 8 x 12 tile (six 16-lane vectors for 49 outputs, half the lanes
wasted, plus the padded phase copy per channel); MobileNet-v3 / MnasNet / EfficientNet run
their widest depthwise layers (576-1152 channels) on exactly such planes. With 16 channels in
a vector every lane is an output and every tap is one FMA (or max) of a contiguous input
vector by a per-channel weight vector, with no broadcast (MLAS's and oneDNN's NCHWc
depthwise kernels; TVM's x86 ``depthwise_conv2d_NCHWc``).

The activations stay NCHW between kernels, so the kernel re-lays its input out itself, per
task (16 channels of one image, the parallel loop): ``pad_blocked_*`` is that block's padded
planes as ``(rows, columns, 16)``, a buffer of a few KiB that stays in cache (one 16-lane
gather per position), and ``pad_wblock_*`` the block's weights as ``(kh, kw, 16)``, zero for
channels past the last. The window is computed in register tiles of ``tile`` output columns
x 16 channels (independent accumulators), and written back NCHW (a 16-lane scatter per
position) with the epilogue fused. Channels not a multiple of 16 read the last channel again
in the padded lanes, which are never written out.

Measured (1 thread, this file's kernel against ``flat_window``'s on the same box,
alternating, on the corpus's depthwise shapes; the flat tile's waste in brackets): 576 x 7 x 7
with 3 x 3 taps 4.7x faster (1.63), 5 x 5 3.4x (1.96); 576 x 14 x 14 3 x 3 stride 2 3.8x
(1.31); 480 x 10 x 10 3 x 3 2.4x (1.44); 480 x 14 x 14 5 x 5 1.2x (1.47); 128 x 25 x 19 5 x 5
1.3x (1.31). Where the flat tile wastes little the two re-layouts cost more than they save:
480 x 20 x 20 3 x 3 (1.2) 0.6x, 240 x 14 x 14 3 x 3 (1.14) 0.45x, 192 x 20 x 20 5 x 5 (1.2)
0.9x; hence :func:`wants_blocked`'s thresholds.

The re-layouts, not the FMAs, were most of a depthwise kernel's time (profile of 5 x 5 over
1152 x 7 x 7, 1 thread: the tap loop, already sharing each input vector across a row's five
taps, 29%; the weight copy 21%, the input copy 13%, a fill of the whole padded plane 8%).
The weight copy is now a TVM vector (LLVM had made it gathers behind a permute chain per
index vector) and the depthwise planes keep their bound check per position (zeros written
on the border only): 1152 x 7 x 7 and 576 x 7 x 7 5 x 5 1.25x, 576 x 14 x 14 3 x 3 stride 2
1.19x, 240-256 x 14 x 14 5 x 5 and 960 x 16 x 16 5 x 5 dilation 2 1.07-1.09x faster (1 thread,
old and new kernels alternating in one process). Cheaper, the kernel also pays for strided and
25-tap windows on small planes at less flat waste (:data:`FLAT_WASTE_MIN_STRIDED_SMALL`,
:data:`FLAT_WASTE_MIN_WIDE_SMALL`). The write-back unrolls each output row (see
:func:`_channels_last`): 5 x 5 over 240 x 14 x 14 1.21x, dilated over 960 x 16 x 16 1.55x.

Where the time goes now (perf, 1 thread, 5 x 5 over 1152 x 7 x 7 / 240 x 14 x 14): the taps
51% / 56%, at the FMA roof; the input re-layout 20% / 23% (16 scalar inserts per interior
position); the write-back 16%; the weight copy 8% / 3% (packing the weight at load, in
``lowering``, would remove it). Tried and dropped: the input re-laid out in one pass before
the window by 16 x 16 shuffle transposes (``recurrent_loop.shuffle_transpose`` in a TE
extern) ran 0.88x, its planes read back from L2 instead of L1 and its loads as slow as the
inserts; the copy's row unrolled (LLVM kept the inserts) or its channels outermost (0.4-0.7x).
perf of 5 x 5 over 1152 x 7 x 7 this round: taps 39%, write-back 29% (LLVM transposes in
4 x 4 blocks of 128-bit vectors, about one instruction per element), input copy 22%; the
tap loop already shares each loaded input vector across the row's five taps (LLVM unrolls
them; unrolling them in TIR gained nothing). Tiles that are a whole row or a multiple of 4
columns now go from their accumulators straight to the write-back
(:func:`_writes_back_per_tile`). At 2 threads the blocks split evenly between the threads
(:func:`_halves_of_whole_tasks`): there is no serial part before the parallel loop (a
constant weight is packed at load), an empty launch costs about 0.1 us, and a block's
output (16 whole channel planes) shares no cache line with another block's, so what was
left was the uneven cut; an odd block count (240 channels: 15) still runs 8 + 7.
"""

from __future__ import annotations

from tvm import te, tirx

from .flat_window import FlatPlane, _padded_at, window_work

#: the flat kernel's tile must compute at least this many times the outputs (its wasted
#: lanes) for the channel-blocked kernel to pay for its two re-layouts ...
FLAT_WASTE_MIN = 1.4
#: ... or this many when the window is strided (the flat kernel then also pays its phase
#: copy) or has 25 taps or more (more work per re-laid-out element)
FLAT_WASTE_MIN_STRIDED_OR_WIDE = 1.25
#: with the re-layouts made cheaper (the weight copy in vectors, zeros on the border only,
#: whole rows written back) strided windows pay from this much waste on planes of at most
#: ``SMALL_PLANE_MAX`` outputs, or ``WIDE_STRIDED_PLANE_MAX`` with 25 taps or more (3 x 3
#: stride 2 over 64 x 38 x 38 1.28x, 144 x 28 x 28 1.19x, 5 x 5 stride 2 over 240 x 28 x 28
#: 1.21x, 144 x 56 x 56 1.08x faster than flat at a waste of 1.11-1.14; 3 x 3 stride 2 with
#: 28 x 28 outputs 0.94x) ...
FLAT_WASTE_MIN_STRIDED_SMALL = 1.1
SMALL_PLANE_MAX = 400
WIDE_STRIDED_PLANE_MAX = 784
#: ... and unit-stride windows of 25 taps or more from this much on planes of at most
#: ``SMALL_PLANE_MAX`` outputs (5 x 5 over 192 x 20 x 20 1.23x, 48 x 20 x 20 1.12x at 1.2,
#: 5 x 5 max pools over 512 x 20 x 20 1.16x; on 50 x 38 the flat kernel's row tiles stay
#: 1.3x faster, on 28 x 28 at 1.14 the two tie)
FLAT_WASTE_MIN_WIDE_SMALL = 1.15
#: at most this share of channel lanes may be padding (24 channels: 32 lanes, 1.33)
CHANNEL_WASTE_MAX = 1.25
#: channels that leave the last vector part empty need this much flat waste whatever the
#: window: the write-back then checks every lane against the channel count, which costs
#: more than the flat kernel wastes below it (flat faster: 5 x 5 over 120 x 14 x 14 1.24x,
#: 72 x 14 x 14 1.27x, 3 x 3 over 120 x 10 x 10 1.10x, 3 x 3 stride 2 over 72 x 28 x 28
#: 1.46x, 5 x 5 stride 2 over 72 x 56 x 56 1.26x, at a waste of 1.14-1.47; blocked faster:
#: 5 x 5 over 72 x 10 x 10 1.10x, 184 x 7 x 7 2.0x, 3 x 3 over 200 x 7 x 7 1.83x, 5 x 5
#: stride 2 over 40 x 14 x 14 1.4x, at 1.6-1.96; 1 thread, interleaved)
FLAT_WASTE_MIN_PART_VECTOR = 1.55
#: tasks the thread pool cuts a parallel loop into per thread (``NNVM_CHUNKS`` in
#: threadpool.c), each thread taking a shard of consecutive tasks first
POOL_TASKS_PER_THREAD = 4
#: output columns per register tile, in order of preference (independent accumulators)
TILE_PREFS = (7, 8, 6, 5, 4, 3, 2, 1)


def wants_blocked(g: FlatPlane, channels: int) -> bool:
    """Whether a window of geometry ``g`` over ``channels`` channels should take this
    kernel rather than ``flat_window``'s: the flat tile wastes lanes and the channels fill
    whole vectors."""
    rows, wrow = g.tile
    lanes = g.lanes
    channel_waste = -(-channels // lanes) * lanes / channels
    strided, wide = g.sh > 1 or g.sw > 1, g.kh * g.kw >= 25
    waste_min = FLAT_WASTE_MIN_STRIDED_OR_WIDE if strided or wide else FLAT_WASTE_MIN
    if strided and g.oh * g.ow <= (WIDE_STRIDED_PLANE_MAX if wide else SMALL_PLANE_MAX):
        waste_min = FLAT_WASTE_MIN_STRIDED_SMALL
    elif wide and g.oh * g.ow <= SMALL_PLANE_MAX:
        waste_min = FLAT_WASTE_MIN_WIDE_SMALL
    if channels % lanes:
        waste_min = max(waste_min, FLAT_WASTE_MIN_PART_VECTOR)
    return rows * wrow >= waste_min * g.oh * g.ow and channel_waste <= CHANNEL_WASTE_MAX


def blocked_planes(x, g: FlatPlane, pad_value, name: str):
    """``pad_blocked_<name>``: ``(n, ceil(c / lanes), rows, columns, lanes)``, the padded
    input with a block of channels innermost (the last channel repeated past ``c``)."""
    n, c = int(x.shape[0]), int(x.shape[1])
    lanes = g.lanes
    hp = (g.oh - 1) * g.sh + (g.kh - 1) * g.dh + 1
    wp = (g.ow - 1) * g.sw + (g.kw - 1) * g.dw + 1

    def at(b, k, r, t, ci):
        full = _padded_at(x, g, pad_value, b, k * lanes + ci, r, t)
        if c % lanes == 0:
            return full
        # the last block's clamped channel index made every block's lanes a gather of
        # extracted addresses; the choice per block is a branch, the full blocks plain loads
        return tirx.if_then_else(k < c // lanes, full, _padded_at(
            x, g, pad_value, b, tirx.min(k * lanes + ci, c - 1), r, t))
    return te.compute((n, -(-c // lanes), hp, wp, lanes), at, name="pad_blocked_" + name)


def blocked_weights(w, lanes: int, name: str):
    """``pad_wblock_<name>``: a depthwise weight ``(c, 1, kh, kw)`` as ``(ceil(c / lanes),
    kh, kw, lanes)``, zero past the last channel (so padded lanes add nothing)."""
    c, _, kh, kw = (int(d) for d in w.shape)
    return te.compute((-(-c // lanes), kh, kw, lanes), lambda k, r, t, ci: tirx.if_then_else(
        k * lanes + ci < c, w[tirx.min(k * lanes + ci, c - 1), 0, r, t],
        tirx.const(0, w.dtype)), name="pad_wblock_" + name)


def blocked_window(xb, g: FlatPlane, channels: int, combine, tap, name: str):
    """The window over the blocked planes ``xb``: ``(n, c / lanes, oh, ow, lanes)`` reduced
    by ``combine`` over ``tap(value, block, lane, rh, rw)``; then back to ``(n, c, oh, ow)``."""
    n, blocks, lanes = xb.shape[0], xb.shape[1], g.lanes
    rh, rw = te.reduce_axis((0, g.kh), "rh"), te.reduce_axis((0, g.kw), "rw")
    acc = te.compute((n, blocks, g.oh, g.ow, lanes), lambda b, k, i, j, ci: combine(
        tap(xb[b, k, i * g.sh + rh * g.dh, j * g.sw + rw * g.dw, ci], k, ci, rh, rw),
        axis=[rh, rw]), name=name)
    return te.compute((n, channels, g.oh, g.ow), lambda b, c, i, j: acc[
        b, c // lanes, i, j, c % lanes], name=name + "_rows")


def _producer(sch, block, prefix: str):
    return next((pr for pr in sch.get_producers(block)
                 if sch.get(pr).name_hint.startswith(prefix)), None)


def is_blocked(sch, anchor) -> bool:
    """Whether ``anchor`` was lowered by :func:`blocked_window` (it reads blocked planes)."""
    return anchor is not None and _producer(sch, anchor, "pad_blocked_") is not None


def _tile(ow: int) -> int:
    return next(t for t in TILE_PREFS if ow % t == 0)


def schedule_blocked(sch, anchor, info, extent, parallel_min_work: int) -> bool:
    """Per task (the parallel loop over images x channel blocks): the blocked input and
    weights, then register tiles of ``tile`` output columns x ``lanes`` channels with the
    taps outside the tile, then the NCHW write-back with the epilogue. Knobs: ``tile``,
    ``parallel``."""
    b, k, i, j, ci, *red = sch.get_loops(anchor)
    ow, work = extent(sch, j), window_work(sch, anchor, extent)
    tile = info.knobs.get("tile") or _tile(ow)
    if ow % tile:
        return False
    bk = sch.fuse(b, k)
    consumers = sch.get_consumers(anchor)
    for consumer in consumers:
        sch.reverse_compute_at(consumer, bk)
    planes = _producer(sch, anchor, "pad_blocked_")
    sch.compute_at(planes, bk)
    weights = _producer(sch, anchor, "pad_wblock_")
    if weights is not None:
        sch.compute_at(weights, bk)
        # TVM's vector of 16 strided loads: left to LLVM, the copy became gathers behind a
        # permute chain per index vector and took a fifth of 5 x 5 over 1152 x 7 x 7
        _vectorize_last(sch, weights)
    jo, ji = sch.split(j, [None, tile])
    sch.reorder(i, jo, *red, ji, ci)
    acc = sch.cache_write(anchor, 0, "local")
    sch.reverse_compute_at(acc, jo)
    per_tile = _writes_back_per_tile(sch.get(anchor).name_hint, ow, tile)
    rows = [_into_row(sch, consumer, jo if per_tile else i, info.lanes)
            for consumer in consumers]
    if per_tile and rows and all(rows):
        # the tile's results go from the accumulators straight to the write-back: no
        # workspace row stored and read back, no zeroing of it per row
        sch.set_scope(acc, 0, "local")
    if info.knobs.get("parallel", work >= parallel_min_work) and extent(sch, bk) > 1:
        sch.parallel(_halves_of_whole_tasks(sch, bk, extent(sch, bk))
                     if sch.get(anchor).name_hint.startswith("anchor_depthwise") else bk)
    sch.unroll(ji)
    sch.vectorize(ci)
    init = sch.decompose_reduction(anchor, red[0])
    sch.vectorize(sch.get_loops(init)[-1])
    sch.vectorize(sch.get_loops(acc)[-1])
    # the re-layouts: one gather (input) and one scatter (output) of 16 lanes per position
    _vectorize_last(sch, planes)
    # the bound check stays, uniform per position (a branch, not a select), so only the
    # border is written with the pad value instead of a fill of the whole padded plane then
    # the copy; for pools too (3 x 3 max over 480 x 10 x 10 and 832 x 7 x 7 1.33x, 5 x 5 max
    # over 512 x 20 x 20 1.05x, avg over 128 x 20 x 20 1.06x faster at 1 thread)
    for consumer, in_row in zip(consumers, rows):
        _channels_last(sch, consumer, in_row)
    return True


def _halves_of_whole_tasks(sch, bk, blocks: int):
    """The parallel loop over ``blocks`` (images x channel blocks) padded with empty
    iterations so that each half of the pool's tasks at 2 threads holds half the blocks.

    Why: TVM cuts a parallel loop into tasks of ``ceil(blocks / tasks)`` iterations and the
    pool deals the first half of the tasks to one thread, the rest to the other, so 36
    blocks (576 channels) ran as 20 + 16 and 60 (960) as 32 + 28: the 2-thread time was
    the longer half. Laid out as 2 halves x 4 tasks x ``ceil(blocks / 8)`` iterations (the
    last of each half partly empty, a predicate per block) they run 18 + 18 and 30 + 30:
    5 x 5 over 576 x 7 x 7 12.5 -> 11.3 us (1.10x), dilated over 960 x 16 x 16 1.07x
    faster at 2 threads, 1 thread 0.5-1% slower (the predicates), best of 25-60
    alternating blocks in one process. Odd block counts and multiples of 8 keep the plain
    loop (an odd count cannot halve; a multiple of 8 already splits evenly), and so do
    pools: their lighter body paid 1.8% at 1 thread for the predicates (3 x 3 max over
    832 x 7 x 7, 1.05x faster at 2 threads)."""
    tasks = 2 * POOL_TASKS_PER_THREAD
    if blocks % 2 or blocks % tasks == 0 or blocks < tasks:
        return bk
    half, rest = sch.split(bk, [2, blocks // 2])
    outer, inner = sch.split(rest, [tasks // 2, None])
    return sch.fuse(half, outer, inner)


def _writes_back_per_tile(anchor_name: str, ow: int, tile: int) -> bool:
    """Whether each register tile of a depthwise conv is written back NCHW right after it
    is computed, from its accumulators (a local buffer LLVM keeps in registers), rather
    than each row from a workspace row (each tile's results stored there, the row zeroed
    first): when the tile is the whole row (nothing to wait for) or a multiple of 4
    columns (LLVM transposes 16 channels x 4 columns at a time). 1 thread, old and new
    kernels alternating in one process: 5 x 5 over 1152 x 7 x 7 1.03x, 576 x 7 x 7 1.02x,
    dilated over 960 x 16 x 16 (tiles of 8) 1.06x faster; tiles of 7 in rows of 14 (5 x 5
    over 240-256 x 14 x 14) ran 1.06-1.07x slower per tile, and 3 x 3 max pools over
    832 x 7 x 7 1.01x slower, so those keep the row."""
    depthwise = anchor_name.startswith("anchor_depthwise")
    return depthwise and (tile == ow or tile % 4 == 0)


def _vectorize_last(sch, block) -> None:
    try:
        sch.vectorize(sch.get_loops(block)[-1])
    except Exception:  # noqa: BLE001 - TVM refuses (a guarded tail): LLVM's loop stays
        pass


def _into_row(sch, consumer, row, lanes: int) -> bool:
    """The write-back (with the epilogue) of each output row right after the row is
    computed, from a row's buffer still in cache, instead of a pass over the whole block's
    planes after the window: 5 x 5 over 1152 x 7 x 7 1.06x, 240 x 14 x 14 1.11x, 256 x 14 x
    14 1.08x, 3 x 3 max over 832 x 7 x 7 1.14x faster (1 thread, interleaved, old and new
    kernels in one process). Not when the channels leave the last vector part empty: the
    guard of its lanes inside every row made 5 x 5 over 184 x 7 x 7, 120 x 7 x 7 and
    200 x 14 x 14 1.1x slower. False then, or where TVM refuses: the write-back stays per
    task."""
    if int(sch.get(consumer).writes[0].source.shape[1]) % lanes:
        return False
    try:
        sch.reverse_compute_at(consumer, row)
    except Exception:  # noqa: BLE001 - an unusual epilogue: after the window, per task
        return False
    return True


def _channels_last(sch, block, in_row: bool) -> None:
    """The write-back loops ``(channel, [i,] j)`` turned to ``([i,] j, channel)``, the channel
    a vector: one scatter per output position instead of a strided scalar read per element
    (measured 1.5x faster on the whole 576 x 7 x 7 kernel). The row's positions are unrolled
    too, so LLVM transposes the whole row of 16 channels and stores each channel's run of
    columns at once: depthwise 1.35-1.8x faster on the whole kernel for rows of 10-20 (3 x 3
    over 480 x 10 x 10, 5 x 5 over 240 x 14 x 14 and 192 x 20 x 20, dilated 5 x 5 over
    960 x 16 x 16), pools 1.2-1.37x (5 x 5 max over 512 x 20 x 20, avg over 128 x 20 x 20,
    3 x 3 max over 480 x 10 x 10); the same for rows of 7 (LLVM unrolled those itself)."""
    loops = sch.get_loops(block)
    if len(loops) < 4:
        return
    *c, j = loops[-2:] if in_row else loops[-3:]
    try:
        sch.reorder(*c[1:], j, c[0])
    except Exception:  # noqa: BLE001 - an unusual epilogue: keep its order
        return
    _vectorize_last(sch, block)
    sch.unroll(j)


def blocked_space(sch, anchor, info, extent, parallel_min_work: int) -> dict:
    """``nnvm tune``'s knobs of :func:`schedule_blocked`, the heuristic's choice first."""
    ow = extent(sch, sch.get_loops(anchor)[3])
    first, work = _tile(ow), window_work(sch, anchor, extent)
    return {"tile": [first] + [t for t in TILE_PREFS if ow % t == 0 and t != first],
            "parallel": [work >= parallel_min_work, work < parallel_min_work]}
