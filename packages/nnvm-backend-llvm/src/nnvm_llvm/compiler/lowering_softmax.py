"""Lowering rules of softmax and log-softmax (the ``softmax`` template, ``rows_schedule``).

Four forms: half-precision tensors round every step as the reference kernel does; float32
rows over the last axis that divide a vector or are at least one vector long are one
kernel of explicit vectors (``softmax_packed``); other float32 rows over the last axis at
least half a vector long (rows of 9 to 15 at 16 lanes) are reduced in a vector part and a
tail, softmax's exponentials computed once into a row buffer; every other case is
``topi``'s rule.
"""

from __future__ import annotations

import functools

from tvm import te, topi

from .fastmath import exp_nonpositive
from .lowering import _nan_reduce, nan_max, register
from .rows_schedule import SHORT_ROW_VECTORS
from .softmax_packed import softmax_rows, takes_rows


def _half_softmax(x, axis: int, log: bool, name: str):
    """Softmax / log-softmax of a float16/bfloat16 tensor as the reference kernel computes
    it with NumPy: each elementwise step (``x - max``, ``exp``, the division or the log)
    in float32 rounded to the half type, the row sum accumulated in float32 and rounded
    once (NumPy's pairwise sum of halves). topi's rule kept every step, the running sum
    included, in half precision: fp16 attention was an ulp off on 1-10% of its elements.
    Why not round only at the end: the ONNX suite's expected fp16 outputs round the
    intermediates too, and one rounding differs from them by an ulp just as often."""
    half = x.dtype
    axis %= len(x.shape)
    row_max = _nan_reduce(nan_max, topi.max)(x, axis=[axis], keepdims=True)

    def at_row(t, i):
        return t[tuple(0 if d == axis else v for d, v in enumerate(i))]

    def f32(v):
        return v.astype("float32")

    shifted = te.compute(x.shape, lambda *i: (f32(x[i]) - f32(at_row(row_max, i))).astype(
        half), name=name + "_shifted")
    exp = te.compute(x.shape, lambda *i: te.exp(f32(shifted[i])).astype(half),
                     name=name + "_exp")
    k = te.reduce_axis((0, x.shape[axis]), name="k")
    total = te.compute(row_max.shape, lambda *i: te.sum(
        f32(exp[tuple(k if d == axis else v for d, v in enumerate(i))]), axis=k),
        name=name + "_sum")
    if log:
        log_total = te.compute(total.shape, lambda *i: te.log(f32(total[i].astype(half))
                                                               ).astype(half),
                               name=name + "_logsum")
        return te.compute(x.shape, lambda *i: (f32(shifted[i]) - f32(at_row(log_total, i))
                                               ).astype(half), name=name)
    return te.compute(x.shape, lambda *i: (f32(exp[i]) / f32(at_row(total, i).astype(half))
                                           ).astype(half), name=name)


def _row_softmax(x, lanes: int, log: bool, name: str):
    """Softmax / log-softmax over the last axis, each row reduction split into a part of
    whole vectors and a tail (itself a half vector and the rest when over half a vector):
    ``max = max(max(x[:, :n0]), max(x[:, n0:]))``, the same for the sum of exponentials;
    softmax's exponentials computed once, into a row buffer.

    Why the split: the row template computes a reduction in vector lanes only when the row
    length is a multiple of the vector; Whisper's 1500-frame attention rows (1500 = 93 x 16
    + 12) ran scalar, 22 ms a softmax, more than half the encoder. Why the row buffer:
    inlined, each exponential was computed twice (for the sum, then for the output), and
    ``exp`` is most of the work (1x3234x91: 0.47 -> 0.25 ms). The buffer is a reduction
    over one element (:func:`_kept_stage`) so the generic inliner leaves it; the template
    computes it under the row loop, where the row stays in L1. Same reducers and formula as
    ``topi.nn.softmax`` (NaN behaves as there). The exponentials are
    :func:`~.fastmath.exp_nonpositive`, as ``x - max <= 0`` has no overflow side: 12-29%
    off every softmax shape of the roofline sweep (1x8x40x40: 8.4 -> 6.0 us, 1x3234x91:
    164 -> 132 us, 1x2x8x8: 0.143 -> 0.110 us)."""
    shape = [int(d) for d in x.shape]
    n = shape[-1]
    # a short row whole half vectors divide (40) stays one part: the template reduces it in
    # half-vector partials, and a tail of 8 was a scalar chain of dependent maxima and sums
    short = n < SHORT_ROW_VECTORS * lanes and n % (lanes // 2) == 0
    n0 = n if short else n - n % lanes
    # a tail over half a vector is reduced as a half vector and the rest: the template
    # reduces a part of 12 in 6 partials and a chain of 3 (1 thread: Softmax 1x8x40x12
    # 5.26 -> 4.59 us, rows of 28 1.89 -> 1.64 us, 1x256x91 10.9 -> 9.7 us)
    half = n0 + lanes // 2 if n - n0 > lanes // 2 else n0
    parts = [(lo, hi) for lo, hi in ((0, n0), (n0, half), (half, n)) if hi > lo]
    lead = len(shape) - 1

    def row_reduce(fn, combine, label):
        def part(p, lo, hi):
            r = te.reduce_axis((lo, hi), f"k{label}{p}")
            return te.compute(shape[:-1], lambda *i: fn(i, r), name=f"{name}_{label}{p}")
        found = [part(p, lo, hi) for p, (lo, hi) in enumerate(parts)]
        if len(found) == 1:
            return found[0]
        return te.compute(shape[:-1], lambda *i: functools.reduce(
            combine, [f[i] for f in found]), name=f"{name}_row{label}")
    row_max = row_reduce(lambda i, r: te.max(x[i + (r,)], axis=r), te.max, "max")

    def shifted(i):
        return x[i] - row_max[i[:lead]]
    exp = None if log else _kept_stage(shape, lambda i: exp_nonpositive(shifted(i)),
                                       name + "_exp")
    total = row_reduce(lambda i, r: te.sum(
        exp_nonpositive(shifted(i + (r,))) if log else exp[i + (r,)], axis=r),
        lambda a, b: a + b,
        "sum")
    if log:
        return te.compute(shape, lambda *i: shifted(i) - te.log(total[i[:lead]]), name=name)
    # times the reciprocal: LLVM hoists 1 / total out of the row loop, a division per
    # element stays in it
    return te.compute(shape, lambda *i: exp[i] * (1 / total[i[:lead]]), name=name)


def _kept_stage(shape, fn, name: str):
    """``fn`` materialised as a stage the schedules' inliner keeps: written as a reduction
    over one element (``rows_schedule`` treats such a stage as a row buffer, not a row
    statistic). The inliner inlines every elementwise stage of a kernel."""
    unit = te.reduce_axis((0, 1), "unit")
    return te.compute(shape, lambda *i: te.sum(fn(i) + unit.var.astype("float32") * 0,
                                               axis=unit), name=name)


def _softmax_rule(fn, log: bool):
    def rule(attrs, ins, outs, ctx):
        x = ins[0]
        if str(x.dtype) in ("float16", "bfloat16"):
            return _half_softmax(x, attrs["axis"], log, ctx.name)
        # rows shorter than half a vector keep topi's rule. Rows of 8 to 31 once did too
        # (the row buffer cost more than the exponentials it saved: rows of 8, 0.44 -> 0.55
        # us); with whole-vector rows and halved partials it saves: 1x2x8x8 0.22 -> 0.14 us,
        # 10x20 0.29 -> 0.18 us
        last = attrs["axis"] % len(x.shape) == len(x.shape) - 1 and str(x.dtype) == "float32"
        # rows dividing a vector or at least one vector long: one kernel of explicit
        # vectors (softmax_packed); its input must be a buffer (an extern kernel), not a
        # fused stage
        if last and takes_rows(int(x.shape[-1]), ctx.vector_lanes) \
                and isinstance(x.op, te.PlaceholderOp):
            return softmax_rows(x, ctx.vector_lanes, log, ctx.name)
        if last and int(x.shape[-1]) >= ctx.vector_lanes // 2:
            return _row_softmax(x, ctx.vector_lanes, log, ctx.name)
        return fn(x, attrs["axis"])
    return rule


register("softmax", "softmax")(_softmax_rule(topi.nn.softmax, log=False))
register("log_softmax", "softmax")(_softmax_rule(topi.nn.log_softmax, log=True))
