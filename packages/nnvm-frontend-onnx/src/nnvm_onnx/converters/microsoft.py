"""``com.microsoft`` contrib ops that real models ship with (onnxruntime's quantisation tool).

DynamicQuantizeLSTM is an LSTM whose int8/uint8 weights multiply activations quantised on the
fly. Dequantising the weights and running a float LSTM is off by ~3e-3 relative on a real
model (ddddocr's captcha OCR), so the converter follows onnxruntime's kernel step by step with
core ops: the input rows of the whole sequence are quantised at once (one DynamicQuantizeLinear
over X) and multiplied by each direction's W in int32, the previous hidden state is quantised
at every step, row by row, and multiplied by R, the two scaled products plus (Wb + Rb) are the gates
(i, o, f, c), then c = f * c_prev + i * g and h = o * tanh(c). The sequence is unrolled at
import (its length is known once the input shape is).
"""

from __future__ import annotations

import numpy as np

from ..errors import OnnxUnsupportedError, format_error
from ..registry import converter

MS = "com.microsoft"


def _per_direction(ctx, i: int, d: int) -> np.ndarray:
    """Scale or zero point of direction ``d``: per tensor ([D]) or per column ([D, 4H])."""
    return np.asarray(ctx.const(i))[d]


def _refuse(ctx, what: str):
    raise OnnxUnsupportedError(format_error(
        ctx.where, f"DynamicQuantizeLSTM with {what} is not supported",
        fix="Export without it, or run the float LSTM before quantisation"))


def _check_supported(ctx):
    acts = [a.lower() for a in ctx.attr("activations", [])]
    if acts and acts != ["sigmoid", "tanh", "tanh"] * (len(acts) // 3):
        _refuse(ctx, f"activations {acts}")
    if ctx.attr("clip", None) is not None:
        _refuse(ctx, "clip")
    if ctx.attr("input_forget", 0):
        _refuse(ctx, "input_forget")
    if ctx.has_input(4):
        _refuse(ctx, "sequence_lens")
    if ctx.has_input(7):
        _refuse(ctx, "peepholes")


def _quantised_weight(ctx, weight, w_scale, w_zp) -> tuple:
    """The constants of one quantised weight, made once: a constant per use would be a
    separate param per time step (38 copies of the 1 MB recurrent weight, each streamed
    from memory, in ddddocr's unrolled LSTM)."""
    return (ctx.constant(weight), ctx.constant(w_scale.astype(np.float32)),
            ctx.constant(w_zp))


def _scaled_product(ctx, q, scale, zp, weight, w_scale, w_zp):
    """float32 (q - zp) @ (weight - w_zp) * (scale * w_scale), as onnxruntime's quantised GEMM
    (the weight, its scale and zero point from :func:`_quantised_weight`)."""
    acc = ctx.op("matmul_integer", q, weight, zp, w_zp)
    factor = ctx.op("broadcast_mul", scale, w_scale)
    return ctx.op("broadcast_mul", ctx.op("cast", acc, dtype="float32"), factor)


def _recurrent(ctx, h, batch: int, r, r_scale, r_zp):
    """h @ R with h quantised row by row: onnxruntime's LSTM runs the recurrent GEMM of each
    batch row on its own, so each row gets its own scale and zero point (quantising the
    (batch, hidden) block at once is off by ~1e-3 on a 2-row batch)."""
    rows = []
    for k in range(batch):
        row = h if batch == 1 else ctx.op("strided_slice", h, begin=(k,), end=(k + 1,))
        q, scale, zp = ctx.op_multi("dynamic_quantize_linear", row)
        rows.append(_scaled_product(ctx, q, scale, zp, r, r_scale, r_zp))
    return rows[0] if batch == 1 else ctx.op("concatenate", *rows, axis=0)


def _state(ctx, i: int, d: int, batch: int, hidden: int):
    if not ctx.has_input(i):
        return ctx.constant(np.zeros((batch, hidden), np.float32))
    v = ctx.op("strided_slice", ctx.input(i), begin=(d,), end=(d + 1,))
    return ctx.op("reshape", v, shape=(batch, hidden))


@converter("DynamicQuantizeLSTM", since=1, domain=MS,
           requires=("dynamic_quantize_linear", "matmul_integer", "sigmoid", "tanh"))
def _dynamic_quantize_lstm(ctx, node):
    _check_supported(ctx)
    seq, batch, size = ctx.shape(0)
    w, r = np.asarray(ctx.const(1)), np.asarray(ctx.const(2))
    hidden = int(ctx.attr("hidden_size", r.shape[1]))
    direction = ctx.attr("direction", "forward")
    dirs = 2 if direction == "bidirectional" else 1
    bias = np.asarray(ctx.const(3)) if ctx.has_input(3) else np.zeros((dirs, 8 * hidden))
    xq, xs, xz = ctx.op_multi("dynamic_quantize_linear",
                              ctx.op("reshape", ctx.input(0), shape=(seq * batch, size)))
    ys, hs, cs = [], [], []
    for d in range(dirs):
        proj = _scaled_product(ctx, xq, xs, xz, *_quantised_weight(
            ctx, w[d], _per_direction(ctx, 8, d), _per_direction(ctx, 9, d)))
        rw = _quantised_weight(ctx, r[d], _per_direction(ctx, 10, d), _per_direction(ctx, 11, d))
        proj = ctx.op("reshape", proj, shape=(seq, batch, 4 * hidden))
        b = ctx.constant((bias[d, :4 * hidden] + bias[d, 4 * hidden:]).astype(np.float32))
        h, c = _state(ctx, 5, d, batch, hidden), _state(ctx, 6, d, batch, hidden)
        steps = range(seq - 1, -1, -1) if (direction == "reverse" or d == 1) else range(seq)
        out = [None] * seq
        for t in steps:
            xt = ctx.op("reshape", ctx.op("strided_slice", proj, begin=(t,), end=(t + 1,)),
                        shape=(batch, 4 * hidden))
            rec = _recurrent(ctx, h, batch, *rw)
            gates = ctx.op("broadcast_add", ctx.op("elemwise_add", xt, rec), b)
            i, o, f, g = (ctx.op("strided_slice", gates, begin=(0, k * hidden),
                                 end=(batch, (k + 1) * hidden)) for k in range(4))
            i, o, f = (ctx.op("sigmoid", v) for v in (i, o, f))
            c = ctx.op("elemwise_add", ctx.op("elemwise_mul", c, f),
                       ctx.op("elemwise_mul", i, ctx.op("tanh", g)))
            h = ctx.op("elemwise_mul", o, ctx.op("tanh", c))
            out[t] = ctx.op("expand_dims", h, axis=0)
        ys.append(ctx.op("expand_dims", ctx.op("concatenate", *out, axis=0), axis=1))
        hs.append(ctx.op("expand_dims", h, axis=0))
        cs.append(ctx.op("expand_dims", c, axis=0))

    def join(parts, axis):
        return parts[0] if len(parts) == 1 else ctx.op("concatenate", *parts, axis=axis)

    return [join(ys, 1), join(hs, 0), join(cs, 0)][:ctx.num_outputs]
