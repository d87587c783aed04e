"""Lowering rules of softmax and log-softmax (the ``softmax`` template, ``rows_schedule``).

Three forms: half-precision tensors round every step as the reference kernel does; rows
over the last axis that no vector divides are split into a vector part and a tail; every
other case is ``topi``'s rule.
"""

from __future__ import annotations

from tvm import te, topi

from .lowering import _nan_reduce, nan_max, register


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


def _split_row_softmax(x, lanes: int, log: bool, name: str):
    """Softmax / log-softmax over the last axis with each row reduction split into a part
    of whole vectors and a tail: ``max = max(max(x[:, :n0]), max(x[:, n0:]))``, the same
    for the sum of exponentials. Why: the row template computes a reduction in vector
    lanes only when the row length is a multiple of the vector; Whisper's 1500-frame
    attention rows (1500 = 93 x 16 + 12) ran scalar, 22 ms a softmax at 0.2 GFLOP/s,
    more than half the encoder. The vector part takes the lanes, the tail stays scalar.
    Same reducers and formula as ``topi.nn.softmax`` (NaN behaves as there)."""
    shape = [int(d) for d in x.shape]
    n = shape[-1]
    n0 = n - n % lanes
    lead = len(shape) - 1

    def row_reduce(fn, part, label):
        lo, hi = (0, n0) if part == 0 else (n0, n)
        r = te.reduce_axis((lo, hi), f"k{label}{part}")
        return te.compute(shape[:-1], lambda *i: fn(i, r), name=f"{name}_{label}{part}")
    maxes = [row_reduce(lambda i, r: te.max(x[i + (r,)], axis=r), p, "max") for p in (0, 1)]
    row_max = te.compute(shape[:-1], lambda *i: te.max(maxes[0][i], maxes[1][i]),
                         name=name + "_rowmax")
    sums = [row_reduce(lambda i, r: te.sum(te.exp(x[i + (r,)] - row_max[i]), axis=r), p,
                       "sum") for p in (0, 1)]

    def body(*i):
        total = sums[0][i[:lead]] + sums[1][i[:lead]]
        shifted = x[i] - row_max[i[:lead]]
        # times the reciprocal: LLVM hoists 1 / total out of the row loop, a division per
        # element stays in it
        return shifted - te.log(total) if log else te.exp(shifted) * (1 / total)
    return te.compute(shape, body, name=name)


def _softmax_rule(fn, log: bool):
    def rule(attrs, ins, outs, ctx):
        x = ins[0]
        if str(x.dtype) in ("float16", "bfloat16"):
            return _half_softmax(x, attrs["axis"], log, ctx.name)
        n, lanes = int(x.shape[-1]), ctx.vector_lanes
        if attrs["axis"] % len(x.shape) == len(x.shape) - 1 and n % lanes and n >= 2 * lanes:
            return _split_row_softmax(x, lanes, log, ctx.name)
        return fn(x, attrs["axis"])
    return rule


register("softmax", "softmax")(_softmax_rule(topi.nn.softmax, log=False))
register("log_softmax", "softmax")(_softmax_rule(topi.nn.log_softmax, log=True))
