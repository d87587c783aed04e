"""Mirror policies for the Gradient pass: which forward nodes to recompute in the backward pass.

A *mirrored* node is duplicated for the backward pass (``<name>_mirror``) and its gradient is
built from the duplicate, so the original's output can be freed as soon as the forward pass
no longer needs it; the duplicate is recomputed just before the backward ops that read it.

``sublinear`` is the policy of Chen et al. 2016, "Training Deep Nets with Sublinear Memory
Cost": cut the forward computation into segments at *articulation points* (positions where a
single entry carries everything later nodes need), keep only the segment boundaries
("checkpoints") and mirror everything else. With ``k`` segments of an ``n``-node chain the
backward pass holds ``k`` checkpoints plus one recomputed segment (``n / k`` values), so
``k ~ sqrt(n)`` gives O(sqrt(n)) memory for one extra forward pass of compute. The segment
budget is searched, as in the paper's Algorithm 2, to minimise the estimated peak.

``all`` is MXNet's ``MXNET_BACKWARD_DO_MIRROR`` policy: mirror every cheap node and keep the
outputs of heavy ones (dense, convolution: pattern out-elemwise-fusable or opaque).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

from nnvm.errors import AttrError, format_error
from nnvm.ir import Graph, Node, NodeEntry
from nnvm.op import OpPattern
from nnvm.runtime.memory import entry_bytes

#: Ops never mirrored: recomputing them would not reproduce the forward value (randomness)
#: or would repeat a side effect.
NEVER_MIRROR = frozenset({"dropout", "_assign", "device_copy"})

POLICIES = ("none", "sublinear", "all")

MirrorFn = Callable[[Node], bool]


def make_policy(policy, nodes: Sequence[Node], needs: set[int], ys: Sequence[NodeEntry],
                graph: Graph, segments: int | None = None,
                exclude: Sequence[str] = ()) -> tuple[MirrorFn | None, list[Node]]:
    """Resolve the ``grad_mirror`` option to a predicate over forward nodes.

    Args:
        policy: None/"none", "sublinear", "all", or a callable ``f(node) -> bool``.
        nodes: the forward nodes in topological order.
        needs: ``id()`` of the nodes whose gradient is built (they depend on some x).
        ys: the differentiated outputs.
        graph: the forward graph (its ``shape``/``shape_inputs`` attrs size the segments).
        segments: force this many segments instead of searching (``grad_mirror_segments``).
        exclude: op names never to mirror (``grad_mirror_exclude``).

    Returns:
        ``(predicate or None, checkpoint nodes)``.
    """
    skip = NEVER_MIRROR | set(exclude)

    def mirrorable(n: Node) -> bool:
        return n.op is not None and id(n) in needs and n.op.name not in skip and \
            not n.op.has_attr("FMutateInputs")

    if policy is None or policy is False or policy == "none":
        return None, []
    if callable(policy):
        return (lambda n: mirrorable(n) and bool(policy(n))), []
    if policy == "all":
        heavy = (OpPattern.OUT_ELEMWISE_FUSABLE, OpPattern.OPAQUE)

        def cheap(n: Node) -> bool:
            pattern = n.op.get_attr("TOpPattern")
            return mirrorable(n) and (pattern is None or pattern not in heavy)
        return cheap, []
    if policy in ("sublinear", True):
        mirrored, checkpoints = _sublinear(nodes, mirrorable, ys, graph, segments)
        return (lambda n: id(n) in mirrored), checkpoints
    raise AttrError(format_error("pass 'Gradient'", "unknown grad_mirror policy", POLICIES,
                                 repr(policy), fix="Use one of these or a callable node -> bool"))


def _sublinear(nodes: Sequence[Node], mirrorable: MirrorFn, ys: Sequence[NodeEntry],
               graph: Graph, segments: int | None) -> tuple[set[int], list[Node]]:
    order = [n for n in nodes if mirrorable(n)]
    if len(order) < 4:
        return set(), []
    cost = _node_costs(graph, ys, order)
    cuts = _articulation_points(nodes, order, ys)
    best = _choose_checkpoints(order, cost, cuts, segments)
    if not best:
        return set(), []
    last = max(best)
    keep = {id(order[p]) for p in best}
    mirrored = {id(n) for p, n in enumerate(order) if p < last and id(n) not in keep}
    return mirrored, [order[p] for p in sorted(best)]


def _node_costs(graph: Graph, ys: Sequence[NodeEntry], order: Sequence[Node]) -> list[int]:
    """Bytes of each node's outputs when shapes can be inferred, else one unit per node."""
    sizes = _infer_bytes(graph, ys)
    if sizes is None:
        return [1] * len(order)
    return [max(1, sizes.get(id(n), 1)) for n in order]


def _infer_bytes(graph: Graph, ys: Sequence[NodeEntry]) -> dict[int, int] | None:
    attrs = {k: graph.attrs[k] for k in ("shape_inputs", "dtype_inputs") if k in graph.attrs}
    if "shape_inputs" not in attrs:
        return None
    try:
        fwd = Graph(list(ys), attrs).apply(["InferShape", "InferType"])
    except Exception:  # noqa: BLE001 - sizes only steer a heuristic; unit costs still work
        return None
    idx, shapes, dtypes = fwd.index, fwd.attrs["shape"], fwd.attrs["dtype"]
    out = {}
    for nid, n in enumerate(idx.nodes):
        eids = range(idx.entry_rptr[nid], idx.entry_rptr[nid + 1])
        out[id(n)] = sum(entry_bytes(shapes[e], dtypes[e]) for e in eids)
    return out


def _articulation_points(nodes: Sequence[Node], order: Sequence[Node],
                         ys: Sequence[NodeEntry]) -> list[int]:
    """Positions ``p`` in ``order`` after which no earlier mirrorable node is read again.

    At such a position the node's output is the only forward value (besides variables,
    values that do not depend on x, and values kept anyway) that later nodes need: a valid
    checkpoint.
    """
    full = {id(n): p for p, n in enumerate(nodes)}
    last_use = {id(n): full[id(n)] for n in order}
    for n in nodes:
        for e in n.inputs:
            if id(e.node) in last_use:
                last_use[id(e.node)] = max(last_use[id(e.node)], full[id(n)])
    for e in ys:
        if id(e.node) in last_use:
            last_use[id(e.node)] = len(nodes)
    cuts, reach = [], -1
    for p, n in enumerate(order):
        if reach <= full[id(n)]:
            cuts.append(p)
        reach = max(reach, last_use[id(n)])
    return cuts


def _choose_checkpoints(order: Sequence[Node], cost: Sequence[int], cuts: Sequence[int],
                        segments: int | None) -> list[int]:
    """Greedy segmentation by a memory budget, searching the budget (Chen et al., Alg. 2).

    The estimated backward peak is (bytes kept at checkpoints) + (largest segment), which is
    what the backward pass holds while it recomputes one segment.
    """
    total = sum(cost)
    if segments is not None:
        budgets = [total / max(1, segments)]
    else:
        root = math.sqrt(total * max(cost) if total else 1)
        budgets = sorted({root * 2 ** (k / 4) for k in range(-12, 13)} | {total / math.sqrt(
            len(cuts) or 1)})
    cut_set = set(cuts)
    best, best_peak = [], float("inf")
    for budget in budgets:
        chosen, acc, seg_max, kept = [], 0, 0, 0
        for p, c in enumerate(cost):
            acc += c
            if p in cut_set and acc >= budget and p < len(order) - 1:
                chosen.append(p)
                kept += c
                seg_max = max(seg_max, acc - c)
                acc = 0
        seg_max = max(seg_max, acc)
        peak = kept + seg_max
        if chosen and peak < best_peak:
            best, best_peak = chosen, peak
    return best
