"""AlterOpLayout: let a backend swap an op for a variant in the layout it computes fastest.

An op may carry the attribute ``FAlterOpLayout``: ``f(attrs, inputs, tinfos) -> NodeEntry |
None``, where ``inputs`` are the node's input entries and ``tinfos`` one ``(shape, dtype)``
per input. It returns an equivalent replacement (inputs and output in the original layouts,
``__layout_transform__`` nodes around the new op; see ``layout_transform``) or None to keep
the node. Weight transforms depend only on params, so PrecomputePrune folds them at build
time; CorrectLayout then cancels the activation transforms between consecutive ops.
"""

from __future__ import annotations

from nnvm.graph_attrs import DERIVED
from nnvm.ir import NodeEntry
from nnvm.op import get_attr_map
from nnvm.ops.common import op
from nnvm.pass_manager import PassSet
from nnvm.rewrite import Match, Pat, Rule, ensure_inferred, rewrite

PASSES = PassSet()


def layout_transform(e: NodeEntry, src: str, dst: str) -> NodeEntry:
    """``__layout_transform__(e)`` from ``src`` to ``dst`` (``e`` itself when they agree)."""
    return e if src == dst else op("__layout_transform__", e, src_layout=src, dst_layout=dst)


def _alter(m: Match) -> NodeEntry | None:
    node = m.root
    hook = node.op.get_attr("FAlterOpLayout")
    tinfos = [(m.shape(e), m.dtype(e)) for e in node.inputs]
    if any(s is None for s, _ in tinfos):
        return None
    return hook(dict(node.attrs), list(node.inputs), tinfos)


@PASSES.define("AlterOpLayout", requires=("shape", "dtype"), invalidates=DERIVED, opt_level=3)
def alter_op_layout(graph):
    """Replace each op that has an ``FAlterOpLayout`` hook by what the hook returns."""
    ops = tuple(get_attr_map("FAlterOpLayout"))
    if not ops:
        return graph
    return rewrite(ensure_inferred(graph), [Rule("FAlterOpLayout", Pat(ops), _alter)])
