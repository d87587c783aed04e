"""EliminateDeadCode: stop computing values nobody reads.

Unreachable nodes already vanish when a graph is re-indexed from its outputs; what remains
dead is work *inside* live nodes: the unused outputs of a multi-output node, and inputs an op
ignores (``zeros_like(expensive(x))`` only needs x's shape, which is static here). Params and
input attributes of inputs that disappear are dropped too.
"""

from __future__ import annotations

from nnvm.graph_attrs import DERIVED
from nnvm.ir import Graph, NodeEntry
from nnvm.ops.common import op
from nnvm.pass_manager import PassSet
from nnvm.rewrite import ensure_inferred, substitute, with_outputs

PASSES = PassSet()


def _split_slices(node, used, shape):
    """``split`` with unused outputs -> one ``strided_slice`` per used output."""
    axis = node.attrs.get("axis", 1) % len(shape)
    sections = node.attrs["indices_or_sections"]
    if isinstance(sections, int):
        step = shape[axis] // sections
        bounds = [i * step for i in range(sections + 1)]
    else:
        bounds = [0, *sections, shape[axis]]
    out = {}
    for k in used:
        begin = [0] * len(shape)
        end = list(shape)
        begin[axis], end[axis] = bounds[k], bounds[k + 1]
        out[k] = op("strided_slice", node.inputs[0], begin=begin, end=end)
    return out


def _constant_like(fill):
    def variant(node, used, shape, dtype):
        return {0: op("full", shape=shape, dtype=dtype, fill_value=fill)}
    return variant


#: Multi-output ops with unused outputs: ``f(node, used output indices, shape) -> {k: entry}``.
PARTIAL_OUTPUT_VARIANTS = {"split": _split_slices}
#: Ops ignoring their inputs' values: ``f(node, used, out shape, out dtype) -> {0: entry}``.
IGNORED_INPUT_VARIANTS = {"zeros_like": _constant_like(0.0), "ones_like": _constant_like(1.0)}


def _has_op(name: str) -> bool:
    from nnvm.errors import OpNotFoundError
    from nnvm.op import get_op

    try:
        get_op(name)
        return True
    except OpNotFoundError:
        return False


@PASSES.define("EliminateDeadCode", invalidates=DERIVED, opt_level=1)
def eliminate_dead_code(graph: Graph) -> Graph:
    """Drop unused outputs of multi-output nodes, inputs read only for their static shape,
    and the params and input attributes of inputs that are gone."""
    idx = graph.index
    used: list[set[int]] = [set() for _ in idx.nodes]
    for ins in idx.inputs:
        for i, k, _ in ins:
            used[i].add(k)
    for i, k, _ in idx.outputs:
        used[i].add(k)
    candidates = [nid for nid, n in enumerate(idx.nodes) if n.op is not None and (
        (n.op.name in PARTIAL_OUTPUT_VARIANTS and len(used[nid]) < n.num_outputs)
        or n.op.name in IGNORED_INPUT_VARIANTS)]
    mapping: dict[tuple[int, int], NodeEntry] = {}
    if candidates:
        graph = ensure_inferred(graph)
        shapes, dtypes = graph.attrs["shape"], graph.attrs["dtype"]
        for nid in candidates:
            node = idx.nodes[nid]
            in_shape = shapes[idx.entry_id(*idx.inputs[nid][0][:2])]
            out_eid = idx.entry_id(nid, 0)
            if node.op.name in PARTIAL_OUTPUT_VARIANTS:
                if in_shape is None or not _has_op("strided_slice"):
                    continue
                new = PARTIAL_OUTPUT_VARIANTS[node.op.name](node, sorted(used[nid]), in_shape)
            else:
                if shapes[out_eid] is None or dtypes[out_eid] is None or not _has_op("full"):
                    continue
                new = IGNORED_INPUT_VARIANTS[node.op.name](node, used[nid], shapes[out_eid],
                                                           dtypes[out_eid])
            mapping.update({(nid, k): e for k, e in new.items()})
    g = with_outputs(graph, substitute(graph, mapping)) if mapping else graph
    names = set(g.index.input_names)
    pruned = {key: {k: v for k, v in g.attrs[key].items() if k in names}
              for key in ("params", "shape_inputs", "dtype_inputs")
              if isinstance(g.attrs.get(key), dict)}
    return g.with_attrs(**pruned)
