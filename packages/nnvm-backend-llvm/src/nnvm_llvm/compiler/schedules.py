"""Schedules: turn a group's TIR (one PrimFunc) into loops that reach the hardware.

Every group goes through the same three steps:

1. inline: every spatial block that is not an output and not worth materialising (conv and
   pool padding are kept) is computed inline into its consumers, so a fused group is one
   loop nest around its master;
2. the master's template (by ``Lowering.kind``):
   ``dense``     register tiles of ``mr x nr`` outputs (``nr`` = the packed panel width,
                 two AVX-512 vectors for fp32), accumulated in a local tile over the whole
                 K loop, panels outermost so each stays in cache (TVM's ``dense_pack``,
                 MLAS's SGEMM kernel shape);
   ``conv2d``    output-channel blocks of one vector times ``reg_n`` output columns in
                 registers, reduction over (ic, kh, kw) inside, weights pre-packed
                 ``OIHW{bn}o`` (TVM's ``conv2d_NCHWc`` schedule, without leaving NCHW
                 between kernels);
   ``depthwise`` per (n, c) plane in parallel: the plane padded and split into its stride
                 phases in a cache-sized buffer, the window computed over it flattened, in
                 register tiles of whole vectors (``flat_window``);
   ``pool``      vectors along the output row, parallel over (n, c, oh) (these two:
                 ``window_schedule``);
   ``reduce``/``softmax``  parallel over the kept axes, the reductions computed per row
                 (``rows_schedule``);
   ``elemwise``/``injective``  one fused loop, split into vectors and parallel chunks;
3. the epilogue (bias, activation, residual add...) is inlined into the master's
   write-back, so a fused kernel writes each output element once.

Every step that does not apply (odd shapes, a rule's own block structure) is skipped, never
fatal: the worst case is a correct, plainly scheduled loop nest.
"""

from __future__ import annotations

import dataclasses

import tvm
import tvm.s_tir as s_tir
import tvm_ffi

#: work (multiply-adds or elements) under which a kernel stays on one thread: a parallel
#: launch costs a few microseconds idle and far more on a loaded machine (a per-frame LSTM
#: step ran 3x slower on 2 threads with 1 << 15), so only ~10-50 us of work is split
PARALLEL_MIN_WORK = 1 << 18


@dataclasses.dataclass
class ScheduleInfo:
    """What a template may need beyond the TIR: vector lanes, the packed block sizes, and
    the tuned ``knobs`` (``nnvm tune``): each knob a template reads replaces its heuristic's
    choice; a knob left out keeps the heuristic, so an empty dict is the untuned kernel.
    ``applied`` is written by :func:`schedule`: whether the template itself ran (False: the
    plain fallback loop nest), so a tuner can reject knobs a template refused."""

    kind: str
    lanes: int = 16
    dense_block: int | None = None
    conv_block: int | None = None
    knobs: dict = dataclasses.field(default_factory=dict)
    applied: bool | None = None


def _try(fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except Exception:  # noqa: BLE001 - ScheduleError and tvm_ffi errors: step skipped
        return None


def _extent(sch, loop) -> int:
    ext = sch.get(loop).extent
    return int(ext) if isinstance(ext, tvm.tirx.IntImm) else -1


def _is_reduction(sch, block) -> bool:
    return any(int(iv.iter_type) == 2 for iv in sch.get(block).iter_vars)


def _blocks(sch):
    return list(sch.get_child_blocks(sch.get_sblock("root")))


def _output_buffers(func) -> list:
    """The function's parameters (TIRX: buffer-typed vars); kernels write only outputs."""
    return list(func.params)


def _writes_output(sch, block, outs) -> bool:
    return any(w.source.same_as(p) for w in sch.get(block).writes for p in outs)


def _find(sch, prefix: str):
    for b in _blocks(sch):
        if sch.get(b).name_hint.startswith(prefix):
            return b
    return None


def inline_all(sch, func, keep_prefixes=()) -> None:
    outs = _output_buffers(sch.mod['main'])
    for b in _blocks(sch):
        blk = sch.get(b)
        if _is_reduction(sch, b) or _writes_output(sch, b, outs):
            continue
        if any(blk.name_hint.startswith(p) for p in keep_prefixes):
            continue
        _try(sch.compute_inline, b)


def _epilogue_into(sch, func, writeback) -> None:
    """Inline the (single) output block that reads the master into its write-back."""
    outs = _output_buffers(sch.mod['main'])
    if _writes_output(sch, writeback, outs):
        return
    for c in sch.get_consumers(writeback):
        if _writes_output(sch, c, outs) and not _is_reduction(sch, c):
            _try(sch.reverse_compute_inline, c)
            return


def _pick(extent: int, prefs) -> int:
    for f in prefs:
        if f <= extent and extent % f == 0:
            return f
    return 1


def _parallel_vectorize(sch, block, lanes: int, vectorize: bool = True) -> None:
    """Elementwise: one flat loop in vectors. Injective (``vectorize=False``: gathers,
    concatenation, transposes): rows, so the index arithmetic of the outer axes (divisions
    by the shape) is paid once per row, the last axis a plain loop LLVM can vectorise."""
    loops = sch.get_loops(block)
    if not loops:
        return
    weight = _element_cost(sch, block)
    last = _extent(sch, loops[-1])
    planes = vectorize and len(loops) > 2 and _pick(last, (lanes, lanes // 2, 4)) == 1
    if planes:
        # a row no vector divides (38, 19, 10 wide): one loop per image plane; split flat,
        # the vectors straddle rows and channels and every lane is a gather (BatchNorm
        # 1x128x50x38 ran 6x onnxruntime)
        loops = loops[:-2] + [sch.fuse(*loops[-2:])]
        vectorize = False
    if not vectorize and len(loops) > 1 and _extent(sch, loops[-1]) >= 8:
        inner = loops[-1]
        outer = sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0]
        n_in = _extent(sch, inner)
        if n_in % lanes == 0:
            _, vec = sch.split(inner, [None, lanes])
            _try(sch.vectorize, vec)
        elif planes and lanes <= n_in < SHORT_PLANE:
            _try(_vector_plane, sch, inner, n_in, lanes)
        if _extent(sch, outer) * n_in * weight >= PARALLEL_MIN_WORK and _extent(sch, outer) > 1:
            _try(sch.parallel, outer)
        return
    if vectorize and last % lanes and _pick(last, (lanes // 2, 4)) > 1:
        # a vector must not straddle two rows: an operand broadcast along the rows (batch
        # norm's per-channel scale) or the row index itself turns into per-lane gathers
        # (BatchNorm 1x64x200x152 ran 3-35x slower per element than 1x16x400x304)
        lanes = _pick(last, (lanes // 2, 4))
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    total = _extent(sch, fused)
    if total <= 0:
        return
    if vectorize and total % lanes == 0 and total >= lanes:
        outer, inner = sch.split(fused, [None, lanes])
        _try(sch.vectorize, inner)
    else:
        outer = fused
    if total * weight >= PARALLEL_MIN_WORK:
        _try(sch.parallel, outer)


#: planes shorter than this are cut into whole vectors and a tail (``_vector_plane``); in
#: longer ones LLVM's loop vectoriser's remainder costs little
SHORT_PLANE = 256


def _vector_plane(sch, inner, n_in: int, lanes: int) -> None:
    """A short image plane (6x6 = 36) as whole vectors plus a tail, one vector when its
    length is a multiple of 4, else a plain loop. Why: left to LLVM, a 36-element loop ran
    mostly in its scalar remainder and checks: BatchNorm 2x3x6x6 0.23 -> 0.03 us, 1x512x7x7
    19.6 -> 1.95 us at 1 thread (14x14 planes, 196, the same either way)."""
    body = n_in - n_in % lanes
    main, tail = sch.loop_partition(inner, [body, None])
    _try(sch.vectorize, sch.split(main, [None, lanes])[1])
    if (n_in - body) % 4 == 0:  # (a loop from ``body`` on: split refuses it)
        _try(sch.vectorize, tail)


def _element_cost(sch, block) -> int:
    """Work per element of an elementwise block, in units of a one-load copy: loads, and
    four per math call (sqrt, exp, pow). Why: ``PARALLEL_MIN_WORK`` counts elements, and an
    element of LRN (five taps, two square roots, ~0.45 ns) costs several of an add's, so
    LRN 1x192x27x27 (64 us) never went parallel."""
    try:
        value = sch.get(block).body.value  # the BufferStore's value
    except Exception:  # noqa: BLE001 - not a plain store: count as a plain element
        return 1
    kinds = [type(e).__name__ for e in _subexprs(value)]
    loads = kinds.count("BufferLoad") + kinds.count("TensorLoad")  # TIRX names it either way
    return max(1, (loads + 4 * kinds.count("Call")) // 3)


#: most pieces a concatenation is cut into (DenseNet's largest has 49 inputs)
MAX_PIECES = 64


#: the fields holding sub-expressions, by TIR node class name (this TVM moved the node
#: classes between modules and has no ``post_order_visit`` for TIRX, so nodes are matched
#: by name)
_KIDS = {"Call": ("args",), "Select": ("condition", "true_value", "false_value"),
         "BufferLoad": ("indices",), "Cast": ("value",), "Not": ("a",),
         "Let": ("value", "body")}


def _subexprs(e, skip=()):
    """``e`` and every expression under it, not looking inside nodes of the classes named
    in ``skip``."""
    todo = [e]
    while todo:
        e = todo.pop()
        yield e
        name = type(e).__name__
        if name in skip:
            continue
        for field in _KIDS.get(name, ("a", "b") if hasattr(e, "b") else ()):
            kid = getattr(e, field)
            todo.extend(kid if field in ("args", "indices") else (kid,))


def _piece_bounds(sch, block):
    """(axis, sorted inner boundaries) when every branch of ``block``'s value that tests
    the indices is a bare ``v < const`` on one block axis ``v`` (what the ``concatenate``
    rule emits), else None. Tests on the data (ReLU's select) do not matter."""
    blk = sch.get(block)
    if type(blk.body).__name__ != "BufferStore":
        return None
    axes = {iv.var: k for k, iv in enumerate(blk.iter_vars)}
    found = set()
    for e in _subexprs(blk.body.value):
        name = type(e).__name__
        if name == "Call" and str(getattr(e.op, "name", "")).endswith("if_then_else"):
            c = e.args[0]
        elif name == "Select":
            c = e.condition
        else:
            continue
        if type(c).__name__ == "LT" and type(c.b).__name__ == "IntImm" and c.a in axes:
            found.add((axes[c.a], int(c.b.value)))
        elif any(type(v).__name__ == "Var" and v in axes
                 for v in _subexprs(c, skip=("BufferLoad", "Call", "Select"))):
            return None  # another test on the indices (padding): not a concatenation
        # else a test on the data (ReLU's select), the same in every piece
    if len({a for a, _ in found}) != 1:
        return None
    return next(iter(found))[0], sorted(b for _, b in found)


def _schedule_pieces(sch, block, lanes: int) -> bool:
    """A concatenation (and its fused elementwise epilogue: DenseNet's BatchNorm + ReLU) as
    one loop nest per input. Why: in a single nest every element walked the branch tree
    that picks its input, which kept the loop scalar: a 32-input concatenation of 14x14
    planes with BatchNorm and ReLU took 1.9 ms (13.6x onnxruntime), 21 ms of DenseNet-121's
    78. Cut at the input boundaries (``loop_partition``), each piece's branches fold away
    and the piece is one flat, vectorised copy (0.02 ms)."""
    found = _piece_bounds(sch, block)
    if found is None:
        return False
    axis, bounds = found
    loops = sch.get_loops(block)
    if len(loops) != len(sch.get(block).iter_vars) or axis >= len(loops):
        return False
    extent = _extent(sch, loops[axis])
    cuts = [b for b in bounds if 0 < b < extent]
    if not cuts or len(cuts) >= MAX_PIECES or extent <= 0:
        return False
    outer = 1
    for lp in loops[:axis]:
        outer *= max(_extent(sch, lp), 1)
    trailing = len(loops) - axis - 1
    per_index = 1
    for lp in loops[axis + 1:]:
        per_index *= max(_extent(sch, lp), 1)
    edges = [0] + cuts + [extent]
    sizes = [b - a for a, b in zip(edges, edges[1:])]
    pieces = sch.loop_partition(loops[axis], sizes[:-1] + [None])
    if outer > 1 and outer * extent * per_index >= PARALLEL_MIN_WORK:
        _try(sch.parallel, sch.fuse(*loops[:axis]) if axis > 1 else loops[0])
    for piece, size in zip(pieces, sizes):
        if outer == 1 and size * per_index >= PARALLEL_MIN_WORK:
            _try(sch.parallel, piece)  # (the piece loop starts at its offset: not fusable)
        if not trailing:
            continue
        for blk in sch.get_child_blocks(piece):
            inner = sch.get_loops(blk)[-trailing:]
            flat = sch.fuse(*inner) if len(inner) > 1 else inner[0]
            if per_index >= lanes and per_index % lanes == 0:
                _try(sch.vectorize, sch.split(flat, [None, lanes])[1])
            # else: a plain loop without branches, which LLVM's loop vectoriser takes
    return True


# -- templates ------------------------------------------------------------------------------

#: bytes of one packed weight panel slice kept in L1 across the row tiles (K blocking)
DENSE_PANEL_BYTES = 24 << 10
#: bytes of the accumulator block of one (panel, row block) when K is blocked
DENSE_ACC_BYTES = 32 << 10


def _dense_nr(n: int, info: ScheduleInfo) -> int:
    return info.dense_block or _pick(n, (2 * info.lanes, info.lanes, 8, 4, 2))


def _dense_mr(m: int, nr: int, info: ScheduleInfo) -> int:
    mr = _pick(m, (8, 6, 4, 12, 3, 2)) if nr >= 2 * info.lanes else _pick(m, (8, 6, 4, 3, 2))
    # a row count nothing divides (ViT's 197 tokens): uneven tiles, the last one partial,
    # instead of one row per tile (each weight vector then loaded once per multiply-add:
    # ViT's linear layers ran at 60 GFLOP/s, 1.75x onnxruntime)
    return 8 if mr < 3 and m >= 16 else mr


def _dense_kc(m: int, kk: int, mr: int, nr: int) -> int:
    """K slice (0: none) that keeps one packed panel slice within ``DENSE_PANEL_BYTES``."""
    if kk * nr * 4 > DENSE_PANEL_BYTES and m > mr:
        return max((d for d in range(16, DENSE_PANEL_BYTES // (nr * 4) + 1, 16)
                    if kk % d == 0), default=0)
    return 0


def _slices_columns(sch, n: int) -> bool:
    """Whether an output of the kernel is narrower than the anchor's ``n`` columns (the
    zero-padded panels sliced back to N: ``gemm.packed_gemm``'s ``_unpad`` or ``_bias``).
    Why: inlined into the write-back, that slice's column predicate replaced the write-back's
    row predicate, so uneven row tiles (37 rows in tiles of 8) stored three rows past the
    output's end: a 37 x 128 @ 128 x 72 dense corrupted the heap (``munmap_chunk(): invalid
    pointer``)."""
    outs = _output_buffers(sch.mod["main"])
    return any(len(w.source.shape) and int(w.source.shape[-1]) != n
               for b in _blocks(sch) if _writes_output(sch, b, outs)
               for w in sch.get(b).writes)


#: bytes of packed weight panels each row tile sweeps before the next row tile starts
#: (``_panel_group``): half the L2 of the machines targeted (Zen 4 1 MB, recent Intel 1.25-2 MB)
DENSE_GROUP_BYTES = 512 << 10


def _panel_group(sch, anchor, m: int, n: int, kk: int, mr: int, nr: int) -> int:
    """Panels per group (0: none) when the weight spans at least two groups of
    ``DENSE_GROUP_BYTES`` and there are several row tiles: the row tiles then take turns
    over one group of panels (the group stays in L2) instead of every row tile taking each
    panel in turn. Why: with the panel outermost, each panel's tiles wrote one 128-byte
    piece to every output row, 32 rows 200 KB apart, and the output (6.4 MB for GPT-2's
    LM head at 32 tokens) went out in those scattered pieces; grouped, each row gets 4 KB in
    a run. One process, loaded 2-core box, min thread CPU time of 12 blocks, 1 thread, us
    old -> new: 32x128 @ 128x50257 5720 -> 3925 (1.07x its compute roof), 32x128 @
    128x16384 1753 -> 1306, 32x128 @ 128x4096 314 -> 303; K-blocked layers (``_dense_kc``)
    keep their order."""
    bits = tvm.DataType(sch.get(anchor).writes[0].source.dtype).bits
    group = DENSE_GROUP_BYTES // max(1, kk * nr * bits // 8)
    return group if m > mr and group > 1 and -(-n // nr) >= 2 * group else 0


def schedule_dense(sch, func, info: ScheduleInfo) -> bool:
    """Register tile ``mr x nr`` over packed panels; when a panel (K x nr) overflows L1, K
    is cut into ``kc`` slices and the rows into ``mc`` blocks so the panel slice stays in
    L1 while every row tile of the block consumes it (the accumulators of the block live in
    a ``local`` buffer, re-read once per slice: MLAS's and GotoBLAS's packed-B loop)."""
    anchor = _find(sch, "anchor_dense")
    if anchor is None:
        return False
    i, j, k = sch.get_loops(anchor)
    m, n, kk = _extent(sch, i), _extent(sch, j), _extent(sch, k)
    if n == 1 and not info.knobs and _lazy("matmul_dot", "schedule_dot")(sch, anchor, info.lanes):
        return True
    knobs = info.knobs
    nr = info.dense_block or knobs.get("nr") or _dense_nr(n, info)
    mr = knobs.get("mr") or _dense_mr(m, nr, info)
    kc = knobs["kc"] if "kc" in knobs else _dense_kc(m, kk, mr, nr)
    io, ii = sch.split(i, [None, mr])
    jo, ji = sch.split(j, [None, nr])
    if kc:
        ko, ki = sch.split(k, [None, kc])
        rows = -(-m // mr)
        mb = max(d for d in range(1, rows + 1) if rows % d == 0
                 and d * mr * nr * 4 <= DENSE_ACC_BYTES)
        mo, mi = sch.split(io, [None, mb])
        sch.reorder(jo, mo, ko, mi, ki, ii, ji)
        wb = sch.cache_write(anchor, 0, "local")
        sch.reverse_compute_at(wb, mo)
        red, outer = ko, [jo, mo]
    elif group := _panel_group(sch, anchor, m, n, kk, mr, nr):
        jc, jp = sch.split(jo, [None, group])
        sch.reorder(jc, io, jp, k, ii, ji)
        wb = sch.cache_write(anchor, 0, "local")
        sch.reverse_compute_at(wb, jp)
        red, outer = k, [jc, io]
    else:
        sch.reorder(jo, io, k, ii, ji)
        wb = sch.cache_write(anchor, 0, "local")
        sch.reverse_compute_at(wb, io)
        red, outer = k, [jo, io]
    if not (m % mr and _slices_columns(sch, n)):
        _epilogue_into(sch, func, wb)
    fused = sch.fuse(*outer)
    if knobs.get("parallel", m * n * kk >= PARALLEL_MIN_WORK) and _extent(sch, fused) > 1:
        _try(sch.parallel, fused)  # before decompose_reduction: after it, TVM refuses
    _try(sch.unroll, ii)  # before decompose_reduction: the update block alone is neither
    _try(sch.vectorize, ji)  # complete nor a reduction, and refuses both
    init = sch.decompose_reduction(anchor, red)
    for blk in (init, wb):
        loops = sch.get_loops(blk)[1:]
        if loops:
            _try(sch.vectorize, loops[-1])
    return True


def _matmul_tile(m: int, n: int, info: ScheduleInfo) -> tuple[int, int]:
    """``(mr, nr)`` of an activation x activation matmul: the knobs, else the heuristic."""
    nr = info.knobs.get("nr") or _pick(n, (2 * info.lanes, info.lanes, 8, 4, 2))
    mr = _pick(m, (6, 4, 8, 3, 2)) if nr >= 2 * info.lanes else _pick(m, (8, 6, 4, 3, 2))
    # ViT's 197 tokens (196 patches + class token) divide by nothing: uneven tiles (the last
    # one predicated) instead of 1 x 1 scalar ones, as for conv widths
    if nr < 4 and n >= 2 * info.lanes:
        nr = info.lanes
    if 4 < n < info.lanes and nr < n and "nr" not in info.knobs:
        # a row narrower than one vector that no smaller vector divides (attention's
        # 15-wide heads): one odd-width vector over the whole row, which LLVM lowers to
        # masked full-width operations; a divisor tile was 1 wide and the kernel scalar
        # (1x8x40x40 @ 1x8x40x15 at 8 GFLOP/s, 10x slower than this). Rows wider than a
        # vector are zero-padded by the lowering instead (``gemm.pads_narrow_n``): 24- and
        # 31-lane vectors ran 7-10x slower than the padded 32-wide tile
        nr = n
    if mr < 3 and m >= 16:
        mr = 4
    return info.knobs.get("mr") or mr, nr


def _writes_a_slice(sch) -> bool:
    """Whether the kernel's output is a slice of its anchor (a lane-padded matmul's
    ``..._unpad``). Inlined into the write-back, the slice's predicate replaces the
    write-back's own, so a row tile that does not divide M would store rows past the
    output's end: the lowering pads M for the heuristic's tiles, and a tuning knob that
    does not divide it is refused (``mr=8`` on Whisper's 1500 rows crashed ``nnvm tune``)."""
    return any(sch.get(b).name_hint.endswith("_unpad") for b in _blocks(sch))


#: multiply-adds from which a batch matmul is split across threads: below
#: ``PARALLEL_MIN_WORK``, as its tasks are whole register tiles with no per-element index
#: arithmetic. Attention's 8 heads of 40x15 @ 15x40 (192 K) ran 5.3 -> 4.2 us at 2 threads
#: split (loaded 2-core box, one process, min of 3 blocks; 1 thread 5.3 -> 5.5), while
#: 2 x 32x32 @ 32x64 (131 K) ran slower split at 1 and 2 threads (2.45 -> 2.77 us);
#: below it, ``gemm.splits_by_batch`` splits by batch alone
MATMUL_MIN_WORK = 160_000

#: batches from which a batch matmul whose operands are zero-padded copies runs one task per
#: batch, each padding its own operands (``_batch_pads``)
PAD_BATCHES = 2

#: padded output elements per batch between which the slice of a padded batch matmul's
#: output is a copy of its own in each batch's task, not predicated stores in the
#: write-back: with a row and a column bound TVM scalarises those stores for the whole
#: tile, which ViT's 197x197 scores paid (1 thread 118 -> 108 us for 2 heads, 720 -> 656
#: us for 12; loaded 2-core box, one process). Below, the copy costs more than it saves
#: (49x49 9.1 -> 9.4 us, 8 heads of 40x40 5.4 -> 5.8 us); above (an output past L2:
#: Whisper's 1500x1500, 5.9 -> 6.4 ms), the copy reads it back from memory
SLICE_COPY = (16384, 1 << 18)


def _batch_pads(sch, anchor, batch) -> list:
    """The operand copies (``..._pad``: M and N zero-padded to whole tiles by the lowering)
    of a batch matmul with at least ``PAD_BATCHES`` batches, else []: the template then
    runs one task per batch, each copying its own batch's operands. Why: the copies were
    passes of their own on one thread before the parallel body (too small to split), and
    the other thread read its half from the first core's cache: in the idle roofline sweep
    1x2x49x64 @ 1x2x64x49 took as long at 2 threads as at 1. One process, loaded 2-core
    box, min us, row tasks -> batch tasks, 2 threads: 49x64 @ 64x49 9.3 -> 5.6, ViT's
    197x64 @ 64x197 (2 heads) 119 -> 60, 12 heads 726 -> 368 (1 thread the same or up to 3%
    faster). The cost: at most one task per batch, so a 2-head matmul uses two threads."""
    count = 1
    for lp in batch:
        count *= _extent(sch, lp)
    if count < PAD_BATCHES:
        return []
    return [p for p in sch.get_producers(anchor) if "_pad" in sch.get(p).name_hint]


def schedule_batch_matmul(sch, func, info: ScheduleInfo) -> bool:
    """Attention's activation x activation matmuls: the dense register tile per batch,
    batches and row tiles in parallel (B's row ``k`` is contiguous along ``j``)."""
    anchor = _find(sch, "anchor_matmul")
    if anchor is None:
        return False
    *batch, i, j, k = sch.get_loops(anchor)
    m, n = _extent(sch, i), _extent(sch, j)
    if n == 1 and not info.knobs and _lazy("matmul_dot", "schedule_dot")(sch, anchor, info.lanes):
        return True
    mr, nr = _matmul_tile(m, n, info)
    if m % mr and _writes_a_slice(sch):
        return False  # before any change: the caller falls back to the plain loop nest
    io, ii = sch.split(i, [None, mr])
    jo, ji = sch.split(j, [None, nr])
    sch.reorder(*batch, io, jo, k, ii, ji)
    wb = sch.cache_write(anchor, 0, "local")
    sch.reverse_compute_at(wb, jo)
    pads = _batch_pads(sch, anchor, batch)
    sliced = [c for c in sch.get_consumers(wb) if sch.get(c).name_hint.endswith("_unpad")]
    if not (pads and SLICE_COPY[0] <= m * n <= SLICE_COPY[1] and len(sliced) == 1):
        _epilogue_into(sch, func, wb)
        sliced = []
    work = m * n * _extent(sch, k)
    for lp in batch:
        work *= _extent(sch, lp)
    from .gemm import splits_by_batch  # one task per batch when too small for row tiles
    by_batch = splits_by_batch(work, work // (m * n * _extent(sch, k)), MATMUL_MIN_WORK)
    outer = sch.fuse(*batch) if pads or by_batch else sch.fuse(*batch, io) if batch else io
    if (work >= MATMUL_MIN_WORK or by_batch) and _extent(sch, outer) > 1:
        _try(sch.parallel, outer)  # before decompose_reduction: after it, TVM refuses
    for pad in pads:
        sch.compute_at(pad, outer)
    for blk in sliced:
        sch.reverse_compute_at(blk, outer)
    _try(sch.unroll, ii)
    _try(sch.vectorize, ji)
    init = sch.decompose_reduction(anchor, k)
    for blk in (init, wb):
        loops = sch.get_loops(blk)
        if loops:
            _try(sch.vectorize, loops[-1])
    return True


def _conv_tile(oc: int, ow: int, ic: int, info: ScheduleInfo) -> tuple[int, int, int]:
    """``(bn, reg_n, rc_bn)``: output channels per vector block, output columns per register
    tile, input channels per cache block; the knobs, else the heuristic."""
    bn = info.conv_block or _pick(oc, (info.lanes, 8, 4, 2))
    reg_n = _pick(ow, (14, 12, 16, 8, 7, 10, 6, 4, 5, 3, 2))
    if reg_n < 4 and ow > 8:
        # a prime-ish width (97 STFT frames): an uneven tile of 8 columns (the last one
        # predicated) still reuses each weight vector 8 times; one column per tile cannot
        reg_n = 8
    # cache blocking over input channels: the rows of `rc_bn` channels and their weights
    # stay in L1 while every ow tile of the output row consumes them
    rc_bn = _pick(ic, (16, 8, 12, 4)) if ic > 16 else ic
    if bn == 1 and ow >= info.lanes:
        # an odd channel count (a 1-channel score map) leaves no vector across channels:
        # a row tile one vector wide instead (nnvm tune found 4 -> 16 columns 9x faster)
        reg_n = info.lanes
    k = info.knobs
    bn = info.conv_block or k.get("bn") or bn  # the packed block binds: it is the weight panel
    return bn, k.get("reg_n") or reg_n, k.get("rc_bn") or rc_bn


def _spatial_tile(sch, anchor, info: ScheduleInfo, possible: bool = False):
    """``(mr, nr)`` when ``anchor`` is a pointwise conv (1x1, stride 1, no padding) that
    takes the pixel-GEMM template, else None: the ``spatial`` knob decides, and without it
    the heuristic (``_spatial_default``); ``possible=True`` asks only whether the template
    can take the conv at all, whatever the knob says (the knob space)."""
    b, c, i, j, rc, rh, rw = sch.get_loops(anchor)
    if _extent(sch, rh) != 1 or _extent(sch, rw) != 1 or _find(sch, "pad_") is not None:
        return None
    reads = sch.get(anchor).reads
    img = next((r.source for r in reads if len(r.source.shape) == 4), None)
    hw = _extent(sch, i) * _extent(sch, j)
    if img is None or [int(d) for d in img.shape[2:]] != [_extent(sch, i), _extent(sch, j)]:
        return None  # (strided: the image is larger than the output)
    # the pixel tile: the one that recomputes fewest pixels (none when whole vectors divide
    # the plane), at most the plane: the last tile overlaps the one before it
    # (``_overlap_last_tile``)
    nr = min((n for n in (2 * info.lanes, info.lanes) if n <= max(hw, info.lanes)),
             key=lambda n: (-(-hw // n) * n, -n))
    mr = _pick(_extent(sch, c), (8, 6, 4))
    if hw < info.lanes or mr < 4:
        return None
    if hw % nr and (not _outputs_have_channels(sch, _extent(sch, c))
                    or int(img.shape[1]) != _extent(sch, rc)):
        # zero-padded output channels (17, 257): the write-back's channel predicate would
        # go with the uneven pixel split's, which ``_overlap_tiles`` drops (lanes stored
        # past the end); grouped convs (the image channel computed from c) are not measured
        return None
    wanted = possible or info.knobs.get("spatial", _spatial_default(
        hw, nr, _extent(sch, c), _extent(sch, rc), info))
    return (mr, nr) if wanted else None


def _outputs_have_channels(sch, channels: int) -> bool:
    """Whether every output the kernel writes is an NCHW image of ``channels`` channels."""
    outs = _output_buffers(sch.mod["main"])
    written = [w.source for blk in _blocks(sch) if _writes_output(sch, blk, outs)
               for w in sch.get(blk).writes]
    return bool(written) and all(len(buf.shape) == 4 and int(buf.shape[1]) == channels
                                 for buf in written)


def _spatial_default(hw: int, nr: int, oc: int, ic: int, info: ScheduleInfo) -> bool:
    """Whether the pixel GEMM beats the channel-vector template untuned. Planes whole tiles
    divide: always (see ``_schedule_conv2d_spatial``). Other planes recompute the pixels
    their last, overlapping tile shares with the one before (``_overlap_last_tile``; until
    then a zero-padded copy of the image, whose numbers these are), or, a 7x7 plane, run
    its last pixel as scalars (``_schedule_pixel_tail``), so only where the GEMM
    wins by more: at least as many output channels as input ones, and either little padding
    (169 -> 176, 196 -> 208 pixels) or a channel-vector tile of half a vector (a channel
    count 16 does not divide). Min of 7 x 200 runs, 1 thread, us, channel-vector -> GEMM:
    512->1000 at 13x13 2286 -> 1779, 440->440 at 7x7 302 -> 222, 40->240 at 14x14 55 -> 39,
    48->144 at 14x14 37 -> 28, 48->48 at 14x14 12.5 -> 11.1; losers left alone: 96->576 at
    7x7 (49 -> 64 pixels) 63 -> 74, squeezes 128->16 at 55x55 147 -> 197, 512->64 at 13x13
    102 -> 119."""
    padded = -(-hw // nr) * nr
    if padded == hw:
        return True
    half = (info.conv_block or info.lanes) < info.lanes
    return oc >= ic and (8 * (padded - hw) <= padded or half)


#: annotation on a pointwise conv's pixel-tile loop: the last pixel a tile may start at
#: (``_overlap_last_tile``); read and removed by ``_overlap_tiles`` after scheduling
OVERLAP = "nnvm_overlap_tail"


def _overlap_last_tile(sch, po, last_start: int) -> None:
    """Mark the pixel-tile loop ``po`` so that its tiles start at ``min(start,
    last_start)``: the last tile overlaps the one before it and recomputes a few pixels
    (storing the same values again), so no tile reads or writes past the plane. Why: a
    pixel count whole vectors do not divide left the tile's last vector predicated, which
    TVM scalarises for the whole kernel (13x13: 30x slower); the zero-padded image copy that
    replaced it ran on one thread before the parallel body, and at 2 threads the other core
    then read the freshly padded image from the first core's cache every call (48 -> 48 at
    14x14: the same time at 1 and 2 threads). TIR's schedule has no overlapping split, so
    the tile loop is split unevenly and ``_overlap_tiles`` rewrites the bindings."""
    sch.annotate(po, OVERLAP, last_start)


def _overlap_tiles(func):
    """``func`` with every block under a loop marked by ``_overlap_last_tile`` moved back
    to a whole tile inside the plane: each binding that uses the marked loop is shifted by
    ``min(base, last) - base`` (``base`` the binding with the loops inside the tile at 0,
    i.e. the tile's first pixel, the same for every lane, so the loads stay vectors), and
    the uneven split's predicate dropped (every shifted pixel is in the plane)."""
    tirx = tvm.tirx
    marked = []
    tvm_ffi.structural_walk(func.body, (tirx.For, lambda f: marked.append(
        OVERLAP in f.annotations)))
    if not any(marked):
        return func

    def loop_vars(stmt) -> list:
        found = []
        tvm_ffi.structural_walk(stmt, (tirx.For, lambda f: found.append(
            (f.loop_var, tirx.const(0, str(f.extent.ty))))))
        return found

    def shift(body, tile_var, last: int):
        inner = loop_vars(body)

        def uses_tile(e) -> bool:
            seen = []
            tvm_ffi.structural_walk(e, (tvm.ir.expr.Var, lambda v: seen.append(
                v.same_as(tile_var))))
            return any(seen)

        def at_tile_start(v):
            return next((zero for var, zero in inner if var.same_as(v)), v)

        def realize(node):
            values = []
            for v in node.iter_values:
                if uses_tile(v):
                    base = tvm_ffi.structural_map(v, (tvm.ir.expr.Var, at_tile_start))
                    v = v - base + tirx.min(base, tirx.const(last, str(base.ty)))
                values.append(v)
            return s_tir.SBlockRealize(values, True, node.block)
        return tvm_ffi.structural_map(body, (s_tir.SBlockRealize, realize))

    def loop(node):
        if OVERLAP not in node.annotations:
            return node
        notes = {k: v for k, v in node.annotations.items() if k != OVERLAP}
        body = shift(node.body, node.loop_var, int(node.annotations[OVERLAP]))
        return tirx.For(node.loop_var, node.min, node.extent, node.kind, body,
                        node.thread_binding, notes)
    return func.with_body(tvm_ffi.structural_map(func.body, (tirx.For, loop)))


def _schedule_conv2d_spatial(sch, func, anchor, info: ScheduleInfo, mr: int, nr: int) -> None:
    """A pointwise conv as the GEMM ``W (oc x ic) @ X (ic x HW)`` vectorised along the
    pixels: register tiles of ``mr`` output channels x ``nr`` pixels, each input row segment
    loaded once per tile and every weight a broadcast; the tile is stored as it lies in NCHW.
    Why: the channel-vector template keeps its tile as channel vectors and transposes it on
    the way out; with few input channels that store cost as much as the multiply-adds
    (MobileNet-v2's 16->96 expand at 112x112: 1.55x onnxruntime, now 1.0x; 3->64 at
    112x112 0.45 -> 0.20 ms), and no 1x1 conv measured was slower this way (min of 200
    runs, 1 thread: 96->24, 144->24, 64->256 at 56x56, 128->512 and 256->512 at 28x28 all
    0.75-1.05x onnxruntime)."""
    nr, chunks = _pixel_split(sch, anchor, info, mr, nr)
    wb = _flat_pixels(sch, anchor)
    b, c, p, rc, rh, rw = sch.get_loops(anchor)
    ic, hw = _extent(sch, rc), _extent(sch, p)
    if chunks == 1 and _tail_pays(hw, nr, info.lanes):
        _schedule_pixel_tail(sch, func, anchor, wb, info, mr)
        return
    co, ci = sch.split(c, [None, mr])
    po, pv, pi = sch.split(p, [None, nr // info.lanes, info.lanes])
    sch.reorder(b, co, po, rc, rh, rw, ci, pv, pi)
    pc = None
    if chunks > 1:
        pc, po = sch.split(po, [chunks, None])
    if hw % nr:
        _overlap_last_tile(sch, po, hw - nr)
    sch.reverse_compute_at(wb, po)
    _epilogue_into(sch, func, wb)
    outer = sch.fuse(b, co, pc) if pc is not None else sch.fuse(b, co)
    work = _extent(sch, outer) * mr * _extent(sch, po) * nr * ic
    if info.knobs.get("parallel", work >= PARALLEL_MIN_WORK):
        _try(sch.parallel, outer)
    _try(sch.unroll, ci)
    _try(sch.unroll, pv)
    _try(sch.vectorize, pi)
    init = sch.decompose_reduction(anchor, rc)
    _try(sch.vectorize, sch.get_loops(init)[-1])
    wl = sch.get_loops(wb)
    _try(sch.vectorize, sch.split(wl[-1], [None, info.lanes])[1])


def _flat_pixels(sch, anchor):
    """The write-back block of ``anchor``'s tile, with both blocks over (channel, flat
    pixel): in (row, column) terms a tile of 32 pixels straddles rows, and its region (so
    the register buffer and the write-back) would be whole rows; the tile "global", not
    "local": under ``STACK_BYTES`` TVM makes it a stack array inside each parallel task,
    which LLVM keeps in registers (``_pixel_split``)."""
    width = _extent(sch, sch.get_loops(anchor)[3])
    wb = sch.cache_write(anchor, 0, "global")
    sch.transform_block_layout(anchor, lambda vb, vc, vi, vj, vr, vh, vw: (
        vb, vc, vi * width + vj, vr, vh, vw))
    sch.transform_layout(anchor, ("write", 0), lambda vb, vc, vi, vj: (vb, vc, vi * width + vj))
    sch.transform_block_layout(wb, lambda vb, vc, vi, vj: (vb, vc, vi * width + vj))
    return wb


#: accumulator registers a pixel-tail tile may hold (``_schedule_pixel_tail``): 24 of
#: AVX-512's 32 vector registers, 12 of AVX2's 16, the rest for the loaded pixels
TAIL_ACCUMULATORS = {16: 24, 8: 12}


def _tail_pays(hw: int, nr: int, lanes: int) -> bool:
    """Whether a plane of ``hw`` pixels runs faster as whole pixel vectors plus a scalar
    tail (``_schedule_pixel_tail``) than as overlapping tiles of ``nr``: in vector
    multiply-adds per channel and input channel, ``hw // lanes`` plus the tail's scalar
    ones at two a cycle (Zen 4, and Intel's two FMA ports), against the overlapping tiles'
    whole ``nr`` each. 7x7 at 16 lanes: 3.5 against 4; 14x14: 14 against 14, left alone."""
    tail = hw % lanes
    return bool(tail) and hw >= lanes and hw // lanes + tail / 2 < -(-hw // nr) * nr // lanes


def _schedule_pixel_tail(sch, func, anchor, wb, info: ScheduleInfo, mr: int) -> None:
    """The pointwise-conv GEMM of ``_schedule_conv2d_spatial`` over a plane whole vectors
    do not divide, as two loops per tile of ``mr`` output channels: the whole pixel
    vectors, and the few pixels left (``hw % lanes``) as scalars, each weight a contiguous
    run of the packed block. Why: a 7x7 plane is 3 vectors and 1 pixel; as two
    overlapping tiles of 32 it computed 64 pixels for 49, the whole of its gap to the roof
    (440 -> 440: 1.31x at 1 thread in the idle sweep). One process, loaded 2-core box
    (load 2.4), min / median of 30 blocks, us, overlapping tiles -> tail: 440 -> 440 at
    7x7, 1 thread 217 / 340 -> 190 / 308, 2 threads 166 / 329 -> 129 / 287. The convs
    the heuristic leaves to the channel-vector template (96 -> 576, 576 -> 96, 960 -> 160
    at 7x7) were no faster forced onto this one, so ``_spatial_default`` is unchanged."""
    b, c, p, rc, rh, rw = sch.get_loops(anchor)
    hw = _extent(sch, p)
    body = hw // info.lanes * info.lanes
    co, ci = sch.split(c, [None, mr])
    sch.reorder(b, co, p, rc, rh, rw, ci)
    sch.reverse_compute_at(wb, co)
    _epilogue_into(sch, func, wb)
    outer = sch.fuse(b, co)
    work = _extent(sch, outer) * mr * hw * _extent(sch, rc)
    if info.knobs.get("parallel", work >= PARALLEL_MIN_WORK):
        _try(sch.parallel, outer)
    name, var = sch.get(anchor).name_hint, sch.get(p).loop_var.name
    sch.loop_partition(p, [body, None])
    whole, tail = (sch.get_sblock(f"{name}_{var}{k}") for k in (0, 1))
    # the whole vectors in register tiles of ``mr`` x ``vectors`` accumulators
    p, rc, rh, rw, ci = sch.get_loops(whole)
    room = TAIL_ACCUMULATORS.get(info.lanes, 12) // mr
    vectors = max(d for d in range(1, body // info.lanes + 1)
                  if body // info.lanes % d == 0 and d <= max(room, 1))
    po, pv, pi = sch.split(p, [None, vectors, info.lanes])
    sch.reorder(po, rc, rh, rw, ci, pv, pi)
    _try(sch.unroll, ci)
    _try(sch.unroll, pv)
    _try(sch.vectorize, pi)
    init = sch.decompose_reduction(whole, rc)
    _try(sch.vectorize, sch.get_loops(init)[-1])
    p, rc, rh, rw, ci = sch.get_loops(tail)
    _try(sch.unroll, ci)
    sch.decompose_reduction(tail, rc)
    stored, _rest = sch.loop_partition(sch.get_loops(wb)[-1], [body, None])
    _try(sch.vectorize, sch.split(stored, [None, info.lanes])[1])


#: parallel tasks a pointwise conv's channel tiles must give before the pixel tiles stay
#: inside them: the pool cuts a launch into 4 tasks per thread (``threadpool.c``), so 8 at
#: 2 threads
PIXEL_TASKS = 8


#: bytes under which TVM puts a buffer on the stack (``kMaxStackAlloca``); a larger one, or
#: a "local" one, is a ``TVMBackendAllocWorkspace`` call whose pointer escapes
STACK_BYTES = 1024


def _pixel_split(sch, anchor, info: ScheduleInfo, mr: int, nr: int) -> tuple[int, int]:
    """``(nr, chunks)``: the pixel tile and into how many equal chunks of pixel tiles the
    pointwise conv's parallel loop splits each of its channel-tile tasks (1: none), the
    fewest that give ``PIXEL_TASKS`` tasks in all and divide the tiles (an uneven split
    leaves a predicate TVM scalarises). Why: MNASNet's 16 -> 8 channel conv at 112x112
    (~30 us) is one tile of 8 channels, so its parallel loop had one iteration and the
    second thread nothing to do. The chunk loop sits outside the tile loop, so each task runs
    the 1-thread kernel's loops; but a parallel body is a closure whose pointers LLVM no
    longer knows apart, so an accumulator in a workspace buffer was zeroed and stored every
    tile (1 thread 30.8 -> 38.4 us); a chunked tile is kept under ``STACK_BYTES`` (8 x 16
    floats, a stack array LLVM keeps in registers). One process, loaded 2-core box, min of
    8 blocks, us old -> new, 1 / 2 threads: 16 -> 8 at 112x112 30.2 / 30.3 -> 28.4 / 15.0,
    96 -> 24 at 56x56 135 / 91 -> 125 / 64, 48 -> 48 at 16x16 11.4 / 7.3 -> 10.3 / 6.6;
    unchunked, the stack tile alone: 48 -> 48 at 14x14 9.9 / 10.0 -> 9.5 / 9.5, 48 -> 144
    28.1 / 28.1 -> 26.7 / 26.7."""
    b, c = sch.get_loops(anchor)[:2]
    tasks = _extent(sch, b) * (_extent(sch, c) // mr)
    if tasks >= PIXEL_TASKS:
        return nr, 1
    hw = 1
    for lp in sch.get_loops(anchor)[2:4]:
        hw *= _extent(sch, lp)
    work = tasks * mr * hw * _extent(sch, sch.get_loops(anchor)[4])
    if not info.knobs.get("parallel", work >= PARALLEL_MIN_WORK):
        return nr, 1
    bits = tvm.DataType(sch.get(anchor).writes[0].source.dtype).bits
    tile = nr if mr * nr * bits // 8 < STACK_BYTES else info.lanes
    tiles = -(-hw // tile)
    want = -(-PIXEL_TASKS // tasks)
    chunks = next((d for d in range(want, tiles // 2 + 1) if tiles % d == 0), 1)
    return (tile, chunks) if chunks > 1 and mr * tile * bits // 8 < STACK_BYTES else (nr, 1)


def _spatial_schedules(sch, func, info: ScheduleInfo, tile) -> bool:
    """Whether the pixel-GEMM template goes through on ``sch``, tried on a copy. Why: a
    primitive refusing the group half-way (a layout transform over a fused producer it
    cannot see through) would leave the kernel as plain loops instead of the
    channel-vector template."""
    trial = sch.copy()

    def attempt():
        _schedule_conv2d_spatial(trial, func, _find(trial, "anchor_conv2d"), info, *tile)
        return True
    return bool(_try(attempt))


def schedule_conv2d(sch, func, info: ScheduleInfo) -> bool:
    anchor = _find(sch, "anchor_conv2d")
    if anchor is None:
        return False
    tile = _spatial_tile(sch, anchor, info)
    if tile is not None and _spatial_schedules(sch, func, info, tile):
        _schedule_conv2d_spatial(sch, func, anchor, info, *tile)
        return True
    from .conv2d_rows import rows_tile, schedule_conv2d_rows

    rows = rows_tile(sch, anchor, info)
    if rows is not None:
        schedule_conv2d_rows(sch, func, anchor, info, *rows)
        return True
    channel_major = _pads_per_channel_block(sch, func, info)
    _schedule_channel_vectors(sch, func, anchor, info, channel_major)
    return True


def _schedule_channel_vectors(sch, func, anchor, info: ScheduleInfo,
                              channel_major: bool = False) -> bool:
    """The channel-vector template: register tiles of one channel vector x ``reg_n``
    output columns, parallel over (batch, output row, channel block), or with
    ``channel_major`` over (batch, channel block) with the rows inside each task; whether
    the padding went inside the parallel tasks (``_pad_per_task``). An unpadded 1x1 conv
    runs over (batch, channel block, output row) instead: each thread then writes whole
    channel planes (on a 7x7 plane one row is 28 bytes, so with rows outermost the two
    threads wrote parts of the same cache line of every channel) and a block's weights
    stay in cache over its rows (one process, loaded box, min of 6 blocks, us, 1 / 2
    threads: 96 -> 576 at 7x7 62.2 / 59.3 -> 57.1 / 30.8, 160 -> 960 157 -> 149 at 1 thread;
    576 -> 96 at 7x7, 480 -> 80 at 14x14 and 128 -> 16 at 55x55 the same)."""
    b, c, i, j, rc, rh, rw = sch.get_loops(anchor)
    channel_first = channel_major or (
        _extent(sch, rh) == _extent(sch, rw) == 1 and _find(sch, "pad_") is None)
    oc, ow = _extent(sch, c), _extent(sch, j)
    if ow < 4 and _extent(sch, i) >= 8:
        # a column image (H x 1: a 1-D signal laid out along H, as JAX exports Conv1D):
        # register-tile the rows instead, or every weight vector is used once per load
        i, j = j, i
        ow = _extent(sch, j)
    ic = _extent(sch, rc)
    work = _extent(sch, b) * _extent(sch, i) * oc * ow * ic * _extent(sch, rh) * _extent(sch, rw)
    bn, reg_n, rc_bn = _conv_tile(oc, ow, ic, info)
    co, ci = sch.split(c, [None, bn])
    jo, ji = sch.split(j, [None, reg_n])
    rco, rci = sch.split(rc, [None, rc_bn])
    sch.reorder(b, *((co, i) if channel_first else (i, co)), rco, jo, rci, rh, rw, ji, ci)
    wb = sch.cache_write(anchor, 0, "local")
    # the register tile must have the vector lane (channel) innermost, or vector stores
    # into it become scatters
    _try(sch.transform_layout, anchor, ("write", 0),
         lambda vb, vc, vi, vj: (vb, vc // bn, vi, vj, vc % bn))
    sch.reverse_compute_at(wb, i if channel_first else co)
    _epilogue_into(sch, func, wb)
    outer = sch.fuse(b, co) if channel_major else sch.fuse(b, *((co, i) if channel_first
                                                                 else (i, co)))
    if info.knobs.get("parallel", work >= PARALLEL_MIN_WORK):
        _try(sch.parallel, outer)  # before decompose_reduction: after it, TVM refuses
    if info.knobs.get("unroll", True):
        _try(sch.unroll, ji)
    _try(sch.vectorize, ci)
    init = sch.decompose_reduction(anchor, rco)
    init_loops = sch.get_loops(init)
    if init_loops:
        _try(sch.vectorize, init_loops[-1])
    pad = _find(sch, "pad_")
    if pad is None:
        return False
    if _pad_per_task(sch, pad, outer, 1 if channel_major else PAD_RECOMPUTE):
        return True
    _parallel_rows(sch, pad)
    return False


#: fewest parallel tasks the channel-major order (``_pads_per_channel_block``) may leave
CHANNEL_TASKS = 4


def _pads_per_channel_block(sch, func, info: ScheduleInfo) -> bool:
    """Whether a padded conv takes the channel-major order: when its channel-block tasks
    pad exactly the image once between them (each block reads only its own input channels:
    a grouped conv with whole groups per block), in at least ``CHANNEL_TASKS`` tasks. Why:
    in the row order a stride-1 grouped conv's row task would pad 3 rows, so its padding
    stayed a pass of its own on one thread before the parallel body, and the other thread
    read its half of the padded image from the first core's cache: in the idle roofline
    sweep these convs took as long at 2 threads as at 1 (440x7x7 g55: 56 and 53 us). Per
    channel block, each task pads its own plane and keeps it in its core's L1 for all the
    rows. One process, loaded 2-core box, min us old -> new, 1 thread: 440x7x7 g55
    46.4 -> 41.7, 208x14x14 g26 78.9 -> 66.7, 104x28x28 g13 141 -> 132, stride 2
    208x28x28 g26 95.7 -> 76.2, 440x14x14 g55 56.1 -> 46.3; 2 threads: 208x14x14 62 -> 36,
    104x28x28 109 -> 71. Tried on a copy, so any other conv is left as it was."""
    if _find(sch, "pad_") is None:
        return False
    trial = sch.copy()
    if not _try(_schedule_channel_vectors, trial, func, _find(trial, "anchor_conv2d"), info,
                True):
        return False
    return _extent(trial, trial.get_loops(_find(trial, "anchor_conv2d"))[0]) >= CHANNEL_TASKS


#: most padded elements the per-task padding (``_pad_per_task``) may write, over the
#: whole padded image: the rows a task shares with its neighbours are padded by each
PAD_RECOMPUTE = 2


def _pad_per_task(sch, pad, outer, limit: int = PAD_RECOMPUTE) -> bool:
    """Pad inside each parallel task the part of the image the task reads, when the tasks
    together pad at most ``limit`` times the image; whether it did. Why: a grouped
    conv's task (one output row of one channel block) reads 8 channels of 3 padded rows, and
    the padding as a pass of its own ran on one thread before the parallel body (below
    ``PARALLEL_MIN_WORK``), so every call the other thread read its half of the padded image
    from the first core's cache: in the idle roofline sweep a stride-2 grouped conv took
    longer at 2 threads than at 1 (440x14x14 g55: 50 -> 65 us; 208x28x28 g26: 93 -> 102
    us). Padded per task, each thread reads only the input (a graph input or a producer's
    output) and writes only its own rows. On a loaded 2-core box the minimum of 40
    interleaved blocks was the same either way (1 thread 53.6 / 53.9 us, 2 threads 33.5 /
    33.4 us), so the gain is the idle sweep's to show. A grouped conv now takes the
    channel-major order instead (``_pads_per_channel_block``), whose tasks pad with
    ``limit`` 1; a conv that reads every channel in every task (not grouped) keeps the
    separate pass."""
    if sch.get(outer).kind != tvm.tirx.ForKind.PARALLEL:
        return False
    whole = 1
    for lp in sch.get_loops(pad):
        whole *= _extent(sch, lp)
    trial = sch.copy()

    def attempt():
        trial.compute_at(pad, outer)
        return True
    if not _try(attempt):
        return False
    loops = trial.get_loops(pad)
    at = next(k for k, lp in enumerate(loops) if trial.get(lp).same_as(trial.get(outer)))
    per_task = 1
    for lp in loops[at + 1:]:
        per_task *= _extent(trial, lp)
    if min(whole, per_task) < 1 or _extent(sch, outer) * per_task > limit * whole:
        return False
    sch.compute_at(pad, outer)
    return True


def _parallel_rows(sch, block) -> None:
    """Parallel over the leading loops of a copy-like block, rows left to LLVM."""
    loops = sch.get_loops(block)
    if len(loops) >= 3:
        outer = sch.fuse(*loops[:-1])
        if _extent(sch, outer) * _extent(sch, loops[-1]) >= PARALLEL_MIN_WORK:
            _try(sch.parallel, outer)


#: blocks a template keeps materialised instead of inlining: conv padding, and for
#: activation x activation matmuls a transposed operand (attention's K^T): inlined, every
#: vector load of B along j would be a strided gather (ViT's QK^T ran at 5 GFLOP/s)
KEEP = {"conv2d": ("pad_",), "depthwise": ("pad_",), "pool": ("pad_",),
        "matmul": ("T_transpose",), "conv_nd": ("pad_", "wpack_")}


def _lazy(module: str, name: str, *bound):
    """``module.name`` (a template or knob space in its own module, which builds on this
    module's helpers), imported on first use; ``bound`` arguments follow the caller's."""
    def call(sch, *args):
        import importlib
        fn = getattr(importlib.import_module(f"{__package__}.{module}"), name)
        return fn(sch, *args, *bound)
    return call


#: the template of each kernel kind (``Lowering.kind``); other kinds are elementwise
TEMPLATES = {
    "dense": schedule_dense,
    "matmul": schedule_batch_matmul,
    "conv2d": schedule_conv2d,
    "depthwise": _lazy("window_schedule", "schedule_window", "anchor_depthwise"),
    "pool": _lazy("window_schedule", "schedule_window", "anchor_pool"),
    "tconv": _lazy("window_schedule", "schedule_window", "anchor_tconv"),
    "reduce": _lazy("rows_schedule", "schedule_rows"),
    "softmax": _lazy("rows_schedule", "schedule_rows"),
    "conv_nd": _lazy("conv_nd_schedule", "schedule_conv_nd"),
}


# -- knob spaces (nnvm tune) ------------------------------------------------------------------

def _choices(first, *others) -> list:
    """``first`` (the heuristic's choice), then the other distinct choices in order."""
    out = [first]
    for c in others:
        if c not in out:
            out.append(c)
    return out


def _divisors(extent: int, candidates) -> list[int]:
    return [c for c in candidates if 0 < c <= extent and extent % c == 0]


def _dense_space(sch, info: ScheduleInfo) -> dict:
    i, j, k = sch.get_loops(_find(sch, "anchor_dense"))
    m, n, kk = _extent(sch, i), _extent(sch, j), _extent(sch, k)
    nr = _dense_nr(n, info)
    mr = _dense_mr(m, nr, info)
    return {"nr": [nr] if info.dense_block else
            _choices(nr, *_divisors(n, (2 * info.lanes, info.lanes, 8))),
            "mr": _choices(mr, *_divisors(m, (1, 2, 3, 4, 6, 8, 12, 16))),
            "kc": _choices(_dense_kc(m, kk, mr, nr), 0,
                           *[d for d in _divisors(kk, (64, 128, 256, 512)) if d < kk]),
            "parallel": _choices(m * n * kk >= PARALLEL_MIN_WORK, True, False)}


def _matmul_space(sch, info: ScheduleInfo) -> dict:
    *_, i, j, _k = sch.get_loops(_find(sch, "anchor_matmul"))
    m, n = _extent(sch, i), _extent(sch, j)
    mr, nr = _matmul_tile(m, n, info)
    uneven = (4, 8) if m >= 16 and not _writes_a_slice(sch) else ()
    return {"mr": _choices(mr, *_divisors(m, (2, 3, 4, 6, 8)), *uneven),
            "nr": _choices(nr, *_divisors(n, (2 * info.lanes, info.lanes, 8)),
                           *((info.lanes,) if n >= 2 * info.lanes else ()))}


def _conv2d_space(sch, info: ScheduleInfo) -> dict:
    from .conv2d_rows import rows_tile

    anchor = _find(sch, "anchor_conv2d")
    _b, c, i, j, rc, _rh, _rw = sch.get_loops(anchor)
    oc, oh, ow, ic = _extent(sch, c), _extent(sch, i), _extent(sch, j), _extent(sch, rc)
    if ow < 4 and oh >= 8:  # the column image of schedule_conv2d: rows are the tile axis
        ow = oh
    bn, reg_n, rc_bn = _conv_tile(oc, ow, ic, info)
    return {"bn": [bn] if info.conv_block else
            _choices(bn, *_divisors(oc, (info.lanes, 2 * info.lanes, 8))),
            "reg_n": _choices(reg_n, *_divisors(ow, (4, 6, 7, 8, 12, 14, 16, 28)),
                              *((8, 16) if ow >= 16 else ())),
            "rc_bn": _choices(rc_bn, *_divisors(ic, (4, 8, 16, 32, 64, ic))),
            "unroll": [True, False],
            **({"spatial": _choices(_spatial_tile(sch, anchor, info) is not None, True, False)}
               if _spatial_tile(sch, anchor, info, possible=True) else {}),
            **({"rows": [True, False]} if rows_tile(sch, anchor, info, possible=True) else {})}


SPACES = {"dense": _dense_space, "matmul": _matmul_space, "conv2d": _conv2d_space,
          "depthwise": _lazy("window_schedule", "window_space", "anchor_depthwise"),
          "pool": _lazy("window_schedule", "window_space", "anchor_pool"),
          "tconv": _lazy("window_schedule", "window_space", "anchor_tconv"),
          "reduce": _lazy("rows_schedule", "rows_space"),
          "softmax": _lazy("rows_schedule", "rows_space"),
          "conv_nd": _lazy("conv_nd_schedule", "conv_nd_space")}


def knob_space(func, info: ScheduleInfo) -> dict[str, list]:
    """The knobs the template of ``info.kind`` reads for this kernel, each a list of valid
    choices with the heuristic's own choice first (so the first of every list is the untuned
    kernel): the search space of ``nnvm tune``. ``{}`` when the kernel has no template with
    knobs (elementwise, extern kernels) or its anchor is not where the template expects."""
    space = SPACES.get(info.kind)
    if space is None:
        return {}
    sch = s_tir.Schedule(func)
    if _try(sch.get_sblock, "root") is None:
        return {}
    inline_all(sch, func, KEEP.get(info.kind, ()))
    found = _try(space, sch, info)
    return {k: v for k, v in (found or {}).items() if v}


def schedule(func, info: ScheduleInfo):
    """Schedule one group's PrimFunc; returns the scheduled PrimFunc."""
    sch = s_tir.Schedule(func)
    if _try(sch.get_sblock, "root") is None:
        return func  # an extern kernel (recurrent_loop): its TIR is scheduled as written
    inline_all(sch, func, KEEP.get(info.kind, ()))
    template = TEMPLATES.get(info.kind)
    done = template is not None and bool(_try(template, sch, func, info))
    info.applied = done
    if not done:  # elementwise / injective, and the fallback of every template
        outs = _output_buffers(sch.mod['main'])
        for b in _blocks(sch):
            if _writes_output(sch, b, outs) and not _is_reduction(sch, b):
                if not _try(_schedule_pieces, sch, b, info.lanes):
                    _try(_parallel_vectorize, sch, b, info.lanes, info.kind == "elemwise")
            elif _is_reduction(sch, b):
                loops = sch.get_loops(b)
                spatial = [lp for lp, iv in zip(loops, sch.get(b).iter_vars)
                           if int(iv.iter_type) == 0]
                work = 1
                for lp in loops:
                    work *= max(_extent(sch, lp), 1)
                if spatial and _extent(sch, spatial[0]) > 1 and work >= PARALLEL_MIN_WORK:
                    _try(sch.parallel, spatial[0])
    return _overlap_tiles(sch.mod["main"])
