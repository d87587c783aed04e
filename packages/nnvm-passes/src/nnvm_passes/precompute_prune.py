"""PrecomputePrune: evaluate every subgraph that depends only on params and constants once,
at build time, and feed its result to the graph as a new param.

This is NNVM's only constant folding. It is what makes the rewrites of the other passes free:
SimplifyInference's ``1 / sqrt(var + eps) * gamma``, FoldScaleAxis's scaled weights and
AlterOpLayout's ``__layout_transform__`` of weights all become plain params here.
"""

from __future__ import annotations

import numpy as np

from nnvm.graph_attrs import DERIVED
from nnvm.interpreter import Interpreter
from nnvm.ir import Graph, Node, NodeEntry
from nnvm.pass_manager import PassSet
from nnvm.rewrite import is_pure, substitute, with_outputs

PASSES = PassSet()


def constant_nodes(graph: Graph, params=None) -> list[bool]:
    """Per node id: does its value depend only on params and input-free ops?"""
    idx = graph.index
    params = graph.attrs.get("params") or {} if params is None else params
    const: list[bool] = []
    for nid, node in enumerate(idx.nodes):
        if node.op is None:
            const.append(node.name in params)
        else:
            const.append(is_pure(node) and all(const[i] for i, _, _ in idx.inputs[nid]))
    return const


def _param_name(idx, i: int, k: int, consumer) -> str:
    """``<consumer>_<input name>`` (e.g. ``conv1_weight_folded``) when one op reads it."""
    node = idx.nodes[i]
    if consumer is not None:
        cid, ins = consumer
        c = idx.nodes[cid]
        try:
            return f"{c.name}_{c.op.input_names(c.attrs)[ins.index((i, k))]}_folded"
        except (ValueError, IndexError):
            pass
    return node.name if node.num_outputs == 1 else f"{node.name}_output{k}"


@PASSES.define("PrecomputePrune", provides=("params",), invalidates=DERIVED, opt_level=2)
def precompute_prune(graph: Graph) -> Graph:
    """Replace each param-only subgraph by a new param holding its precomputed value.

    Reads graph attribute ``params`` ({name: array}); returns the graph with ``params``
    updated (new params added, those no longer referenced dropped) and ``shape_inputs`` /
    ``dtype_inputs`` extended so that shape and type inference see the new inputs.
    """
    idx = graph.index
    params = dict(graph.attrs.get("params") or {})
    const = constant_nodes(graph, params)
    frontier: list[tuple[int, int]] = []  # (nid, k) constant op entries read by non-constants
    seen = set()
    edges = [(nid, i, k) for nid in range(idx.num_nodes) for i, k, _ in idx.inputs[nid]]
    edges += [(None, i, k) for i, k, _ in idx.outputs]
    for consumer, i, k in edges:
        if const[i] and idx.nodes[i].op is not None and \
                (consumer is None or not const[consumer]) and (i, k) not in seen:
            seen.add((i, k))
            frontier.append((i, k))
    if not frontier:
        return graph
    sub = Graph([NodeEntry(idx.nodes[i], k) for i, k in frontier])
    values = Interpreter(sub).run({n: params[n] for n in sub.index.input_names})
    taken = {idx.nodes[i].name for i in idx.input_nodes} | set(params)
    consumers = {}
    for consumer, i, k in edges:
        if consumer is not None and not const[consumer]:
            consumers.setdefault((i, k), (consumer, [e[:2] for e in idx.inputs[consumer]]))
    mapping = {}
    shape_inputs = dict(graph.attrs.get("shape_inputs") or {})
    dtype_inputs = dict(graph.attrs.get("dtype_inputs") or {})
    for (i, k), value in zip(frontier, values):
        name = _param_name(idx, i, k, consumers.get((i, k)))
        base, n = name, 0
        while name in taken:
            n += 1
            name = f"{base}_{n}"
        taken.add(name)
        value = np.asarray(value)
        params[name] = value
        shape_inputs[name] = tuple(value.shape)
        dtype_inputs[name] = value.dtype.name
        mapping[(i, k)] = NodeEntry(Node(None, name, {}), 0, 0)
    return with_outputs(graph, substitute(graph, mapping), params=params,
                        shape_inputs=shape_inputs, dtype_inputs=dtype_inputs)
