"""Gradient: reverse-mode automatic differentiation of a graph (NNVM's ``Gradient`` pass).

The pass walks the forward graph from ``ys`` in reverse topological order, aggregates the
gradients that reach each output (one -> itself, several -> ``elemwise_sum``), and calls each
op's ``FGradient`` to produce the gradients of its inputs. Backward ops are ordinary registered
ops, so every backend that runs the forward graph runs the gradient graph too.

Only nodes that depend on some x are differentiated, so a non-differentiable op elsewhere
(an argmax on a label path, say) is not an error; one on the path from an x to a y is, and
the error names it.

Graph attributes read (seed them with ``graph.apply("Gradient", grad_ys=..., ...)``):
    grad_ys: list of NodeEntry to differentiate (their gradients are summed).
    grad_xs: list of NodeEntry to differentiate with respect to.
    grad_ys_out_grad: optional list of NodeEntry, the head gradients (default ones_like(y)).
    grad_aggregate: ``"elemwise_sum"`` (default) or ``f(list[NodeEntry]) -> NodeEntry``.
    zero_ops: names of ops whose outputs are known zeros (default zeros_like, zeros); a
        non-differentiable op whose output gradients are all zeros passes zeros on.
    grad_mirror: memory policy: None (keep every forward value), ``"sublinear"`` (Chen et
        al. 2016 checkpointing, O(sqrt(n)) activation memory for about one extra forward
        pass), ``"all"`` (recompute every cheap op, MXNet's mirror policy), or a callable
        ``f(node) -> bool``. When unset, ``build_config(sublinear_memory=True)`` selects
        ``"sublinear"``.
    grad_mirror_segments: force the number of sublinear segments instead of searching.
    grad_mirror_exclude: op names never to recompute.
    grad_copy_op: op used to make repeated gradient outputs distinct entries (None: allowed).

Provides a new graph whose outputs are d(sum ys)/d(xs), one per x, plus ``grad_num_mirrored``
(recomputed nodes) and ``grad_checkpoints`` (names of the kept segment boundaries).
"""

from __future__ import annotations

from typing import Callable, Sequence

from nnvm.errors import AttrError, PassError, format_error, node_where
from nnvm.graph_attrs import DERIVED
from nnvm.ir import Graph, Node, NodeEntry, make_node, post_order
from nnvm.pass_manager import PassSet

from ._mirror import make_policy

PASSES = PassSet()

DEFAULT_ZERO_OPS = ("zeros_like", "zeros")

#: Graph attributes that stay valid for the gradient graph (they are keyed by input name).
_CARRIED = ("shape_inputs", "dtype_inputs", "params", "opt_level")


class GradientError(PassError):
    """The graph cannot be differentiated as asked (non-differentiable op, unreachable x)."""


@PASSES.define("Gradient", requires=("grad_ys", "grad_xs"),
               provides=("grad_num_mirrored", "grad_checkpoints"), invalidates=DERIVED)
def gradient(graph: Graph) -> Graph:
    """Reverse-mode autodiff: outputs become d(sum grad_ys)/d(grad_xs), one per x.

    Options (graph attributes): ``grad_ys_out_grad`` head gradients, ``grad_aggregate``
    (``elemwise_sum``), ``zero_ops``, and ``grad_mirror`` = ``"sublinear"`` (or
    ``build_config(sublinear_memory=True)``) to recompute forward segments in the backward
    pass for O(sqrt(n)) activation memory (Chen et al. 2016); ``"all"`` mirrors cheap ops.
    """
    ys = _entries(graph, "grad_ys")
    xs = _entries(graph, "grad_xs")
    if not ys:
        raise GradientError("pass 'Gradient': grad_ys is empty. Give the outputs to "
                            "differentiate")
    head_grads = _head_grads(graph, ys)
    aggregate = _aggregator(graph.attrs.get("grad_aggregate", "elemwise_sum"))
    zero_ops = set(graph.attrs.get("zero_ops") or DEFAULT_ZERO_OPS)

    nodes = post_order(e.node for e in ys)
    positions = {id(n): p for p, n in enumerate(nodes)}
    for i, x in enumerate(xs):
        if id(x.node) not in positions:
            raise GradientError(format_error(
                f"pass 'Gradient', x #{i} ('{x.node.name}')",
                f"Cannot differentiate with respect to the {i}-th variable '{x.node.name}': "
                f"it is not reachable from ys",
                fix="Pass only inputs that the outputs depend on (see "
                    "symbol.list_input_names())"))
    needs = _depends_on_xs(nodes, xs)

    mirror_policy = graph.attrs.get("grad_mirror", _config_policy())
    mirror_fn, checkpoints = make_policy(
        mirror_policy, nodes, needs, ys, graph, graph.attrs.get("grad_mirror_segments"),
        graph.attrs.get("grad_mirror_exclude") or ())
    mirrors = _build_mirrors(nodes, mirror_fn)

    pending: dict[tuple[int, int], list[NodeEntry]] = {}
    known = {id(n) for n in nodes} | {id(m) for m in mirrors.values()} | \
        {id(g.node) for g in head_grads}
    for y, g in zip(ys, head_grads):
        pending.setdefault((id(y.node), y.index), []).append(g)

    for node in reversed(nodes):
        if node.op is None or id(node) not in needs:
            continue
        out_grads = [_collect(pending, (id(node), i), aggregate, zero_ops)
                     for i in range(node.num_outputs)]
        if all(g is None for g in out_grads):
            continue
        fwd = mirrors.get(id(node), node)
        in_grads = _node_gradient(node, fwd, out_grads, zero_ops)
        _schedule_leaf_grads_first(node, in_grads, needs, known)
        for e, g in zip(node.inputs, in_grads):
            if g is not None and id(e.node) in needs:
                pending.setdefault((id(e.node), e.index), []).append(g)
                known.add(id(g.node))

    outputs = []
    for x in xs:
        g = _collect(pending, (id(x.node), x.index), aggregate, zero_ops)
        outputs.append(g if g is not None else
                       NodeEntry(make_node("zeros_like", [x], name=f"{x.node.name}_zero_grad")))
    outputs = _distinct(outputs, graph.attrs.get("grad_copy_op"))
    attrs = {k: graph.attrs[k] for k in _CARRIED if k in graph.attrs}
    attrs.update(grad_num_mirrored=len(mirrors),
                 grad_checkpoints=[n.name for n in checkpoints])
    return Graph(outputs, attrs)


# -- options -----------------------------------------------------------------------------------

def _entries(graph: Graph, key: str) -> list[NodeEntry]:
    raw = graph.attrs.get(key)
    if raw is None:
        raise AttrError(f"pass 'Gradient': graph attribute '{key}' is missing. Set it to a list "
                        f"of NodeEntry (e.g. symbol.outputs)")
    raw = raw.outputs if hasattr(raw, "outputs") else raw
    out = list(raw) if isinstance(raw, (list, tuple)) else [raw]
    for i, e in enumerate(out):
        if not isinstance(e, NodeEntry):
            raise AttrError(format_error(f"pass 'Gradient', {key}[{i}]", "is not a NodeEntry",
                                         "NodeEntry", type(e).__name__,
                                         fix="Use symbol.outputs to get entries"))
    return out


def _head_grads(graph: Graph, ys: Sequence[NodeEntry]) -> list[NodeEntry]:
    given = graph.attrs.get("grad_ys_out_grad")
    if given is None:
        return [NodeEntry(make_node("ones_like", [y], name=f"{y.node.name}_head_grad"))
                for y in ys]
    given = _entries(graph, "grad_ys_out_grad")
    if len(given) != len(ys):
        raise AttrError(format_error("pass 'Gradient': grad_ys_out_grad",
                                     "needs one head gradient per y", len(ys), len(given)))
    return given


def _aggregator(spec) -> Callable[[list[NodeEntry]], NodeEntry]:
    if callable(spec):
        return spec
    if spec != "elemwise_sum":
        raise AttrError(format_error("pass 'Gradient': grad_aggregate", "unknown aggregator",
                                     "'elemwise_sum' or a callable", repr(spec)))
    return lambda gs: NodeEntry(make_node("elemwise_sum", gs, {"num_args": len(gs)}))


def _config_policy():
    """``build_config(sublinear_memory=True)`` switches the sublinear policy on."""
    from nnvm.compiler import build_module

    cfg = build_module._config.get()
    if cfg is not None and cfg.extra.get("sublinear_memory"):
        return "sublinear"
    return None


# -- the traversal -------------------------------------------------------------------------

def _depends_on_xs(nodes: Sequence[Node], xs: Sequence[NodeEntry]) -> set[int]:
    """``id()`` of every node on some path from an x (x nodes included)."""
    needs = {id(x.node) for x in xs}
    for n in nodes:
        if any(id(e.node) in needs for e in n.inputs):
            needs.add(id(n))
    return needs


def _build_mirrors(nodes: Sequence[Node], mirror_fn) -> dict[int, Node]:
    """Duplicate the forward nodes chosen by the policy, chained to each other's duplicates.

    The ``__mirror__`` annotation keeps common-subexpression elimination from merging a
    duplicate back into its original, which would undo the memory saving.
    """
    if mirror_fn is None:
        return {}
    mirrors: dict[int, Node] = {}
    for n in nodes:
        if n.op is None or not mirror_fn(n):
            continue
        inputs = [NodeEntry(mirrors[id(e.node)], e.index, e.version) if id(e.node) in mirrors
                  else e for e in n.inputs]
        m = Node(n.op, f"{n.name}_mirror", {**n.attrs, "__mirror__": "1"}, inputs)
        m.info = dict(n.info)
        mirrors[id(n)] = m
    return mirrors


def _collect(pending: dict, key: tuple[int, int], aggregate, zero_ops: set[str]
             ) -> NodeEntry | None:
    """The aggregated gradient of one entry, memoised (an x may be an inner entry too)."""
    g = _sum(pending.get(key, []), aggregate, zero_ops)
    if g is not None:
        pending[key] = [g]
    return g


def _schedule_leaf_grads_first(node: Node, in_grads: list[NodeEntry | None], needs: set[int],
                               known: set[int]) -> None:
    """Make the gradient flowing further back wait for this node's leaf gradients.

    Execution order is the DFS order from the outputs, which lists the x gradients in x
    order; without a hint a weight gradient (dW_k = og_k^T a_k) is only computed after the
    whole backward chain, keeping every og_k and a_k alive: O(n) memory even with mirroring.
    A control dependency from the node that continues the chain (only one this FGradient call
    just created) to the leaf gradients computes them as soon as their inputs exist.
    """
    leaves = [g.node for e, g in zip(node.inputs, in_grads)
              if g is not None and e.node.op is None and id(e.node) in needs]
    if not leaves:
        return
    for e, g in zip(node.inputs, in_grads):
        if g is None or e.node.op is None or id(e.node) not in needs or id(g.node) in known:
            continue
        g.node.control_deps.extend(x for x in leaves if x is not g.node
                                   and all(x is not c for c in g.node.control_deps))


def _sum(grads: list[NodeEntry], aggregate, zero_ops: set[str]) -> NodeEntry | None:
    """Aggregate the gradients reaching one entry; known zeros are dropped when others exist."""
    if not grads:
        return None
    nonzero = [g for g in grads if not _is_zero(g, zero_ops)]
    grads = nonzero or grads[:1]
    return grads[0] if len(grads) == 1 else aggregate(grads)


def _is_zero(e: NodeEntry, zero_ops: set[str]) -> bool:
    return e.node.op is not None and e.node.op.name in zero_ops


def _node_gradient(node: Node, fwd: Node, out_grads: list[NodeEntry | None],
                   zero_ops: set[str]) -> list[NodeEntry | None]:
    fgrad = node.op.get_attr("FGradient")
    if fgrad is None:
        if all(g is None or _is_zero(g, zero_ops) for g in out_grads):
            return [None] * len(node.inputs)
        raise GradientError(format_error(
            node_where(node), "is not differentiable (no FGradient) but lies on the path "
            "from an x to a y",
            fix="Cut the path with block_grad/stop_gradient, differentiate with respect to "
                "other inputs, or register FGradient for the op"))
    filled = [g if g is not None else
              NodeEntry(make_node("zeros_like", [NodeEntry(fwd, i, 0)])) for i, g in
              enumerate(out_grads)]
    try:
        in_grads = fgrad(fwd, filled)
    except PassError:
        raise
    except Exception as exc:  # a plugin's FGradient crashed: say where
        raise GradientError(format_error(node_where(node), f"FGradient failed: {exc!r}")) \
            from exc
    in_grads = list(in_grads)
    if len(in_grads) != len(node.inputs):
        raise GradientError(format_error(node_where(node), "FGradient returned the wrong number "
                                         "of input gradients", len(node.inputs), len(in_grads)))
    for i, g in enumerate(in_grads):
        if g is not None and not isinstance(g, NodeEntry):
            raise GradientError(format_error(node_where(node), f"FGradient returned a "
                                             f"{type(g).__name__} for input {i}",
                                             "NodeEntry or None", type(g).__name__))
    return in_grads


def _distinct(outputs: list[NodeEntry], copy_op: str | None) -> list[NodeEntry]:
    if copy_op is None:
        return outputs
    seen, out = set(), []
    for e in outputs:
        key = (id(e.node), e.index)
        out.append(NodeEntry(make_node(copy_op, [e])) if key in seen else e)
        seen.add(key)
    return out
