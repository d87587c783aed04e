"""ONNX ``lstm``, ``gru`` and ``rnn`` compiled for llvm: no recurrent layer runs on the host.

Two kernels:

* one step of a plain LSTM (``seq_len == 1``, forward, default activations, no clip,
  peepholes, coupled gates or sequence lengths), the streaming case of voice-activity and
  keyword models that feed their state back every frame: two small reductions (``x W^T``
  and ``h R^T``) and the gate arithmetic in TE, fused into one kernel; on the NumPy
  reference that step cost 126 us of a 250 us model;
* everything else (any sequence length, both directions, every ONNX attribute, GRU and
  RNN): the time loop written in TIR, ``recurrent_loop``.

Registered only when the lowering table has no rule of its own for the op.
"""

from __future__ import annotations

from tvm import te

from . import lowering
from .lowering import Lowering
from .recurrent_loop import DEFAULT_ACTS, sequence_kernel, unknown_activation


def _supports_rule(kind):
    def supports(attrs, shapes):
        x = shapes[0] if shapes else None
        if x is None or len(x) != 3:
            return f"{kind} with unknown input shape"
        name = unknown_activation(kind, attrs)
        if name is not None:
            return f"{kind} activation {name!r} (llvm lowers the ONNX activations)"
        return None
    return supports


def _single_step(attrs, ins) -> bool:
    """Whether the fused TE cell applies (else the TIR time loop)."""
    acts = tuple(a.lower() for a in attrs.get("activations") or ())
    return (int(ins[0].shape[0]) == 1 and attrs.get("layout", 0) == 0
            and attrs.get("direction", "forward") == "forward"
            and acts in ((), tuple(a.lower() for a in DEFAULT_ACTS["lstm"])) and not (
                attrs.get("clip") or attrs.get("input_forget") or attrs.get("use_peepholes")
                or attrs.get("use_sequence_lens")))


def _lstm(attrs, ins, outs, ctx):
    if not _single_step(attrs, ins):
        return sequence_kernel("lstm", attrs, ins, outs, ctx)
    return _cell(attrs, ins, outs, ctx)


def _cell(attrs, ins, outs, ctx):
    x, w, r = ins[0], ins[1], ins[2]
    rest = list(ins[3:])
    b = rest.pop(0) if attrs.get("use_bias") else None
    h0 = rest.pop(0) if attrs.get("use_initial_h") else None
    c0 = rest.pop(0) if attrs.get("use_initial_c") else None
    hid = int(attrs["hidden_size"])
    batch, n_in = int(x.shape[1]), int(x.shape[2])
    dtype = x.dtype
    kx = te.reduce_axis((0, n_in), "kx")
    xw = te.compute((batch, 4 * hid), lambda i, j: te.sum(x[0, i, kx] * w[0, j, kx], axis=kx),
                    name=ctx.name + "_xw")
    if h0 is not None:
        kh = te.reduce_axis((0, hid), "kh")
        hr = te.compute((batch, 4 * hid), lambda i, j: te.sum(h0[0, i, kh] * r[0, j, kh],
                                                              axis=kh), name=ctx.name + "_hr")
    else:
        hr = None

    def gate(i, j):
        v = xw[i, j]
        if hr is not None:
            v = v + hr[i, j]
        if b is not None:
            v = v + b[0, j] + b[0, 4 * hid + j]
        return v

    def cell(i, j):
        ig = te.sigmoid(gate(i, j))
        fg = te.sigmoid(gate(i, 2 * hid + j))
        g = te.tanh(gate(i, 3 * hid + j))
        c = c0[0, i, j] if c0 is not None else te.const(0, dtype)
        return fg * c + ig * g

    c_new = te.compute((batch, hid), cell, name=ctx.name + "_c")
    h_new = te.compute((batch, hid), lambda i, j: te.sigmoid(gate(i, hid + j)) *
                       te.tanh(c_new[i, j]), name=ctx.name + "_h")
    y = te.compute(outs[0][0], lambda s, d, i, j: h_new[i, j], name=ctx.name + "_y")
    y_h = te.compute(outs[1][0], lambda d, i, j: h_new[i, j], name=ctx.name + "_yh")
    y_c = te.compute(outs[2][0], lambda d, i, j: c_new[i, j], name=ctx.name + "_yc")
    return [y, y_h, y_c]


def _sequence_rule(kind):
    return lambda attrs, ins, outs, ctx: sequence_kernel(kind, attrs, ins, outs, ctx)


def install() -> None:
    """Add the rules unless the table already lowers the op (its own rule wins)."""
    rules = {"lstm": _lstm, "gru": _sequence_rule("gru"), "rnn": _sequence_rule("rnn")}
    for kind, compute in rules.items():
        if kind not in lowering.LOWERINGS:
            lowering.LOWERINGS[kind] = Lowering(compute, "extern", None, _supports_rule(kind))
