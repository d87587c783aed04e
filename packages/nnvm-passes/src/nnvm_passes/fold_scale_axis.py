"""FoldScaleAxis: fold per-channel scales into the weights of conv2d and dense.

After SimplifyInference a batch norm is ``conv(x) * scale + shift`` with constant ``scale``.
Multiplying the conv's weight (and bias) by ``scale`` instead removes a full pass over the
activation; PrecomputePrune then computes the scaled weight once at build time. Both of
NNVM's directions are handled:

* backward (scale after the op): ``(conv(x, w) + b) * s  ->  conv(x, w * s) + b * s``, through
  any chain of per-channel constant ``broadcast_add``/``broadcast_sub`` whose values nobody
  else reads;
* forward (scale before the op): ``conv(x * s, w) -> conv(x, w * s)`` on the input channels
  (zero padding commutes with scaling), for ordinary and depthwise convolutions and dense.
"""

from __future__ import annotations

from nnvm.graph_attrs import DERIVED
from nnvm.ir import NodeEntry, make_node
from nnvm.ops.common import op
from nnvm.pass_manager import PassSet
from nnvm.rewrite import P, Match, Rule, ensure_inferred, rewrite

PASSES = PassSet()

_SHIFTS = ("broadcast_add", "broadcast_sub")


def _axes(node) -> tuple[int, int, int, int] | None:
    """(output channel axis, data channel axis, weight out axis, weight in axis)."""
    if node.op.name == "dense":
        return -1, -1, 0, 1
    if node.op.name == "conv2d":
        lay, klay = node.attrs["layout"], node.attrs["kernel_layout"]
        return lay.index("C"), lay.index("C"), klay.index("O"), klay.index("I")
    return None


def _channel_vector(m: Match, s: NodeEntry, ref_shape, axis: int):
    """``(s as a 1-D vector, its length)`` if ``s`` is constant and scales only ``axis`` of a
    tensor of ``ref_shape`` (length 1: a uniform scale); otherwise None."""
    shape = m.shape(s)
    if shape is None or ref_shape is None or not m.is_constant(s) or len(shape) > len(ref_shape):
        return None
    full = (1,) * (len(ref_shape) - len(shape)) + tuple(shape)
    axis %= len(ref_shape)
    if any(d != 1 for i, d in enumerate(full) if i != axis) or full[axis] not in (1,
                                                                             ref_shape[axis]):
        return None
    return op("reshape", s, shape=(full[axis],)), full[axis]


def _scale_weight(w: NodeEntry, vec: NodeEntry, wshape, axis: int, size: int) -> NodeEntry:
    target = [1] * len(wshape)
    target[axis] = size
    return op("broadcast_mul", w, op("reshape", vec, shape=tuple(target)))


def _rebuild(node, data: NodeEntry, weight: NodeEntry, bias: NodeEntry | None) -> NodeEntry:
    ins = [data, weight] + ([bias] if bias is not None else [])
    return NodeEntry(make_node(node.op.name, ins, node.attrs, node.name), 0, 0)


def _fold_backward(m: Match) -> NodeEntry | None:
    """``broadcast_mul(producer_chain, s)``: push ``s`` into the producer's weight and bias."""
    for a, s in (m.root.inputs, reversed(m.root.inputs)):
        chain, e = [], a
        while e.node.op is not None and e.node.op.name in _SHIFTS and m.uses(e) == 1:
            chain.append(e.node)
            e = e.node.inputs[0]
        if e.node.op is None or _axes(e.node) is None or m.uses(e) != 1:
            continue
        prod, out_shape = e.node, m.shape(e)
        out_axis, _, w_axis, _ = _axes(prod)
        found = _channel_vector(m, s, out_shape, out_axis)
        if found is None or not all(_channel_vector(m, n.inputs[1], out_shape, out_axis)
                                    for n in chain):
            continue
        vec, size = found
        w = _scale_weight(prod.inputs[1], vec, m.shape(prod.inputs[1]), w_axis, size)
        b = op("broadcast_mul", prod.inputs[2], vec) if len(prod.inputs) > 2 else None
        out = _rebuild(prod, prod.inputs[0], w, b)
        for n in reversed(chain):
            out = op(n.op.name, out, op("broadcast_mul", n.inputs[1], s), node_name=n.name)
        return out
    return None


def _fold_forward(m: Match) -> NodeEntry | None:
    """``conv(broadcast_mul(x, s), w)``: scale the weight's input channels instead."""
    node = m.root
    mul = node.inputs[0]
    if mul.node.op is None or mul.node.op.name != "broadcast_mul" or m.uses(mul) != 1:
        return None
    _, in_axis, w_out, w_in = _axes(node)
    wshape = m.shape(node.inputs[1])
    groups = node.attrs.get("groups", 1)
    data_shape = m.shape(mul)
    if wshape is None or data_shape is None:
        return None
    channels = data_shape[in_axis]
    if groups == 1:
        w_axis = w_in
    elif groups == channels and wshape[w_out] == channels and wshape[w_in] == 1:
        w_axis = w_out  # depthwise: output channel k reads input channel k only
    else:
        return None
    for x, s in (mul.node.inputs, reversed(mul.node.inputs)):
        if m.is_constant(x) or m.shape(x) != data_shape:
            continue
        found = _channel_vector(m, s, data_shape, in_axis)
        if found is None:
            continue
        vec, size = found
        w = _scale_weight(node.inputs[1], vec, wshape, w_axis, size)
        return _rebuild(node, x, w, node.inputs[2] if len(node.inputs) > 2 else None)
    return None


RULES = [
    Rule("conv/dense then per-channel scale", P("broadcast_mul"), _fold_backward),
    Rule("per-channel scale then conv/dense", P(("conv2d", "dense")), _fold_forward),
]


@PASSES.define("FoldScaleAxis", requires=("shape",), invalidates=DERIVED, opt_level=3)
def fold_scale_axis(graph):
    """Fold constant per-channel ``broadcast_mul`` scales into conv2d/dense weights and biases
    (backward: scale after the op; forward: scale before it). Needs ``params`` to tell
    constant scales from activations; the scaled weights are folded by PrecomputePrune."""
    return rewrite(ensure_inferred(graph), RULES)
