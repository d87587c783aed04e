"""One step of an ONNX ``lstm`` as one kernel: the streaming (per-frame) case.

Voice-activity and keyword models run their LSTM one frame at a time with the state fed
back (``seq_len == 1``, ``initial_h``/``initial_c`` inputs). On the NumPy reference that
single step cost 126 us of a 250 us model; here it is two small reductions (``x W^T`` and
``h R^T``) and the gate arithmetic, fused into one kernel that writes ``Y``, ``Y_h`` and
``Y_c``. Longer sequences, peepholes, clipping, coupled gates, sequence lengths and
non-default activations keep the reference kernel (``supports`` says which). Registered
only when the lowering table has no ``lstm`` rule of its own.
"""

from __future__ import annotations

from tvm import te

from . import lowering
from .lowering import Lowering

_DEFAULT = ("Sigmoid", "Tanh", "Tanh")


def _supports(attrs, shapes):
    x = shapes[0] if shapes else None
    if x is None or len(x) != 3:
        return "lstm with unknown input shape"
    if attrs.get("layout", 0) != 0:
        return "lstm with layout=1 (llvm lowers the (seq, batch, input) layout)"
    if x[0] != 1:
        return f"lstm over {x[0]} steps (llvm lowers single steps: streaming models)"
    if attrs.get("direction") == "bidirectional":
        return "bidirectional lstm"
    acts = tuple(attrs.get("activations") or ())
    if acts and tuple(a.lower() for a in acts) != tuple(a.lower() for a in _DEFAULT):
        return f"lstm activations {acts}"
    if attrs.get("clip") or attrs.get("input_forget") or attrs.get("use_peepholes") \
            or attrs.get("use_sequence_lens"):
        return "lstm with clip, input_forget, peepholes or sequence_lens"
    return None


def _compute(attrs, ins, outs, ctx):
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


def install() -> None:
    """Add the rule unless the table already lowers ``lstm`` (its own rule wins)."""
    if "lstm" not in lowering.LOWERINGS:
        lowering.LOWERINGS["lstm"] = Lowering(_compute, "injective", None, _supports)
