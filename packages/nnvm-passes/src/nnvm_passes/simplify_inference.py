"""SimplifyInference: rewrite training-only ops into plain inference arithmetic.

``batch_norm`` becomes a per-channel scale and shift computed from its parameters (which
PrecomputePrune then folds into two constants, and FoldScaleAxis into the conv weights), and
``dropout`` becomes the identity. As in NNVM this runs at every opt level: a backend never
needs a batch_norm or dropout kernel for inference.
"""

from __future__ import annotations

from nnvm.graph_attrs import DERIVED
from nnvm.ir import NodeEntry
from nnvm.ops.common import op
from nnvm.pass_manager import PassSet
from nnvm.rewrite import P, Match, Rule, ensure_inferred, rewrite

PASSES = PassSet()


def _expand(e: NodeEntry, num_newaxis: int) -> NodeEntry:
    """Give a per-channel vector trailing unit axes so it broadcasts against the data."""
    return op("expand_dims", e, axis=1, num_newaxis=num_newaxis) if num_newaxis > 0 else e


def _batch_norm(m: Match) -> NodeEntry | None:
    """``(x - mean) / sqrt(var + eps) * gamma + beta`` as ``x * scale + shift``."""
    node = m.root
    data, gamma, beta, mean, var = node.inputs
    shape = m.shape(data)
    if shape is None:
        return None
    axis = node.attrs.get("axis", 1) % len(shape)
    scale = op("__rdiv_scalar__", op("sqrt", op("__add_scalar__", var,
                                                scalar=float(node.attrs.get("epsilon", 1e-5)))),
               scalar=1.0)
    if node.attrs.get("scale", True):
        scale = op("elemwise_mul", scale, gamma)
    shift = op("elemwise_mul", op("negative", mean), scale)
    if node.attrs.get("center", True):
        shift = op("elemwise_add", shift, beta)
    trailing = len(shape) - axis - 1
    out = op("broadcast_mul", data, _expand(scale, trailing))
    return op("broadcast_add", out, _expand(shift, trailing), node_name=node.name)


RULES = [
    Rule("batch_norm -> scale and shift", P("batch_norm"), _batch_norm),
    Rule("dropout -> identity", P("dropout"), lambda m: m.root.inputs[0]),
]


@PASSES.define("SimplifyInference", invalidates=DERIVED, opt_level=0)
def simplify_inference(graph):
    """Replace batch_norm by a per-channel multiply-add and dropout by the identity.

    Shapes are inferred first when missing (it runs before InferShape in the pipeline). Only
    nodes whose hidden outputs (batch_norm's moving statistics, dropout's mask) are
    unused are rewritten, so a training graph that reads them keeps its batch_norm.
    """
    if not any(n.op is not None and n.op.name in ("batch_norm", "dropout")
               for n in graph.index.nodes):
        return graph  # nothing to simplify: skip the shape inference this pass needs
    return rewrite(ensure_inferred(graph), RULES)
