"""ONNX ``lstm``, ``gru`` and ``rnn`` compiled for llvm: no recurrent layer runs on the host.

Every recurrent node, whatever its sequence length, direction or attributes, becomes one
kernel whose time loop is written in TIR (``recurrent_loop``). The per-frame streaming step
of voice-activity and keyword models (``seq_len == 1``, state fed back) takes the same
kernel: its dot products on the weight rows ran a 128-unit step in 13 us where the earlier
fused TE cell (two scalar reductions and the gate arithmetic) took 46 us and onnxruntime
16 us; on the NumPy reference that step had cost 126 us of a 250 us model. Its products
now run as dot tiles reduced by register shuffles (``recurrent_loop.gemm_dots``): 5.6 us,
and 5.3 us once its register tiles were stack slots instead of runtime workspace blocks
(``recurrent_loop.registers``; a 64-unit GRU step 1.8 -> 1.5 us).

Weights larger than L2 are packed at load (the rule's ``pack``: ``recurrent_loop.
packed_weights``), which took the 20-step bidirectional 512-unit LSTM from 3.47 to 2.69 ms
at 1 thread and 1.79 to 1.30 ms at 2 (load about 3).

Registered only when the lowering table has no rule of its own for the op.
"""

from __future__ import annotations

from . import lowering
from .lowering import Lowering
from .recurrent_loop import packed_weights, sequence_kernel, unknown_activation


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


def _sequence_rule(kind):
    return lambda attrs, ins, outs, ctx: sequence_kernel(kind, attrs, ins, outs, ctx)


def _pack_rule(kind):
    return lambda attrs, shapes, ctx: packed_weights(kind, attrs, shapes, ctx.vector_lanes)


def install() -> None:
    """Add the rules unless the table already lowers the op (its own rule wins)."""
    for kind in ("lstm", "gru", "rnn"):
        if kind not in lowering.LOWERINGS:
            lowering.LOWERINGS[kind] = Lowering(_sequence_rule(kind), "extern",
                                                _pack_rule(kind), _supports_rule(kind))
