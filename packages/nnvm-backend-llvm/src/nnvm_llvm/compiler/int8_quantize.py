"""``dynamic_quantize_linear`` as one kernel written in TIR: vector min/max, then one
quantising pass.

Why: as a TE compute it was two scalar reductions over every axis (a serial chain of
dependent compares: LLVM may not reorder float min/max) and a quantising loop the
injective schedule did not vectorise across the 0-d scale; ddddocr's 22 DynamicQuantizeLinear
nodes ran at 0.5 "GFLOP/s", 0.15 ms for 60 K floats where onnxruntime takes 13 us.

Here the input is read as one flat row: ``4 x lanes`` partial minima and maxima (four
independent vector chains), started at 0 because the range always includes 0; above
``PARALLEL_MIN_WORK`` elements the row is cut into chunks reduced in parallel. The scale and
zero point follow onnxruntime bit for bit (float32 ``(max(0, hi) - min(0, lo)) / 255``, an
all-zero input gets scale 1, zero point ``rint(-lo / scale)`` clamped to [0, 255]); the
quantising pass is ``saturate(rint(x / scale) + zp)`` with a true division (a multiply by
``1 / scale`` differs in the last bit on a few inputs per thousand), vectorised and, when
large, parallel.
"""

from __future__ import annotations

from tvm import te, tirx
from tvm.tirx.script.builder import ir as T

from .int8_gemm import flat, tir_body
from .schedules import PARALLEL_MIN_WORK

#: chunks of a parallel min/max (the pool takes them in turn; more than the cores balances)
CHUNKS = 8


def _emit(x, y, scale, zp, lanes: int) -> None:
    n = 1
    for d in x.shape:
        n *= int(d)
    f32 = "float32"
    xf, yf = flat(x, n), flat(y, n)
    zero, top = tirx.const(0, f32), tirx.const(255, f32)
    width = 4 * lanes  # four vector chains hide the compare latency
    chunks = CHUNKS if n >= PARALLEL_MIN_WORK else 1
    per = n // chunks // width * width  # whole vectors per chunk; the rest is the tail
    part = T.alloc_buffer((2, chunks, width), f32)
    with (T.parallel if chunks > 1 else T.serial)(0, chunks) as c:
        with T.vectorized(0, width) as v:
            T.buffer_store(part, zero, [0, c, v])
            T.buffer_store(part, zero, [1, c, v])
        with T.serial(0, per // width) as o:
            with T.vectorized(0, width) as v:
                val = xf[c * per + o * width + v].astype(f32)
                T.buffer_store(part, te.min(part[0, c, v], val), [0, c, v])
                T.buffer_store(part, te.max(part[1, c, v], val), [1, c, v])
    lo_hi = T.alloc_buffer((2,), f32)
    T.buffer_store(lo_hi, zero, [0])
    T.buffer_store(lo_hi, zero, [1])
    with T.serial(0, chunks * width) as i:
        T.buffer_store(lo_hi, te.min(lo_hi[0], part[0, i // width, i % width]), [0])
        T.buffer_store(lo_hi, te.max(lo_hi[1], part[1, i // width, i % width]), [1])
    if n - per * chunks:
        with T.serial(per * chunks, n) as i:
            val = xf[i].astype(f32)
            T.buffer_store(lo_hi, te.min(lo_hi[0], val), [0])
            T.buffer_store(lo_hi, te.max(lo_hi[1], val), [1])
    lo, hi = lo_hi[0], lo_hi[1]
    sc = tirx.Select(hi == lo, tirx.const(1, f32), (hi - lo) / top)
    T.buffer_store(scale, sc, [0])
    s = scale[0]
    zpf = te.min(te.max(te.nearbyint(zero - lo / s), zero), top)
    T.buffer_store(zp, zpf.astype("uint8"), [0])
    z = zp[0].astype(f32)

    def quant(i):
        q = te.nearbyint(xf[i].astype(f32) / s) + z
        T.buffer_store(yf, te.min(te.max(q, zero), top).astype("uint8"), [i])

    rows = n // width
    outer = T.parallel if n >= PARALLEL_MIN_WORK else T.serial
    with outer(0, rows) as o:
        with T.vectorized(0, width) as v:
            quant(o * width + v)
    if n % width:
        with T.serial(rows * width, n) as i:
            quant(i)


def dynamic_quantize_linear(x, outs, name: str, lanes: int):
    """The TE tensors ``(y, scale, zero_point)`` of one DynamicQuantizeLinear node."""
    body = tir_body(name, lambda i, o: _emit(i[0], *o, lanes))
    (y_shape, y_dtype), (_, s_dtype), (_, z_dtype) = outs
    y, scale, zp = te.extern([y_shape, (1,), (1,)], [x], body, name=name,
                             dtype=[y_dtype, s_dtype, z_dtype])
    # the 0-d outputs as stages of their own: two 0-d outputs of one op compare ambiguous in
    # TE (codegen's output set hashes tensors by op)
    return [y, te.compute((), lambda: scale[0], name=name + "_scale"),
            te.compute((), lambda: zp[0], name=name + "_zp")]
