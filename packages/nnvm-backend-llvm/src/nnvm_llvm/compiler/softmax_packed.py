"""float32 softmax and log-softmax over the last axis as one TIR kernel of explicit vectors:
short rows several in flight at once, long rows in loops of independent chains.

Three layouts. *Packed*: rows of ``n`` dividing the vector (``n <= lanes / 2``), ``lanes / n``
rows per vector; a butterfly step ``v = op(v, v[j ^ s])`` (``s = 1, 2, .. n/2``) stays
inside a row's lanes and leaves every lane with its row's max (then sum). *Spanned*: rows of
one to ``SPANNED_VECTORS`` vectors, each row read as whole vectors and a tail vector of the
next power of two lanes over the rest, ending at the row's end (a tail over half a vector:
a whole vector overlapping the one before it); a tail's repeated lanes are zeroed before
the sum, and written twice with the same value: no scalar tail loop. *Long*: rows past
``SPANNED_VECTORS`` vectors, one at a time, in three vector loops (max; exponentials and
their sum; scaling) of ``ACCUMULATORS`` independent chains, the tail an overlapping vector.
In each the shift, the exponentials (:func:`~.fastmath.exp_nonpositive`) and the
normalisation run on vectors (packed and spanned: the vectors of ``INTERLEAVED`` rows, or
packed vectors, step by step together so that their dependent chains overlap), and a NaN
or inf reaches only its own row's lanes. The output is written before the input is last
read (the exponentials, stored early): softmax has no in-place option (``FInplaceOption``),
so the two never share a buffer.

Why: the row template (``rows_schedule``) computes one row at a time with vector partial
results reduced in halves and a scalar tail; on short rows that is a latency-bound chain per
row, and a row of 8 left half of every vector empty (1 thread, interleaved, Zen 4: Softmax
1x2x8x8 0.104 -> 0.048 us, 10x20 0.137 -> 0.111, 1x2x8x32 0.223 -> 0.168, 1x2x32x32 0.87
-> 0.65, 1x2x49x49 2.19 -> 1.86, 1x8x40x40 5.70 -> 4.53; rows of 2, topi's rule before,
1x55x75x2 3.37 -> 1.99 us).

Measured and not taken (1 thread, one process, Zen 4): the row sums' reciprocal as the CPU's
estimate and a Newton step instead of ``vdivps`` (Softmax 1x2x8x8 47.2 -> 49.5 ns, 2x128
and 5x40 within noise); packed rows reduced across ``n`` vectors at once (two-source shuffles
pairing half-segments, ``n - 1`` operations per ``n`` vectors) instead of the butterfly
(1x2x8x8 45.5 -> 51.6 ns, 3x7x4 32.2 -> 36.6, 1x55x75x2 2.1 -> 2.6 us); all groups of 10
rows of 20 in flight at once instead of 6 and 4 (80.3 ns both ways).
"""

from __future__ import annotations

from tvm import te, tirx
from tvm.tirx.script.builder import ir as T

from .fastmath import exp_nonpositive
from .int8_gemm import _prod, flat, tir_body
from .schedules import PARALLEL_MIN_WORK

#: longest row (in vectors) the spanned layout takes: each row's vectors are loaded once and
#: kept (in registers, past 32 vectors some spilled), faster than the row template's loops
#: (1 thread: rows of 91 122.8 -> 87.9 us, of 197 27.6 -> 24.7 us, of 128 0.101 -> 0.090
#: us); longer rows take the long layout's loops (unrolled, Whisper's rows of 1500 spilled:
#: 3x slower)
SPANNED_VECTORS = 16

#: vectors (packed ones, or the vectors of spanned rows) computed together in one step of
#: the row loop, at least two rows' (4 interleaved rows of 40 were 20% faster than 2, of 49
#: as fast)
INTERLEAVED = 12

#: independent maxima (and sums) along a long row: the row template's loops kept one, a
#: chain of dependent steps, and a separate pass for the sum (1 thread, interleaved:
#: Softmax 1x2x1500x1500 3.1 -> 1.6 ms under load, 1x40x6625 98 -> 79 us)
ACCUMULATORS = 4

#: a row's tail of at most this many lanes (``spanned_tail``) has its exponential computed
#: in one vector with other rows' tails, ``lanes / w`` of them (1 thread, one process, Zen 4:
#: Softmax 10x20 81.5 -> 69.5 ns, 4x18 40.6 -> 33.0, 6x17 54.3 -> 45.1); wider tails keep
#: their own (two 8-lane tails in a 16-lane vector: 7x21 66.6 -> 73.9 ns, 2x40 32.2 -> 34.2,
#: as a 256-bit vector's exponential already runs at the 512-bit one's rate per lane)
PACKED_TAIL_MAX_LANES = 4


def takes_rows(n: int, lanes: int) -> bool:
    """Whether rows of ``n`` take this kernel: packed whole to a vector, or at least one
    vector long (spanned, or past ``SPANNED_VECTORS`` vectors long)."""
    return 2 <= n <= lanes // 2 and lanes % n == 0 or n >= lanes


def _butterfly(vs, op, n: int, width: int) -> list:
    """Every lane of each vector of ``vs`` (``width`` lanes, segments of ``n``) combined by
    ``op`` with the other lanes of its segment: ``log2(n)`` steps of a shuffle and one
    operation, the vectors' steps interleaved."""
    step = 1
    while step < n:
        vs = [T.bind(op(v, tirx.Shuffle([v], [j ^ step for j in range(width)]))) for v in vs]
        step *= 2
    return vs


def _tree(vs, op):
    """``op`` over the vectors ``vs`` as a balanced tree (half the dependent steps)."""
    while len(vs) > 1:
        vs = [op(vs[k], vs[k + 1]) if k + 1 < len(vs) else vs[k] for k in range(0, len(vs), 2)]
    return vs[0]


def _add(a, b):
    return a + b


def _float32(width: int) -> str:
    return f"float32x{width}" if width > 1 else "float32"


def _at(base, width: int):
    """``width`` consecutive elements from ``base``: a vector index, or one element."""
    return tirx.Ramp(base, 1, width) if width > 1 else base


class _Rows:
    """The kernel's statements for rows of ``n`` in vectors of ``lanes`` (TVM IR builder)."""

    def __init__(self, x, y, n: int, lanes: int, log: bool):
        self.n, self.lanes, self.log = n, lanes, log
        elems = _prod(x.shape)
        self.rows = elems // n
        self.x, self.y = flat(x, elems), flat(y, elems)
        self.parallel = elems >= PARALLEL_MIN_WORK // 4

    def _exp(self, groups, tops, width: int) -> list:
        """``exp(x - max)`` of every vector (log-softmax's too: its sum), stored to the
        output first and read back: a ``Let`` (the exponential's) bound as a statement had
        TVM fold its rounding ``(t + magic) - magic`` away; in a store it is compiled as in
        a TE kernel. The normalisation overwrites the store (LLVM drops it), and each read
        follows its own store."""
        out = []
        for (ats, vs), top in zip(groups, tops):
            es = []
            for at, v in zip(ats, vs):
                T.buffer_store(self.y, exp_nonpositive(v - top, _float32(width)), [at])
                es.append(T.bind(self.y[at]))
            out.append(es)
        return out

    def _finish(self, groups, tops, totals, width: int, seg: int, es) -> None:
        """Store ``e / total`` (softmax) or ``x - max - log(total)`` (log-softmax)."""
        for (ats, vs), top, total, row_es in zip(groups, tops, totals, es):
            if self.log:
                # one scalar log per row (a vector log is a libm call per lane)
                logs = [tirx.Broadcast(tirx.log(tirx.Shuffle([total], [k])), seg)
                        for k in range(0, width, seg)]
                lg = T.bind(logs[0] if len(logs) == 1 else tirx.Shuffle(logs, list(range(width))))
                for at, v in zip(ats, vs):
                    T.buffer_store(self.y, v - top - lg, [at])
            elif len(ats) == 1:
                T.buffer_store(self.y, row_es[0] / total, [ats[0]])
            else:
                inv = T.bind(tirx.Broadcast(tirx.const(1.0, "float32"), width) / total)
                for at, e in zip(ats, row_es):
                    T.buffer_store(self.y, e * inv, [at])

    def packed(self, bases, width: int) -> None:
        """Softmax of the rows at the flat offsets ``bases``, ``width / n`` rows a vector."""
        groups = [([tirx.Ramp(b, 1, width)], None) for b in bases]
        groups = [(ats, [T.bind(self.x[ats[0]])]) for ats, _ in groups]
        tops = _butterfly([vs[0] for _, vs in groups], tirx.max, self.n, width)
        es = self._exp(groups, tops, width)
        totals = _butterfly([e[0] for e in es], _add, self.n, width)
        self._finish(groups, tops, totals, width, self.n, es)

    def spanned(self, bases) -> None:
        """Softmax of the rows starting at the flat offsets ``bases``, each read as vectors
        at ``0, lanes, ..`` and a last one ending at the row's end (rows of whole vectors,
        or with a tail over half a vector)."""
        lanes, n = self.lanes, self.n
        offs = list(range(0, n - lanes + 1, lanes))
        if offs[-1] != n - lanes:
            offs.append(n - lanes)
        repeated = offs[-2] + lanes - offs[-1] if len(offs) > 1 else 0
        groups = []
        for b in bases:
            ats = [tirx.Ramp(b + o, 1, lanes) for o in offs]
            groups.append((ats, [T.bind(self.x[at]) for at in ats]))
        tops = _butterfly([T.bind(_tree(vs, tirx.max)) for _, vs in groups], tirx.max,
                          lanes, lanes)
        es = self._exp(groups, tops, lanes)
        parts = [list(e) for e in es]
        if repeated:
            keep = tirx.Ramp(0, 1, lanes) >= tirx.Broadcast(tirx.const(repeated, "int32"), lanes)
            zero = tirx.Broadcast(tirx.const(0.0, "float32"), lanes)
            for p in parts:
                p[-1] = tirx.Select(keep, p[-1], zero)
        totals = _butterfly([T.bind(_tree(p, _add)) for p in parts], _add, lanes, lanes)
        self._finish(groups, tops, totals, lanes, lanes, es)

    def spanned_tail(self, bases, w: int) -> None:
        """Softmax of the rows starting at ``bases`` as whole vectors and a narrow tail of
        ``w`` lanes (a power of two) ending at the row's end: the whole vectors' max and
        sum are folded in halves down to ``w`` lanes, combined with the tail's, reduced
        inside them and broadcast back. Why: an overlapping whole vector for the tail cost
        a full-width exponential for 4 elements (1 thread: Softmax 10x20 0.112 -> 0.090 us,
        1x8x40x40 4.54 -> 4.07 us)."""
        lanes, n = self.lanes, self.n
        q, t = divmod(n, lanes)
        repeated = w - t  # the tail's first lanes, also in the last whole vector

        def fold(v, op):
            width = lanes
            while width > w:
                h = width // 2
                v = T.bind(op(tirx.Shuffle([v], list(range(h))),
                              tirx.Shuffle([v], list(range(h, width)))))
                width = h
            return v

        def wide(v):
            return tirx.Broadcast(v if w == 1 else tirx.Shuffle([v], [0]), lanes)

        def combine(wholes, tails, op):
            vs = [op(fold(T.bind(_tree(f, op)), op), tl) for f, tl in zip(wholes, tails)]
            return _butterfly([T.bind(v) for v in vs], op, w, w)

        rows = []
        for b in bases:
            fats = [_at(b + k * lanes, lanes) for k in range(q)]
            tat = _at(b + n - w, w)
            rows.append((fats, [T.bind(self.x[a]) for a in fats], tat, T.bind(self.x[tat])))
        tops_w = combine([r[1] for r in rows], [r[3] for r in rows], tirx.max)
        tops = [T.bind(wide(m)) for m in tops_w]
        es = self._exp([(r[0], r[1]) for r in rows], tops, lanes)
        tail_es = self._tail_exps(bases, [r[2] for r in rows], [r[3] for r in rows], tops_w, w)
        tails = tail_es
        if repeated:
            keep = tirx.Ramp(0, 1, w) >= tirx.Broadcast(tirx.const(repeated, "int32"), w)
            tails = [tirx.Select(keep, tl, tirx.Broadcast(tirx.const(0.0, "float32"), w))
                     for tl in tails]
        totals = combine(es, tails, _add)
        for (fats, vs, tat, tv), top, top_w, total, row_es, tail_e in zip(
                rows, tops, tops_w, totals, es, tail_es):
            if self.log:
                lg = T.bind(tirx.log(total if w == 1 else tirx.Shuffle([total], [0])))
                for a, v in zip(fats, vs):
                    T.buffer_store(self.y, v - top - tirx.Broadcast(lg, lanes), [a])
                T.buffer_store(self.y, tv - top_w - (lg if w == 1 else tirx.Broadcast(lg, w)),
                               [tat])
            else:
                one = tirx.const(1.0, "float32")
                inv = T.bind(one / total if w == 1 else tirx.Broadcast(one, w) / total)
                inv_l = T.bind(wide(inv))
                for a, e in zip(fats, row_es):
                    T.buffer_store(self.y, e * inv_l, [a])
                T.buffer_store(self.y, tail_e * inv, [tat])

    def _tail_exps(self, bases, tats, tails, tops_w, w: int) -> list:
        """``exp(tail - max)`` of the ``w``-lane tails of the rows at ``bases`` (the tails at
        ``tats``), ``lanes / w`` tails computed in one vector. The vector is stored over the
        first row's first output vector (free until the normalisation: its exponentials are
        read already) and each tail read back from it, as in ``_exp``. Why: a narrow
        vector's exponential costs a whole one's instructions (on Zen 4 a 256-bit vector's
        throughput too), and 10 rows of 20 computed 10 of them."""
        g = self.lanes // w if w <= PACKED_TAIL_MAX_LANES else 1
        out = []
        for k in range(0, len(tails), g):
            ts, ms = tails[k:k + g], tops_w[k:k + g]
            if len(ts) == 1:
                out.extend(e[0] for e in self._exp([([tats[k]], ts)], ms, w))
                continue
            pad = (1 << (len(ts) - 1).bit_length()) - len(ts)  # a power of two of tails
            xs, tops = ts + ts[-1:] * pad, ms + ms[-1:] * pad
            width = w * len(xs)
            order = list(range(width))
            T.buffer_store(self.y, exp_nonpositive(tirx.Shuffle(xs, order) -
                                                   tirx.Shuffle(tops, order),
                                                   _float32(width)), [_at(bases[k], width)])
            out.extend(T.bind(self.y[_at(bases[k] + j * w, w)]) for j in range(len(ts)))
        return out

    def long(self, b) -> None:
        """Softmax of the row at flat offset ``b`` (over ``SPANNED_VECTORS`` vectors) in
        three vector loops, ``ACCUMULATORS`` independent maxima and sums in each: max;
        exponentials (stored) and their sum; the scaling (log-softmax: ``x - max - log``).
        The tail is one whole vector overlapping the one before it (its repeated lanes out
        of the sum; its output written from its own exponentials, so that no lane is scaled
        twice)."""
        lanes, n, k = self.lanes, self.n, ACCUMULATORS
        q, t = divmod(n, lanes)
        acc = T.alloc_buffer((k * lanes,), "float32", scope="local")
        slots = [tirx.Ramp(j * lanes, 1, lanes) for j in range(k)]

        def at(v):
            return tirx.Ramp(b + v * lanes, 1, lanes)

        def sweep(first, update):
            """``update(slot, vector index)`` over every whole vector from ``first``,
            ``k`` at a time in a loop, then the rest."""
            steps = (q - first) // k
            if steps:
                with T.serial(0, steps) as i:
                    for j in range(k):
                        update(slots[j], first + i * k + j)
            for v in range(first + steps * k, q):
                update(slots[(v - first) % k], v)

        def total(op):
            return _butterfly([T.bind(_tree([acc[r] for r in slots], op))], op, lanes, lanes)[0]

        for j in range(k):
            T.buffer_store(acc, self.x[at(j)], [slots[j]])
        sweep(k, lambda r, v: T.buffer_store(acc, tirx.max(acc[r], self.x[at(v)]), [r]))
        end = tirx.Ramp(b + n - lanes, 1, lanes)
        tail = T.bind(self.x[end]) if t else None
        top = total(tirx.max)
        if t:
            top = T.bind(tirx.max(top, tail))
            top = _butterfly([top], tirx.max, lanes, lanes)[0]
        zero = tirx.Broadcast(tirx.const(0.0, "float32"), lanes)
        for r in slots:
            T.buffer_store(acc, zero, [r])

        def exp_sum(r, v):
            T.buffer_store(self.y, exp_nonpositive(self.x[at(v)] - top, _float32(lanes)),
                           [at(v)])
            T.buffer_store(acc, acc[r] + self.y[at(v)], [r])
        sweep(0, exp_sum)
        if t:
            e_tail = self._exp([([end], [tail])], [top], lanes)[0][0]
            keep = tirx.Ramp(0, 1, lanes) >= tirx.Broadcast(tirx.const(lanes - t, "int32"),
                                                            lanes)
            T.buffer_store(acc, acc[slots[0]] + tirx.Select(keep, e_tail, zero), [slots[0]])
        s = total(_add)
        if self.log:
            lg = T.bind(tirx.Broadcast(tirx.log(tirx.Shuffle([s], [0])), lanes))
            sweep(0, lambda r, v: T.buffer_store(self.y, self.x[at(v)] - top - lg, [at(v)]))
            if t:
                T.buffer_store(self.y, tail - top - lg, [end])
        else:
            inv = T.bind(tirx.Broadcast(tirx.const(1.0, "float32"), lanes) / s)
            sweep(0, lambda r, v: T.buffer_store(self.y, self.y[at(v)] * inv, [at(v)]))
            if t:
                T.buffer_store(self.y, e_tail * inv, [end])

    def body(self) -> None:
        lanes, n = self.lanes, self.n
        if n > SPANNED_VECTORS * lanes:
            loop = T.parallel if self.parallel and self.rows > 1 else T.serial
            with loop(0, self.rows) as r:
                self.long(r * n)
            return
        if n >= lanes:
            units, size, width, rest = self.rows, n, None, 0
        else:
            units, rest = divmod(self.rows, lanes // n)
            size, width = lanes, lanes
        group = min(max(INTERLEAVED // -(-size // lanes), 2), max(units, 1))
        steps, odd = divmod(units, group)

        t = n % lanes
        w = 1 << (t - 1).bit_length() if t else 0

        def run(bases):
            if width is None and 0 < w < lanes:
                self.spanned_tail(bases, w)
            elif width is None:
                self.spanned(bases)
            else:
                self.packed(bases, width)
        loop = T.parallel if self.parallel and steps > 1 else T.serial
        if steps:
            with loop(0, steps) as c:
                run([(c * group + k) * size for k in range(group)])
        if odd:
            run([(steps * group + k) * size for k in range(odd)])
        if rest:  # packed rows past the whole vectors: one n-lane vector each
            self.packed([units * lanes + r * n for r in range(rest)], n)


def softmax_rows(x, lanes: int, log: bool, name: str):
    """The float32 TE tensor of (log-)softmax over the last axis of ``x`` for rows that
    :func:`takes_rows` accepts, as one extern kernel (see the module docstring)."""
    n = int(x.shape[-1])
    body = tir_body(name, lambda i, o: _Rows(i[0], o[0], n, lanes, log).body())
    return te.extern(tuple(int(d) for d in x.shape), [x], body, name=name, dtype="float32")
