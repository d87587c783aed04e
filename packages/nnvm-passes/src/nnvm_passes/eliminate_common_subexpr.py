"""EliminateCommonSubexpr: nodes computing the same op on the same inputs become one node.

Frontends and gradient graphs repeat work (the same ``shape``-only reshape, the same
``expand_dims`` of a bias for two branches); merging them shrinks the graph that every later
pass and backend walks, and lets fusion see one producer instead of two.
"""

from __future__ import annotations

from nnvm.graph_attrs import DERIVED
from nnvm.ir import Graph
from nnvm.pass_manager import PassSet
from nnvm.rewrite import is_pure, substitute, with_outputs

PASSES = PassSet()


def _key(node, inputs) -> tuple | None:
    """A hashable identity of what the node computes, or None if it must stay unique."""
    if node.op is None or node.subgraphs or not is_pure(node):
        return None
    attrs = tuple(sorted((k, repr(v)) for k, v in node.attrs.items()))
    return node.op.name, attrs, tuple(inputs)


@PASSES.define("EliminateCommonSubexpr", invalidates=DERIVED, opt_level=2)
def eliminate_common_subexpr(graph: Graph) -> Graph:
    """Merge nodes with the same op, attributes and (already merged) inputs.

    Stateful, random and mutating ops, and nodes with control dependencies, are never merged.
    """
    idx = graph.index
    canon = list(range(idx.num_nodes))
    first: dict[tuple, int] = {}
    mapping = {}
    for nid, node in enumerate(idx.nodes):
        key = _key(node, [(canon[i], k, v) for i, k, v in idx.inputs[nid]])
        if key is None:
            continue
        other = first.setdefault(key, nid)
        if other != nid:
            canon[nid] = other
            for k in range(node.num_outputs):
                mapping[(nid, k)] = (other, k)
    if not mapping:
        return graph
    return with_outputs(graph, substitute(graph, mapping))
