"""ONNX ``lstm``/``gru``/``rnn`` over a whole sequence as ONE kernel: the time loop in TIR.

Why: a recurrence cannot be written as a TE expression (step ``t`` reads step ``t - 1``),
so sequence models used to run their recurrent layer in NumPy on the host: silero VAD over
512 frames ran at 12x onnxruntime on ``llvm``, the CNN+LSTM OCR model had its bidirectional
512-unit LSTM on the host. Here the node becomes a TE ``extern`` whose body is written
directly in TIR (TVM's IR builder), in the order onnxruntime's CPU kernel runs it:

1. the input projection ``X W^T + Wb`` of every step is one GEMM before the time loop (it
   does not depend on the state);
2. a serial loop over time steps: the recurrent GEMV ``h R^T + Rb``, then the gate
   arithmetic, vectorised over hidden units (each gate padded to ``Hp``, a multiple of the
   vector width), writing ``Y`` and the carried state.

The weights reach the kernel as the model stores them (rows contiguous in ``k``). When
the hidden size and ``k`` are whole vectors, products run as tiles of ``lanes`` weight rows
(one vector of partial sums per row, then a shuffle reduction that leaves one vector of
``lanes`` columns, ``gemm_dots``): nothing is transposed per call. Transposing the weights
into column panels every call (the earlier form for 8 steps and more) read and wrote them
once more per call, which on a 128-unit LSTM over 8 steps outgrew L2 and cost more than
the steps (81 -> 33 us, onnxruntime 39 us); on a 512-unit bidirectional LSTM over 20 steps
9.8 -> 3.7 ms at 1 thread (onnxruntime 3.2 ms; all on a loaded 2-core box). That layer
streams its 4 MB recurrent matrix per step and direction from L3: 168 MB a call at 1
thread, where the roofline counts the 17 MB of compulsory traffic. With the matrix folded
into L1 (a timing probe, wrong results) its time loop ran 40% faster, and the idle sweep's
3.46 ms is about 63 GB/s of that stream, more than the sweep's own cache-bandwidth probe
reaches at 17 MB (26-45 GB/s): it is bound by L3, and onnxruntime is no faster. Tried and
dropped (one process A/B, loaded box): reading each weight row whole, in memory order (one
sequential stream a step, but a load of ``h`` per FMA: 4-9% slower); cutting the traffic by
reversed tile order (below: 0-3%); column panels with every column's accumulator in
registers for the 128-unit matrices that fit L2 (7% and 35% slower than the dot tiles).
Only the input projection of many rows (``DOTS_MAX_ROWS``) still takes panels, as the dots
re-read the weights per row; sizes the dot tiles do not fit take panels (long sequences)
or dot products reduced by halving.

Weights larger than L2 are packed at LOAD instead (``packed_weights``: ``runtime.packing``'s
``recurrent_panels``, blocks of 64 or 128 weight rows, each block one contiguous run over
``k``; ``gemm_packed``): per ``k`` a broadcast of the input and a few vector FMAs into
register accumulators, no reductions, and the input projection reads each block once for
all rows (its dot tiles read ``W`` once per 4 rows: 20 MB a direction, from DRAM when the
recurrent stream had evicted it from L3). On the 20-step bidirectional 512-unit layer,
one-process interleaved A/B (2-core Zen 4 VM, load about 3, 8 blocks, best block): 1
thread 3.47 -> 2.69 ms (``R`` alone packed 3.31), 2 threads 1.79 -> 1.30 ms; its 40 step
products alone 1.80 ms (45 us a 4 MB GEMV, about 93 GB/s, the sweep's cache probe reaching
97 GB/s at 4 MB), its projection alone 0.80 ms (about 105 GFLOP/s). The 128-unit layers
(their matrices fit L2) and fused step units keep the weights as stored.

A layer of one batch entry with both weights packed (and its directions on threads of
their own, or one thread) computes its input projection in chunks of a few steps' rows
(``overlapped_step``): the first chunk before the steps, each later one during the steps of
the chunk before it, a block of ``W`` paired with each block of ``R`` in ONE ``k`` loop.
Why: the steps wait on ``R`` streaming from L3 (about 93 GB/s a core) with the FMA units
about half idle, the projection is bound by its FMAs; one after the other they add up.
Measured on the 20-step 512-unit bidirectional layer before (one process, load 0.5-1,
best of 4 blocks): 1 thread 2.67 ms = steps 1.81 + projection 0.80; 2 threads 1.46 =
steps 0.92 + projection 0.41 per core: the steps scale to both cores (each core still
streams at about 93 GB/s, L3 is not the shared limit), so at 2 threads too the only
lever left was the projection's time. Chunks of 5 rows, ``W`` in blocks of 2 vectors
(``OVERLAP_*``), one-process interleaved A/B (2-core Zen 4 VM): 2 threads 1.26 -> 1.14 ms
best, 1.33 -> 1.21 ms median of 8 block medians (load 1.8); 1 thread (``taskset``) 2.61 ->
2.38 ms best, 2.90 -> 2.76 best block median (load 2.1). Each chunk re-reads ``W`` (4 MB a
direction) and the last chunk's steps overlap nothing, which is what keeps it from the
steps' 0.92 ms alone.

Both directions of a bidirectional layer run in parallel when the thread pool has two
workers and the work is large enough; a one-direction layer splits its input projection's
rows and, when long enough (``STEP_SPLIT_MIN_WORK``), each step's recurrent product across
threads. On dot tiles (unless a gate reads another unit's product: GRU with its reset
before R) the whole time loop is ONE parallel launch (``claimed_steps``): each step's units
are cut into one part per thread, and every task loops over the steps, claiming parts and
computing their products AND gates (``step_units``, the state double-buffered), then
waiting for the step's other parts (``threadpool.c``'s ``nnvm_step_*``). Otherwise a
parallel launch per step splits the product (the pool's workers spin between back-to-back
launches, and a descheduled worker only leaves its tasks to the caller), its gates after
it on the calling thread. Why not a barrier that waits for every task: the pool lets one
thread run the tasks of a launch in turn, so a task waiting for all the others could wait
for one its own thread has yet to run; a part is only waited for once it is claimed.
Every ONNX attribute the reference kernel
(``nnvm.ops.sequence``) knows is kept: per-direction activations with alpha/beta, ``clip``,
``layout`` 1, ``sequence_lens`` (a step past a batch entry's length keeps its state and
outputs 0), LSTM ``input_forget`` and peepholes, GRU ``linear_before_reset``. float16
inputs accumulate in float32.
"""

from __future__ import annotations

from tvm import te, tirx
from tvm.script.ir_builder import IRBuilder
from tvm.tirx.script.builder import ir as T

from .lowering import relu
from .schedules import PARALLEL_MIN_WORK

GATES = {"lstm": 4, "gru": 3, "rnn": 1}
DEFAULT_ACTS = {"lstm": ("Sigmoid", "Tanh", "Tanh"), "gru": ("Sigmoid", "Tanh"),
                "rnn": ("Tanh",)}
#: ONNX activation -> (fn(x, alpha, beta, const), default alpha, default beta): alpha/beta
#: are consumed in activation order, only by the activations that take them (as the
#: reference and onnxruntime do)
ACTS = {
    "relu": (lambda x, a, b, c: relu(x), None, None),
    "tanh": (lambda x, a, b, c: _tanh(x), None, None),
    "sigmoid": (lambda x, a, b, c: te.sigmoid(x), None, None),
    "affine": (lambda x, a, b, c: c(a) * x + c(b), 1.0, 0.0),
    "leakyrelu": (lambda x, a, b, c: tirx.Select(x >= c(0), x, c(a) * x), 0.01, None),
    "thresholdedrelu": (lambda x, a, b, c: tirx.Select(x > c(a), x, c(0)), 1.0, None),
    "scaledtanh": (lambda x, a, b, c: c(a) * _tanh(c(b) * x), 1.0, 1.0),
    "hardsigmoid": (lambda x, a, b, c: te.min(te.max(c(a) * x + c(b), c(0)), c(1)), 0.2, 0.5),
    "elu": (lambda x, a, b, c: tirx.Select(x >= c(0), x, c(a) * (te.exp(x) - c(1))), 1.0,
            None),
    "softsign": (lambda x, a, b, c: x / (c(1) + te.abs(x)), None, None),
    "softplus": (lambda x, a, b, c: relu(x) + te.log(c(1) + te.exp(-te.abs(x))), None, None),
}


def _tanh(x):
    from .lowering import _tanh as accurate_tanh  # (Taylor series near 0, NaN kept)

    return accurate_tanh(x)


def unknown_activation(kind: str, attrs) -> str | None:
    """The first activation name the kernel does not know, or None."""
    for name in attrs.get("activations") or ():
        if name.lower() not in ACTS:
            return name
    return None


def activations(kind: str, attrs, ndir: int) -> list[list[tuple[str, float, float]]]:
    """Per direction, the ``(name, alpha, beta)`` of each activation slot."""
    names = [n.lower() for n in (attrs.get("activations") or ())] or \
        [n.lower() for n in DEFAULT_ACTS[kind]] * ndir
    per = len(DEFAULT_ACTS[kind])
    if len(names) == per and ndir == 2:
        names = names * 2
    alphas = list(attrs.get("activation_alpha") or ())
    betas = list(attrs.get("activation_beta") or ())
    out = []
    for name in names:
        _, da, db = ACTS[name]
        a = alphas.pop(0) if da is not None and alphas else da
        b = betas.pop(0) if db is not None and betas else db
        out.append((name, a, b))
    return [out[i * per:(i + 1) * per] for i in range(ndir)]


def input_slots(kind: str, attrs) -> list[str]:
    """The node's input names in order (the ``use_*`` attributes switch optional ones on)."""
    out = ["X", "W", "R"]
    for flag, name in (("use_bias", "B"), ("use_sequence_lens", "sequence_lens"),
                       ("use_initial_h", "initial_h")):
        if attrs.get(flag):
            out.append(name)
    if kind == "lstm":
        out += ["initial_c"] if attrs.get("use_initial_c") else []
        out += ["P"] if attrs.get("use_peepholes") else []
    return out


#: input rows (steps x batch) below which the input projection takes ``gemm_dots`` on the
#: weights as stored rather than transposing them into panels: the dots re-read the
#: weights per row, the transpose reads and writes them once per call (on a 512-unit
#: bidirectional LSTM over 20 steps the dots took 2.2 ms where transpose and panels took
#: 9 ms; on a 128-unit GRU over 64 steps the panels won, 190 vs 240 us)
DOTS_MAX_ROWS = 32

#: sequence length from which the recurrent weights are transposed into column panels once
#: per call (about the cost of a few steps) instead of read as rows by dot products
PANEL_MIN_STEPS = 8

#: recurrent multiply-adds of one step (gates x hidden x hidden) from which a layer whose
#: directions do not run in parallel splits each step's product across threads, and of the
#: whole layer (steps x batch x that) from which it pays: a launch per step costs well under
#: a microsecond while the pool's workers spin between back-to-back launches, but a layer
#: of one or a few steps would meet sleeping workers (a per-frame LSTM step ran 3x slower on
#: 2 threads with 1 << 15 of work)
STEP_SPLIT_MIN_WORK = 1 << 15

#: tasks of the one launch of ``claimed_steps``: the pool cuts a launch into 4 tasks a
#: thread and deals them out in blocks, so 8 puts a task at the front of each of two
#: threads' blocks (and of more threads' through stealing); a task beyond the step parts
#: finds the steps done and ends after two calls
STEP_TASKS = 8


def _ceil(n: int, m: int) -> int:
    return -(-n // m) * m


def _tile(n: int, prefs) -> int:
    return next((p for p in prefs if n % p == 0), 1)


def _shuffles(n: int, m: int) -> tuple[list[int], list[int]]:
    """The two shuffles of a pair ``(a, b)`` of ``n``-lane vectors that swap bit ``m`` of
    the lane index with the pair's member: lane ``c`` of the first is ``a[c]`` or
    ``b[c - m]`` as bit ``m`` of ``c`` is clear or set, of the second ``a[c + m]`` or
    ``b[c]``."""
    lo = [(n if c & m else 0) + (c & ~m) for c in range(n)]
    hi = [(n if c & m else 0) + (c | m) for c in range(n)]
    return lo, hi


def registers(count: int, shape: tuple, dtype: str) -> list:
    """``count`` local buffers of ``shape``, each its own allocation, for values meant to
    live in registers. Why not one tile of them all: TVM places a local allocation of 1 KB
    or more (``kMaxStackAlloca``) in a workspace block from the runtime, and LLVM cannot
    tell that block from the buffers the kernel reads (no ``noalias``), so a 16 x 16 float
    tile kept its accumulators in memory and cost a workspace call per kernel call (or per
    parallel task); small allocations become stack slots that LLVM promotes to registers."""
    return [T.alloc_buffer(shape, dtype) for _ in range(count)]


def _local_tile(vectors: list, dtype: str, n: int):
    """``vectors`` stored into local vectors (unrolled, constant offsets: LLVM keeps them in
    registers); a stage read from them shares each vector instead of copying its
    expression into every use."""
    full = tirx.Ramp(0, 1, n)
    regs = registers(len(vectors), (n,), dtype)
    for reg, vec in zip(regs, vectors):
        T.buffer_store(reg, vec, [full])
    return [reg[full] for reg in regs]


def shuffle_transpose(rows: list, dtype: str) -> list:
    """The columns of the square tile whose rows are the vectors ``rows`` (``n`` lanes each,
    ``n`` a power of two), as ``n`` vectors: ``log2(n)`` stages of two-input shuffles, stage
    ``m`` swapping bit ``m`` of the row and column index (64 ``vpermt2ps`` for a 16 x 16
    float tile, where a transpose through memory reads 256 scalars)."""
    n = len(rows)
    cur, m = _local_tile(rows, dtype, n), n // 2
    while m:
        lo, hi = _shuffles(n, m)
        nxt = list(cur)
        for r in range(n):
            if not r & m:
                pair = [cur[r], cur[r | m]]
                nxt[r], nxt[r | m] = tirx.Shuffle(pair, lo), tirx.Shuffle(pair, hi)
        cur, m = _local_tile(nxt, dtype, n), m // 2
    return cur


def shuffle_sums(rows: list, dtype: str, n: int):
    """One vector whose lane ``r`` is the sum of the lanes of ``rows[r]`` (``len(rows)``
    vectors of ``n`` lanes, both powers of two, ``len(rows) <= n``): the transpose's stages
    with each pair's two shuffles added, halving the vectors per stage (15 shuffle pairs
    for 16 rows, where reducing each row by halves takes 64 extracts and adds and leaves 16
    scalars to store); fewer rows than lanes end with halves of the one vector added."""
    cur, m = _local_tile(rows, dtype, n), len(rows) // 2
    while m:
        lo, hi = _shuffles(n, m)
        cur = _local_tile([tirx.Shuffle([cur[r], cur[r | m]], lo) +
                           tirx.Shuffle([cur[r], cur[r | m]], hi) for r in range(m)], dtype, n)
        m //= 2
    vec, width = cur[0], n
    while width > len(rows):
        width //= 2
        vec = tirx.Shuffle([vec], list(range(width))) + \
            tirx.Shuffle([vec], list(range(width, 2 * width)))
    return vec


def _paths(kind, attrs, seq, batch, n_in, lanes, threads_ok=True):
    """``(parallel_dirs, parallel_rows, split_steps, fused_steps)``: how a layer of ``seq``
    steps x ``batch`` over ``n_in`` inputs runs (the kernel and ``packed_weights`` agree)."""
    hid, g = int(attrs["hidden_size"]), GATES[kind]
    ndir = 2 if attrs.get("direction") == "bidirectional" else 1
    cols = g * _ceil(hid, lanes)
    work = seq * batch * cols * (n_in + hid)
    parallel_dirs = threads_ok and ndir == 2 and work >= PARALLEL_MIN_WORK
    # the input projection of a layer whose directions do not run in parallel (one
    # direction, or too little work) splits its rows instead: it does not depend on the
    # state, and is half the multiply-adds of a GRU whose input is as wide as its state
    # (64 steps of 128 units: 190 us at 1 and at 2 threads before)
    parallel_rows = threads_ok and not parallel_dirs and \
        seq * batch * cols * n_in >= PARALLEL_MIN_WORK
    # ... and each step's recurrent product too (``recurrent``): the steps are serial,
    # but a step's weight tiles are independent (a 64-step 128-unit GRU spends about 2
    # of its 3 us per step there, at 1 and at 2 threads before)
    step = g * hid * hid
    split_steps = threads_ok and not parallel_dirs and \
        step >= STEP_SPLIT_MIN_WORK and seq * batch * step >= PARALLEL_MIN_WORK
    # a split step on dot tiles whose gates read no product of another unit's gate (all
    # but the GRU with its reset before R): each part of a step also computes its own
    # units' gates, all steps in one launch (``claimed_steps``)
    fused_steps = split_steps and hid % lanes == 0 and not (
        kind == "gru" and not attrs.get("linear_before_reset"))
    return parallel_dirs, parallel_rows, split_steps, fused_steps


#: the layout of recurrent weights packed at load (``runtime.packing``): per direction,
#: blocks of ``bn`` weight rows as column panels, each block contiguous over ``k``
PANELS = "recurrent_panels"

#: elements of one direction's weight matrix (``W`` or ``R``) from which it is packed at
#: load: a matrix larger than L2 (1 MB of float32) comes from L3 (or DRAM) on every pass,
#: and as dot tiles it was read in ``lanes`` strided rows, ``R`` once a step and ``W``
#: once per 4 input rows; smaller ones stay in L2 and keep the dot tiles (the 128-unit
#: layers: measured on dot tiles, and read by ``step_units``)
PACK_MIN_ELEMS = 1 << 18

#: vectors of columns in a packed block of ``W`` (the input projection: 4 x up to 6 input
#: rows = 24 accumulators a register tile) and of ``R`` (one state row: 8 accumulators,
#: enough to hide the FMA latency; 4 and 16 were within noise on the 512-unit layer)
INPUT_BLOCK = 4
STEP_BLOCK = 8

#: whether a layer of one batch entry with both weights packed computes its input
#: projection in chunks of rows inside the steps before them (``overlapped_step``; see
#: the module docstring), the chunk sizes tried in order (a chunk re-reads ``W``, and
#: ``chunk x OVERLAP_BLOCK + STEP_BLOCK`` accumulators must fit 24 registers), and the
#: ``W`` block in vectors on that path. Measured at 1 thread on the 20-step 512-unit
#: layer (one process, best of 4-8 interleaved blocks, load 2-3): 5 rows x 2 vectors
#: 2.38 ms, 4 x 4 2.42, 4 x 2 2.50, 10 x 1 2.61, 2 x 4 2.80 (2 threads: 1.40 vs 1.20 for
#: 4 x 4); the projection first, whole: 2.61
OVERLAP = True
OVERLAP_ROWS = (5, 4, 3, 2)
OVERLAP_BLOCK = 2

#: whether ``W`` is packed too (a switch for A/B runs; ``R`` alone: 3.47 -> 3.31 ms)
PACK_INPUT = True


def packed_weights(kind: str, attrs, shapes, lanes: int) -> dict:
    """``{input slot: (layout, block)}`` of the weights the kernel reads packed at load
    (``PANELS``, read by ``gemm_packed``), from the node's attributes and input shapes.

    ``W`` (slot 1) when it outgrows L2 (``PACK_MIN_ELEMS``) and the gates are whole
    vectors; ``R`` (slot 2) likewise, unless the steps are fused step units (one
    direction split across threads: ``step_units`` reads dot tiles of ``R`` as stored;
    ``_paths`` is the kernel's own decision). The block is ``INPUT_BLOCK`` or
    ``STEP_BLOCK`` vectors, or the widest of 8, 4, 2, 1 dividing the hidden size, so a
    gate boundary never falls inside one; an input projection whose rows no 2 to 6
    divide takes 8 vectors (its register tile is then one row: 8 accumulators, not 4);
    a projection run inside the steps (``OVERLAP``: one batch entry, ``R`` packed, not
    split across threads, a chunk of ``OVERLAP_ROWS`` dividing the steps at least twice)
    takes ``OVERLAP_BLOCK`` vectors."""
    if len(shapes) < 3 or shapes[0] is None or len(shapes[0]) != 3 or shapes[2] is None:
        return {}
    hid, g = int(attrs["hidden_size"]), GATES[kind]
    if hid % lanes or tuple(int(v) for v in shapes[2][1:]) != (g * hid, hid):
        return {}
    layout = int(attrs.get("layout", 0))
    xs = [int(v) for v in shapes[0]]
    seq, batch = (xs[0], xs[1]) if layout == 0 else (xs[1], xs[0])

    def block(vectors):
        return next(m * lanes for m in (vectors, 8, 4, 2, 1) if hid % (m * lanes) == 0)
    out = {}
    paths = _paths(kind, attrs, seq, batch, xs[2], lanes)
    pack_r = g * hid * hid >= PACK_MIN_ELEMS and not paths[3]
    if g * hid * xs[2] >= PACK_MIN_ELEMS and PACK_INPUT:
        tiled = any(seq * batch % m == 0 for m in (6, 5, 4, 3, 2))
        overlap = OVERLAP and pack_r and batch == 1 and not paths[2] and not (
            kind == "gru" and not attrs.get("linear_before_reset")) and any(
            seq % r == 0 and seq // r >= 2 for r in OVERLAP_ROWS)
        out[1] = (PANELS, block(OVERLAP_BLOCK if overlap else INPUT_BLOCK if tiled else 8))
    if pack_r:
        out[2] = (PANELS, block(STEP_BLOCK))
    return out


class _Kernel:
    """Emits the TIR of one recurrent node (see the module docstring for the loop order)."""

    def __init__(self, kind, attrs, ins, outs, lanes, threads_ok, packed=None):
        self.kind, self.attrs = kind, attrs
        self.buf = dict(zip(input_slots(kind, attrs), ins))
        self.outs = outs
        x = self.buf["X"]
        self.layout = int(attrs.get("layout", 0))
        xs = [int(d) for d in x.shape]
        self.seq, self.batch = (xs[0], xs[1]) if self.layout == 0 else (xs[1], xs[0])
        self.n_in = xs[2]
        self.ndir = 2 if attrs.get("direction") == "bidirectional" else 1
        self.hid = int(attrs["hidden_size"])
        self.g = GATES[kind]
        self.lanes = lanes
        self.hp = _ceil(self.hid, lanes)
        self.cols = self.g * self.hp
        self.dtype = str(x.dtype)
        self.acc = "float32" if self.dtype == "float16" else self.dtype
        self.acts = activations(kind, attrs, self.ndir)
        clip = attrs.get("clip") or 0.0
        self.clip = float(clip) if clip and clip > 0 else None
        self.parallel_dirs, self.parallel_rows, self.split_steps, self.fused_steps = _paths(
            kind, attrs, self.seq, self.batch, self.n_in, lanes, threads_ok)
        #: ``(layout, block)`` of the weights packed at load (``packed_weights``), by slot
        self.packed = {input_slots(kind, attrs)[i]: spec for i, spec in (packed or {}).items()}
        if "R" in self.packed:  # the packed product is ``recurrent``'s (split steps)
            self.fused_steps = False

    # -- helpers ------------------------------------------------------------------------
    def c(self, v):
        return tirx.const(v, self.acc)

    def load(self, buf, idx):
        v = buf[tuple(idx)]
        if str(buf.dtype) == self.acc:
            return v
        ramp = [i for i in idx if isinstance(i, tirx.Ramp)]  # a vector load: vector cast
        return tirx.Cast(f"{self.acc}x{ramp[0].lanes}", v) if ramp else v.astype(self.acc)

    def x_at(self, t, b, k):
        return self.load(self.buf["X"], (t, b, k) if self.layout == 0 else (b, t, k))

    def state_idx(self, d, b, j):
        return [d, b, j] if self.layout == 0 else [b, d, j]

    def y_idx(self, t, d, b, j):
        return [t, d, b, j] if self.layout == 0 else [b, t, d, j]

    def act(self, d, slot, x):
        """The activation of ``slot`` applied to ``x``."""
        name, a, b = self.acts[d][slot]
        return ACTS[name][0](x, a, b, self.c)

    def clipped(self, x):
        if self.clip is None:
            return x
        return te.min(te.max(x, self.c(-self.clip)), self.c(self.clip))

    def row_tiles(self, n: int, parallel: bool):
        """The loop over ``n`` tiles (a GEMM's row tiles, or a step's weight tiles): split
        across threads when ``parallel`` and there are at least two (tiles write disjoint
        outputs)."""
        return T.parallel(0, n) if parallel and n >= 2 else T.serial(0, n)

    def vec_loop(self, n, fn):
        """``fn(j)`` for j in [0, n): whole vectors, then one shorter vector for the rest."""
        lanes = self.lanes
        if n // lanes:
            with T.serial(0, n // lanes) as jo:
                with T.vectorized(0, lanes) as ji:
                    fn(jo * lanes + ji)
        if n % lanes:
            with T.vectorized(0, n % lanes) as ji:
                fn(n - n % lanes + ji)

    # -- phases ---------------------------------------------------------------------------
    def biases(self, d, bx, bh):
        """The input and recurrent bias rows of direction ``d``, gate-padded (0 without B)."""
        hid, hp = self.hid, self.hp
        bias = self.buf.get("B")
        for half, dst in ((0, bx), (1, bh)):
            with T.serial(0, self.g) as gi:
                def put(j, gi=gi, dst=dst, half=half):
                    v = self.c(0) if bias is None else tirx.Select(j < hid, self.load(
                        bias, (d, half * self.g * hid + gi * hid + tirx.min(j, hid - 1))),
                        self.c(0))
                    T.buffer_store(dst, v, [gi * hp + j])
                self.vec_loop(hp, put)

    def col(self, n):
        """The gate-padded column of weight row ``n`` (gate ``n // H``, unit ``n % H``)."""
        return (n // self.hid) * self.hp + n % self.hid

    def gemm(self, dst, rows, row_of, src, mat, d, n0, n1, k_n, bias, parallel=False):
        """``dst[row_of(r), col(n)] = bias[col(n)] + sum_k src(r, k) mat[d, n, k]`` for
        ``r < rows`` and weight rows ``n0 <= n < n1``: dot products along ``k`` on the
        weights as the model stores them (rows contiguous in ``k``), so nothing is
        repacked per call (a per-call transpose of a 512-unit bidirectional LSTM's 16 MB
        of weights cost more than onnxruntime's whole layer). A register tile of ``mr``
        rows x ``nb`` weight rows of ``lanes`` partial sums, reduced by halving at the end;
        a ``k_n % lanes`` tail is added in scalars."""
        lanes = self.lanes
        kv, tail = k_n // lanes, k_n % lanes
        nb = _tile(n1 - n0, (8, 6, 4, 3, 2, 1) if rows == 1 else (4, 3, 2, 1))
        mr = 1 if rows == 1 else _tile(rows, (2, 1))
        with self.row_tiles(rows // mr, parallel) as ro:
            with T.serial(0, (n1 - n0) // nb) as no:
                (acc,) = registers(1, (mr, nb, lanes), self.acc)
                with T.unroll(0, mr) as ri:
                    with T.unroll(0, nb) as ni:
                        with T.vectorized(0, lanes) as li:
                            T.buffer_store(acc, self.c(0), [ri, ni, li])
                if kv:
                    with T.serial(0, kv) as ko:
                        with T.unroll(0, mr) as ri:
                            with T.unroll(0, nb) as ni:
                                with T.vectorized(0, lanes) as li:
                                    k = ko * lanes + li
                                    T.buffer_store(acc, acc[ri, ni, li] + src(ro * mr + ri, k) *
                                                   self.load(mat, (d, n0 + no * nb + ni, k)),
                                                   [ri, ni, li])
                width = lanes // 2
                while width:
                    with T.unroll(0, mr) as ri:
                        with T.unroll(0, nb) as ni:
                            with T.vectorized(0, width) as li:
                                T.buffer_store(acc, acc[ri, ni, li] + acc[ri, ni, li + width],
                                               [ri, ni, li])
                    width //= 2
                with T.unroll(0, mr) as ri:
                    with T.unroll(0, nb) as ni:
                        n = n0 + no * nb + ni
                        total = acc[ri, ni, 0]
                        for k in range(k_n - tail, k_n):
                            total = total + src(ro * mr + ri, k) * self.load(mat, (d, n, k))
                        T.buffer_store(dst, total + bias[self.col(n)],
                                       [row_of(ro * mr + ri), self.col(n)])

    def dots_fit(self, k_n: int) -> bool:
        """Whether ``gemm_dots`` takes products over ``k_n`` (whole vectors along ``k``, and
        gates of whole vectors, so a tile of ``lanes`` weight rows stays in one gate)."""
        return k_n % self.lanes == 0 and self.hid % self.lanes == 0

    def gemm_dots(self, dst, rows, row_of, src, mat, d, n0, n1, k_n, bias, flip=None,
                  parallel=False, split_tiles=False):
        """``dst[row_of(r), col(n)] = bias[col(n)] + sum_k src(r, k) mat[d, n, k]`` on the
        weights as the model stores them, in tiles of ``mr`` input rows x ``lanes / mr``
        weight rows: one vector of partial sums per pair over ``k`` (each weight vector
        loaded once for the ``mr`` rows: an 8-step input projection went from 18 to about
        10 us with 4 rows a tile), then ``shuffle_sums`` turns each input row's vectors into
        one vector of columns. No per-call transpose: a 128-unit LSTM's two 256 KB
        transposes plus their panels outgrew L2 and cost more than its eight steps.

        ``flip`` (a condition) runs the weight tiles last to first: a recurrence flips
        every other step, so a step starts on the tiles the one before ended on, still in
        L2, instead of on the ones longest evicted (see ``recurrent``). ``split_tiles``
        splits the weight tiles across threads (one state row: no row tiles to split); the
        flip stays over the whole range, so one thread keeps the 1-thread order (its
        2.5% from the last tiles still in L1 on a 64-step GRU) and at two threads each
        half is read by either core from L2 (a matrix that fits L2 fits both)."""
        lanes = self.lanes
        mr = _tile(rows, (4, 2, 1))  # input rows per tile: each weight load serves mr
        nr = lanes // mr  # weight rows per tile: mr x nr vectors of partial sums
        full = tirx.Ramp(0, 1, lanes)
        with self.row_tiles(rows // mr, parallel) as ro:
            with self.row_tiles((n1 - n0) // nr, split_tiles) as no:
                if flip is not None:
                    no = tirx.Select(flip, (n1 - n0) // nr - 1 - no, no)
                n = n0 + no * nr
                acc = [registers(nr, (lanes,), self.acc) for _ in range(mr)]
                for i in range(mr * nr):
                    T.buffer_store(acc[i // nr][i % nr], tirx.Broadcast(self.c(0), lanes),
                                   [full])
                with T.serial(0, k_n // lanes) as ko:
                    k = tirx.Ramp(ko * lanes, 1, lanes)
                    xv = _local_tile([src(ro * mr + ri, k) for ri in range(mr)], self.acc,
                                     lanes)
                    for i in range(nr):
                        wv = self.load(mat, (d, n + i, k))
                        for ri in range(mr):
                            T.buffer_store(acc[ri][i], acc[ri][i][full] + xv[ri] * wv, [full])
                cols = tirx.Ramp(self.col(n), 1, nr)
                for ri in range(mr):
                    total = shuffle_sums([acc[ri][i][full] for i in range(nr)], self.acc,
                                         lanes)
                    T.buffer_store(dst, total + bias[cols], [row_of(ro * mr + ri), cols])

    def gemm_packed(self, dst, rows, row_of, src, slot, d, n0, n1, k_n, bias, flip=None,
                    parallel=False):
        """``dst[row_of(r), n] = bias[n] + sum_k src(r, k) mat[n, k]`` for ``r < rows`` and
        weight rows ``n0 <= n < n1`` of direction ``d``, the weight of input ``slot``
        packed at load into column panels (``PANELS``: ``bn`` weight rows a block, each
        block ONE contiguous run over ``k``): per ``k`` and input row one broadcast of
        ``src`` and ``bn / lanes`` vector FMAs into a register tile of ``mr`` input rows x
        ``bn / lanes`` vectors, no reductions. Blocks are the outer loop: each block is read
        from memory once and from L1/L2 by the other row tiles (the dot tiles read the
        whole matrix once per row tile). ``flip`` runs the blocks last to first (see
        ``recurrent``); ``parallel`` splits the blocks across threads. Gate-padded columns
        are the rows themselves here (``packed_weights`` packs only whole-vector gates)."""
        lanes, mat, bn = self.lanes, self.buf[slot], self.packed[slot][1]
        nv, blocks, first = bn // lanes, (n1 - n0) // bn, n0 // bn
        mr = next(m for m in (6, 5, 4, 3, 2, 1) if rows % m == 0 and m * nv <= 24)
        full = tirx.Ramp(0, 1, lanes)
        with self.row_tiles(blocks, parallel) as bo:
            if flip is not None:
                bo = tirx.Select(flip, blocks - 1 - bo, bo)
            blk = first + bo
            cols = [tirx.Ramp(blk * bn + v * lanes, 1, lanes) for v in range(nv)]
            with T.serial(0, rows // mr) as ro:
                acc = [registers(nv, (lanes,), self.acc) for _ in range(mr)]
                for ri in range(mr):
                    for v in range(nv):
                        T.buffer_store(acc[ri][v], bias[cols[v]], [full])
                with T.serial(0, k_n) as k:
                    xs = [tirx.Broadcast(src(ro * mr + ri, k), lanes) for ri in range(mr)]
                    for v in range(nv):
                        w = self.load(mat, (d, blk, k, tirx.Ramp(v * lanes, 1, lanes)))
                        for ri in range(mr):
                            T.buffer_store(acc[ri][v], acc[ri][v][full] + xs[ri] * w, [full])
                for ri in range(mr):
                    for v in range(nv):
                        T.buffer_store(dst, acc[ri][v][full], [row_of(ro * mr + ri), cols[v]])

    def transpose(self, d, src, dst, k_n, parallel=False):
        """``dst[k, col(n)] = src[d, n, k]``, padding columns 0: the weights as column
        panels, made once per call when the rows (steps) are many enough to repay it.
        In tiles of ``lanes x lanes`` transposed in registers (``shuffle_transpose``):
        gathering a vector of rows per ``k`` cost 3 ns an element (rows 2 KB apart share a
        few L1 sets), and a tile written back column by column from a local array 0.7 ns
        (each column a strided read of scalars), so on a 128-unit LSTM over 8 steps the two
        transposes cost more than all the steps. Sizes no tile divides gather. ``parallel``
        splits the blocks of ``lanes`` columns across threads (a 64-step 128-unit GRU's
        input weights took about 5 us of its 2-thread time on one thread)."""
        hid, hp, lanes = self.hid, self.hp, self.lanes
        blocks = hp // lanes  # column blocks of each gate
        with self.row_tiles(self.g * blocks, parallel) as gj:
            gi, jo = gj // blocks, gj % blocks
            if hid % lanes == 0 and k_n % lanes == 0:
                with T.serial(0, k_n // lanes) as ko:
                    rows = [self.load(src, (d, gi * hid + jo * lanes + r,
                                            tirx.Ramp(ko * lanes, 1, lanes)))
                            for r in range(lanes)]
                    for c, vec in enumerate(shuffle_transpose(rows, self.acc)):
                        T.buffer_store(dst, vec, [ko * lanes + c, tirx.Ramp(
                            gi * hp + jo * lanes, 1, lanes)])
            else:
                with T.serial(0, k_n) as k:
                    with T.vectorized(0, lanes) as ji:
                        j = jo * lanes + ji
                        T.buffer_store(dst, tirx.Select(j < hid, self.load(src, (
                            d, gi * hid + tirx.min(j, hid - 1), k)), self.c(0)),
                            [k, gi * hp + j])

    def gemm_panels(self, dst, rows, row_of, src, k_n, panels, bias, col0, ncols,
                    parallel=False):
        """``dst[row_of(r), col] = bias[col] + sum_k src(r, k) panels[k, col]`` for
        ``r < rows`` and the columns ``[col0, col0 + ncols)`` (whole vectors): a register
        tile of ``mr`` rows x ``nv`` column vectors accumulated over the whole k loop, one
        broadcast of ``src`` per row and k (no horizontal sums: on a 128-unit LSTM over
        512 steps 3x faster than dot products)."""
        lanes = self.lanes
        nvec = ncols // lanes
        nv = _tile(nvec, (4, 3, 2, 1)) if rows > 1 else _tile(nvec, (8, 6, 4, 3, 2, 1))
        mr = _tile(rows, (4, 3, 2, 1)) if nv <= 4 else 1
        with self.row_tiles(rows // mr, parallel) as ro:
            with T.serial(0, nvec // nv) as vo:
                acc = registers(mr, (nv, lanes), self.acc)  # one row's vectors each
                base = col0 + vo * nv * lanes
                for ri in range(mr):
                    with T.unroll(0, nv) as vi:
                        with T.vectorized(0, lanes) as li:
                            T.buffer_store(acc[ri], bias[base + vi * lanes + li], [vi, li])
                with T.serial(0, k_n) as k:
                    for ri in range(mr):
                        s = src(ro * mr + ri, k)
                        with T.unroll(0, nv) as vi:
                            with T.vectorized(0, lanes) as li:
                                T.buffer_store(acc[ri], acc[ri][vi, li] + s * panels[
                                    k, base + vi * lanes + li], [vi, li])
                for ri in range(mr):
                    with T.unroll(0, nv) as vi:
                        with T.vectorized(0, lanes) as li:
                            T.buffer_store(dst, acc[ri][vi, li],
                                           [row_of(ro * mr + ri), base + vi * lanes + li])

    def recurrent(self, d, dst, b, src, n0, n1, panels, bias, flip=None):
        """``dst[b, cols of weight rows n0..n1] = bias + src R^T`` by panels or dots.

        The dots run their tiles backwards where ``flip`` holds (every other step): a
        512-unit LSTM's 4 MB matrix per direction outgrows L2 (1 MB), so a step always in
        one order met only tiles evicted since the step before and streamed all 4 MB from
        L3; alternating, each step begins on the last step's final tiles, still in L2.
        Measured on the 20-step bidirectional layer at 1 thread (loaded 2-core box, old and
        new kernel built twice each in one process): 0-3% faster, within noise, so the
        step is not bound by L3 bandwidth alone. Tried and dropped: a software prefetch of
        the next tile (``llvm.prefetch`` in the k loop made LLVM keep the 16 accumulators
        in memory, a store per FMA: 30-60% slower), staggering each row's k order to
        spread the rows 2 KB apart over L1 sets (slower: a load of ``h`` per FMA), tiles
        of 8 rows and the input projection's loops swapped (both within noise).

        Packed at load (``gemm_packed``, see the module docstring) this is now done for
        matrices beyond L2. The history: what was left was the layout. Blocked column panels (128 columns a block, each block
        one contiguous 256 KB stream over ``k``: a broadcast of ``h[k]``, 8 accumulators,
        no reductions) made each 4 MB GEMV about 10 us faster than these dots (builds of
        20 and 40 steps in one process, loaded box: 137 vs 157 us a step of both
        directions), but transposed once per call (``transpose``) they cost about 340 us
        a direction, so the 20-step layer was no faster (3.32 vs 3.35 ms, best blocks).
        A C model of its 40 GEMVs on this box (flip kept, best of 30) agrees: dot tiles
        52 us per GEMV, the same panels laid out beforehand 42 us, each row read whole 65
        us, rows staggered over L1 sets 50 us, a prefetch of the next tile 66-88 us. So the
        matrix wants packing at load (``Lowering.pack`` and a layout in
        ``runtime.packing``), not per call; disabling ``flip`` cost 6% (3.41 vs 3.20 ms).
        perf on that layer at 1 thread: 62% of its samples in these GEMVs, 38% in the input
        projection (about 1.3 ms, 60% of peak; 0.84 ms when built without the GEMVs:
        likely the recurrent stream evicting ``W`` from L3); its loops swapped (``W`` read once,
        ``x`` re-read) were 3-20% slower, and prefetching ``R`` during it 3-15% slower."""
        if "R" in self.packed:
            self.gemm_packed(dst, 1, lambda row: b, lambda row, k: src(k), "R", d, n0, n1,
                             self.hid, bias, flip, self.split_steps)
        elif self.dots_fit(self.hid):
            self.gemm_dots(dst, 1, lambda row: b, lambda row, k: src(k), self.buf["R"], d,
                           n0, n1, self.hid, bias, flip, split_tiles=self.split_steps)
        elif panels is not None:
            hp = self.hp
            self.gemm_panels(dst, 1, lambda row: b, lambda row, k: src(k), self.hid, panels,
                             bias, n0 // self.hid * hp, (n1 - n0) // self.hid * hp)
        else:
            self.gemm(dst, 1, lambda row: b, lambda row, k: src(k), self.buf["R"], d, n0, n1,
                      self.hid, bias)

    def direction(self, d):
        """The whole layer for direction ``d`` (scratch buffers are its own)."""
        seq, batch, hid, hp, cols = self.seq, self.batch, self.hid, self.hp, self.cols
        acc = self.acc
        bx = T.alloc_buffer((cols,), acc)
        bh = T.alloc_buffer((cols,), acc)
        gx = T.alloc_buffer((seq * batch, cols), acc)  # X W^T + Wb of every step
        gh = T.alloc_buffer((batch, cols), acc)  # h R^T + Rb of this step
        h = T.alloc_buffer((2 * batch if self.fused_steps else batch, hp), acc)
        self._h = h
        cst = T.alloc_buffer((batch, hp), acc) if self.kind == "lstm" else None
        rh = T.alloc_buffer((batch, hp), acc) if self.kind == "gru" and not \
            self.attrs.get("linear_before_reset") else None
        tmp = T.alloc_buffer((5, batch, hp), acc)  # the cell's intermediates
        self.biases(d, bx, bh)
        for name, dst in (("initial_h", h), ("initial_c", cst)):
            if dst is None:
                continue
            src = self.buf.get(name)
            with T.serial(0, batch) as b:
                self.vec_loop(hp, lambda j, b=b, src=src, dst=dst: T.buffer_store(
                    dst, self.c(0) if src is None else tirx.Select(
                        j < hid, self.load(src, self.state_idx(d, b, tirx.min(j, hid - 1))),
                        self.c(0)), [b, j]))
        g_h = self.g * hid
        w = self.buf["W"]
        panels = None
        x_of = lambda row, k: self.x_at(row // batch, row % batch, k)  # noqa: E731
        reverse = self.attrs.get("direction") == "reverse" or d == 1
        t_of = (lambda s: seq - 1 - s) if reverse else (lambda s: s)  # noqa: E731
        chunk = self.overlap_rows()
        if chunk:  # the first chunk's rows now, the others inside the steps before them
            self.gemm_packed(gx, chunk, t_of, lambda row, k: self.x_at(t_of(row), 0, k),
                             "W", d, 0, g_h, self.n_in, bx)
        elif "W" in self.packed:
            self.gemm_packed(gx, seq * batch, lambda row: row, x_of, "W", d, 0, g_h,
                             self.n_in, bx, parallel=self.parallel_rows)
        elif self.dots_fit(self.n_in) and seq * batch < DOTS_MAX_ROWS:
            self.gemm_dots(gx, seq * batch, lambda row: row, x_of, w, d, 0, g_h, self.n_in, bx,
                           parallel=self.parallel_rows)
        elif seq * batch >= PANEL_MIN_STEPS:  # weights as column panels, repaid by the rows
            w_panels = T.alloc_buffer((self.n_in, cols), acc)
            self.transpose(d, w, w_panels, self.n_in, self.parallel_rows)
            self.gemm_panels(gx, seq * batch, lambda row: row, x_of, self.n_in, w_panels, bx,
                             0, cols, self.parallel_rows)
        else:
            self.gemm(gx, seq * batch, lambda row: row, x_of, w, d, 0, g_h, self.n_in, bx,
                      self.parallel_rows)
        if seq >= PANEL_MIN_STEPS and not self.dots_fit(hid):
            panels = T.alloc_buffer((hid, cols), acc)
            self.transpose(d, self.buf["R"], panels, hid, self.parallel_rows)
        lens = self.buf.get("sequence_lens")
        if chunk:
            with T.serial(0, seq) as s:
                t = t_of(s)
                live = None if lens is None else t < lens[0].astype("int32")
                self.overlapped_step(d, s, t_of, chunk, gx, gh, bh, bx)
                self.vec_loop(hid, lambda j: self.cell(d, t, 0, j, gx, gh, h, cst, tmp,
                                                       live))
        elif self.fused_steps:
            self.claimed_steps(lambda s, c0, c1: self.step_units(
                d, s, c0, c1, reverse, lens, gx, gh, h, cst, bh))
        else:
            with T.serial(0, seq) as s:
                t = (seq - 1 - s) if reverse else s
                with T.serial(0, batch) as b:
                    live = None if lens is None else t < lens[b].astype("int32")
                    flip = (s * batch + b) % 2 == 1  # every other GEMV backwards (L2 reuse)
                    self.split_step(d, t, b, gx, gh, h, cst, rh, tmp, live, panels, bh, flip)
        last = seq % 2 * batch if self.fused_steps else 0  # the buffer of the last step
        with T.serial(0, batch) as b:
            self.vec_loop(hid, lambda j, b=b: T.buffer_store(
                self.outs[1], h[last + b, j].astype(self.dtype), self.state_idx(d, b, j)))
            if cst is not None:
                self.vec_loop(hid, lambda j, b=b: T.buffer_store(
                    self.outs[2], cst[b, j].astype(self.dtype), self.state_idx(d, b, j)))

    def overlap_rows(self) -> int:
        """Input rows a chunk of the input projection computed inside the steps before
        them (``overlapped_step``), or 0 where the layer computes it whole first."""
        if not OVERLAP or self.batch != 1 or "W" not in self.packed or \
                "R" not in self.packed or self.split_steps or (
                self.kind == "gru" and not self.attrs.get("linear_before_reset")):
            return 0
        nvw = self.packed["W"][1] // self.lanes
        nvr = self.packed["R"][1] // self.lanes
        return next((r for r in OVERLAP_ROWS if self.seq % r == 0 and self.seq // r >= 2
                     and r * nvw + nvr <= 24), 0)

    def overlapped_step(self, d, s, t_of, r, gx, gh, bh, bx):
        """The recurrent product of step ``s`` (packed ``R``, one state row), its blocks
        paired in order with blocks of the input projection of the NEXT chunk of ``r``
        steps' rows (packed ``W``, ``1 / r`` of that chunk's blocks a step), a pair in ONE
        ``k`` loop so the projection's FMAs run while ``R`` streams in; ``W`` blocks beyond
        the step's ``R`` blocks run after them alone. Every other step runs the ``R``
        blocks backwards (``flip``, as ``recurrent``)."""
        lanes, hid, n_in, seq = self.lanes, self.hid, self.n_in, self.seq
        g_h = self.g * hid
        rmat, wmat = self.buf["R"], self.buf["W"]
        bnr, bnw = self.packed["R"][1], self.packed["W"][1]
        nvr, nvw = bnr // lanes, bnw // lanes
        blocks_r, blocks_w = g_h // bnr, g_h // bnw
        per_step = -(-blocks_w // r)
        c, j = s // r, s % r
        flip = s % 2 == 1
        full = tirx.Ramp(0, 1, lanes)
        h = self._h
        rows = [t_of((c + 1) * r + ri) for ri in range(r)]

        def w_block(i, with_r=None):
            """Block ``j * per_step + i`` of the next chunk's projection (the ``k`` loop
            shared with ``with_r(k)`` over the shorter of ``n_in`` and ``hid``)."""
            wb = j * per_step + i
            with T.If(tirx.all(wb < blocks_w, c + 1 < seq // r)):
                with T.Then():
                    cols_w = [tirx.Ramp(wb * bnw + v * lanes, 1, lanes) for v in range(nvw)]
                    accw = [registers(nvw, (lanes,), self.acc) for _ in range(r)]
                    for ri in range(r):
                        for v in range(nvw):
                            T.buffer_store(accw[ri][v], bx[cols_w[v]], [full])

                    def w_fma(k):
                        xs = [tirx.Broadcast(self.x_at(rows[ri], 0, k), lanes)
                              for ri in range(r)]
                        for v in range(nvw):
                            w = self.load(wmat, (d, wb, k, tirx.Ramp(v * lanes, 1, lanes)))
                            for ri in range(r):
                                T.buffer_store(accw[ri][v], accw[ri][v][full] + xs[ri] * w,
                                               [full])
                    both = min(hid, n_in) if with_r else 0
                    if both:
                        with T.serial(0, both) as k:
                            with_r(k)
                            w_fma(k)
                    if with_r and hid > both:
                        with T.serial(both, hid) as k:
                            with_r(k)
                    if n_in > both:
                        with T.serial(both, n_in) as k:
                            w_fma(k)
                    for ri in range(r):
                        for v in range(nvw):
                            T.buffer_store(gx, accw[ri][v][full], [rows[ri], cols_w[v]])
                if with_r:
                    with T.Else():
                        with T.serial(0, hid) as k:
                            with_r(k)

        with T.serial(0, blocks_r) as bi:
            bo = tirx.Select(flip, blocks_r - 1 - bi, bi)
            cols_r = [tirx.Ramp(bo * bnr + v * lanes, 1, lanes) for v in range(nvr)]
            accr = registers(nvr, (lanes,), self.acc)
            for v in range(nvr):
                T.buffer_store(accr[v], bh[cols_r[v]], [full])

            def r_fma(k):
                hv = tirx.Broadcast(h[0, k], lanes)
                for v in range(nvr):
                    w = self.load(rmat, (d, bo, k, tirx.Ramp(v * lanes, 1, lanes)))
                    T.buffer_store(accr[v], accr[v][full] + hv * w, [full])
            with T.If(bi < per_step):
                with T.Then():
                    w_block(bi, r_fma)
                with T.Else():
                    with T.serial(0, hid) as k:
                        r_fma(k)
            for v in range(nvr):
                T.buffer_store(gh, accr[v][full], [0, cols_r[v]])
        if per_step > blocks_r:
            with T.serial(blocks_r, per_step) as bi:
                w_block(bi)

    def split_step(self, d, t, b, gx, gh, h, cst, rh, tmp, live, panels, bias, flip):
        """Step ``t`` of batch entry ``b``: the recurrent product (its tiles split across
        threads when ``split_steps``), then the gate arithmetic on the calling thread."""
        hid, hp, batch, g_h = self.hid, self.hp, self.batch, self.g * self.hid
        if rh is None:
            self.recurrent(d, gh, b, lambda k: h[b, k], 0, g_h, panels, bias, flip)
        else:  # GRU, reset before R: z and r first, then (r * h) R_h^T
            self.recurrent(d, gh, b, lambda k: h[b, k], 0, 2 * hid, panels, bias)
            self.vec_loop(hid, lambda j: T.buffer_store(
                rh, self.act(d, 0, self.clipped(gx[t * batch + b, hp + j] + gh[b, hp + j])) *
                h[b, j], [b, j]))
            self.recurrent(d, gh, b, lambda k: rh[b, k], 2 * hid, g_h, panels, bias)
        self.vec_loop(hid, lambda j: self.cell(d, t, b, j, gx, gh, h, cst, tmp, live))

    def claimed_steps(self, step):
        """Every step ``s`` as ``step(s, c0, c1)`` calls on chunks ``[c0, c1)`` of ``lanes``
        units covering them all, in ONE parallel launch when the pool has threads to give
        (``threadpool.c``'s ``nnvm_step_parts``), serially otherwise: in a parallel loop of
        one live iteration, which the pool runs inline on the calling thread, as the steps
        ran before (written straight into the kernel, LLVM compiled them 2% slower on a
        128-unit LSTM over 8 steps: one process A/B, 30.6 vs 31.2 us; a loop of extent 1 is
        simplified away).

        In the launch, each task loops: claim a part of the current step (its thread's own
        part first: each core keeps its weight rows in its own cache), compute it, mark it
        done, claim again; when no part is left, wait for the step to end and go on from the
        step the others reached (a task that started late, or an extra task of a thread that
        finished, skips the steps already done). The state is one word in a buffer of this
        kernel (zeroed before the launch). Why: a launch per step (the earlier
        ``fused_step``) cost about what splitting the step saved on a 64-step 128-unit GRU
        (2 threads as slow as 1); one launch leaves a claim, a done and a wait per step and
        thread, a few contended cache lines."""
        chunks = self.hid // self.lanes
        parts = T.alloc_buffer((1,), "int32")
        T.buffer_store(parts, T.call_extern("int32", "nnvm_step_parts", chunks), [0])
        with T.If(parts[0] > 1):
            with T.Then():
                state = T.alloc_buffer((8,), "int64", align=64)  # one cache line
                T.buffer_store(state, tirx.const(0, "int64"), [0])
                with T.parallel(0, STEP_TASKS):
                    at, part = registers(2, (1,), "int32")
                    T.buffer_store(at, 0, [0])
                    with T.While(at[0] < self.seq):
                        s = at[0]
                        claim = T.call_extern("int32", "nnvm_step_claim", state.data, s,
                                              parts[0])
                        T.buffer_store(part, claim, [0])
                        with T.While(part[0] >= 0):
                            step(s, part[0] * chunks // parts[0],
                                 (part[0] + 1) * chunks // parts[0])
                            T.evaluate(T.call_extern("int32", "nnvm_step_done", state.data, s,
                                                     parts[0]))
                            T.buffer_store(part, claim, [0])
                        T.buffer_store(at, T.call_extern("int32", "nnvm_step_wait",
                                                         state.data, s), [0])
            with T.Else():  # one thread: a launch that runs inline, one live iteration
                with T.parallel(0, 2) as one:
                    with T.If(one == 0):
                        with T.Then():
                            with T.serial(0, self.seq) as s:
                                step(s, 0, chunks)

    def step_units(self, d, s, c0, c1, reverse, lens, gx, gh, h, cst, bias):
        """Step ``s`` of every batch entry for the units of chunks ``[c0, c1)`` (``lanes``
        units each): each chunk's rows of every gate's product (one dot tile a gate), then
        their gate arithmetic, so no other chunk's product is read. The state is
        double-buffered (rows ``s % 2`` of ``h`` read, the other written): no part
        overwrites a unit another part's product still reads in the same step. Every other
        step (``flip``) runs chunks and gates last to first, as ``recurrent`` runs its tiles
        (L2 reuse). The cell's intermediates live in register tiles, not the shared scratch:
        through the scratch the fused LSTM 8 x 128 was 3% slower at 1 thread than the split
        product; with them, one process A/B at load 2.6: GRU 64 x 128 188 -> 179 us at 1
        thread, LSTM 8 x 128 38.0 -> 37.1 us. At one thread the step's dot tiles are bound by
        their FMAs (perf on GRU 64 x 128: 55% of the time in the k loops, 19% in the shuffle
        reductions, 21% in the gates). Tried and dropped: the product on column panels (R
        transposed once per call, 2 or 4 chunks' 6 or 12 column accumulators per broadcast of
        ``h[k]``, no reductions), 6-11% slower at 1 thread on GRU 64 x 128 (one process A/B)."""
        lanes, hid, batch, g, seq = self.lanes, self.hid, self.batch, self.g, self.seq
        t = (seq - 1 - s) if reverse else s
        with T.serial(0, batch) as b:
            live = None if lens is None else t < lens[b].astype("int32")
            flip = (s * batch + b) % 2 == 1
            old, new = s % 2 * batch + b, (s + 1) % 2 * batch + b
            with T.serial(0, c1 - c0) as c:
                u = tirx.Select(flip, c1 - 1 - c, c0 + c)
                for gi in range(g):
                    n0 = tirx.Select(flip, g - 1 - gi, gi) * hid + u * lanes
                    self.gemm_dots(gh, 1, lambda row: b, lambda row, k: h[old, k],
                                   self.buf["R"], d, n0, n0 + lanes, hid, bias)
                regs = registers(5, (lanes,), self.acc)  # the cell's intermediates
                with T.vectorized(0, lanes) as ji:
                    self.cell(d, t, b, u * lanes + ji, gx, gh, h, cst, None, live, (old, new),
                              lambda slot, ji=ji: (regs[slot], [ji]))

    def cell(self, d, t, b, j, gx, gh, h, cst, tmp, live, rows=None, slot_at=None):
        """Gate arithmetic of unit ``j``: new state into the scratch, ``Y[t]`` out.

        Every intermediate used more than once goes through the ``tmp`` scratch (``keep``):
        as an expression it would be copied into each use (tanh reads its operand four
        times, so nested gates grow exponentially), and binding it to a variable
        (``T.Bind``) is miscompiled by TVM 0.27's vectoriser when the value holds ``isnan``
        (all lanes get lane 0's value), which the NaN-keeping tanh does. ``slot_at(slot)``
        names another ``(buffer, index)`` for a slot (``step_units``' register tiles)."""
        hp, batch = self.hp, self.batch
        row = t * batch + b
        old, new = rows or (b, b)  # the state rows read and written (``step_units``)
        slot_at = slot_at or (lambda slot: (tmp, [slot, b, j]))

        def keep(slot, value):
            buf, idx = slot_at(slot)
            T.buffer_store(buf, value, idx)
            return buf[tuple(idx)]

        def pre(gate):
            return gx[row, gate * hp + j] + gh[b, gate * hp + j]
        h_old = h[old, j]
        if self.kind == "lstm":
            c_old = cst[b, j]
            p = self.buf.get("P")
            hid = self.hid

            def with_peep(v, gate, cv):  # P is (dirs, 3H): input, output, forget
                return v if p is None else v + self.load(p, (d, gate * hid + j)) * cv
            i = keep(0, self.act(d, 0, self.clipped(with_peep(pre(0), 0, c_old))))
            f = self.c(1) - i if self.attrs.get("input_forget") else \
                keep(1, self.act(d, 0, self.clipped(with_peep(pre(2), 2, c_old))))
            c_new = keep(2, f * c_old + i * self.act(d, 1, self.clipped(pre(3))))
            o = keep(3, self.act(d, 0, self.clipped(with_peep(pre(1), 1, c_new))))
            h_new = keep(4, o * self.act(d, 2, c_new))
            T.buffer_store(cst, c_new if live is None else tirx.Select(live, c_new, c_old),
                           [b, j])
        elif self.kind == "gru":
            z = keep(0, self.act(d, 0, self.clipped(pre(0))))
            if self.attrs.get("linear_before_reset"):
                r = keep(1, self.act(d, 0, self.clipped(pre(1))))
                hh = keep(2, self.act(d, 1, self.clipped(gx[row, 2 * hp + j] +
                                                         r * gh[b, 2 * hp + j])))
            else:
                hh = keep(2, self.act(d, 1, self.clipped(pre(2))))
            h_new = keep(3, (self.c(1) - z) * hh + z * h_old)
        else:
            h_new = keep(0, self.act(d, 0, self.clipped(pre(0))))
        if live is None:
            T.buffer_store(h, h_new, [new, j])
            y = h_new
        else:
            T.buffer_store(h, tirx.Select(live, h_new, h_old), [new, j])
            y = tirx.Select(live, h_new, self.c(0))
        T.buffer_store(self.outs[0], y.astype(self.dtype), self.y_idx(t, d, b, j))

    def body(self):
        if self.ndir == 1:
            self.direction(0)
            return
        loop = T.parallel if self.parallel_dirs else T.serial
        with loop(0, 2) as d:
            with T.If(d == 0):
                with T.Then():
                    self.direction(0)
                with T.Else():
                    self.direction(1)


def sequence_kernel(kind: str, attrs, ins, outs, ctx, threads_ok: bool = True):
    """The TE tensors (Y, Y_h[, Y_c]) of a recurrent node, computed by one extern kernel."""
    def fcompute(in_bufs, out_bufs):
        kernel = _Kernel(kind, attrs, list(in_bufs), list(out_bufs), ctx.vector_lanes,
                         threads_ok, ctx.packed)
        with IRBuilder() as ib:
            with T.prim_func():
                T.func_name(ctx.name)
                for n, buf in enumerate(list(in_bufs) + list(out_bufs)):
                    T.arg(f"arg{n}", buf)
                kernel.body()
        return ib.get().body

    res = te.extern([shape for shape, _ in outs], list(ins), fcompute, name=ctx.name,
                    dtype=[dtype for _, dtype in outs])
    return list(res) if isinstance(res, (list, tuple)) else [res]
