"""Graph rewriting: patterns and rules as data, applied bottom-up to a fixed point.

Algebraic simplification, inference simplification and lowering tables are lists of
``Rule(name, pattern, fn)``; ``rewrite(graph, rules)`` walks the graph once in topological
order, so every rule sees inputs that are already rewritten, and re-tries the rules on each
fresh replacement until none fires (the idea of tinygrad's ``UPat``). Global passes (fusion,
memory planning) stay plain functions; ``substitute`` and ``with_outputs`` serve them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

from . import graph_attrs
from .errors import NNVMError, PassError, format_error
from .ir import Graph, Node, NodeEntry, node_map

@dataclasses.dataclass(frozen=True)
class Pat:
    """A pattern over a NodeEntry.

    Attributes:
        op: op name or tuple of names (aliases allowed); None matches any entry, variables too.
        inputs: sub-patterns, one per input; None accepts any inputs.
        attrs: required attribute values, or a predicate ``f(attrs) -> bool``.
        name: bind the matched entry under this name (a name bound twice must match one entry).
    """

    op: str | tuple[str, ...] | None = None
    inputs: tuple["Pat", ...] | None = None
    attrs: Mapping[str, Any] | Callable[[dict], bool] | None = None
    name: str | None = None


def P(op: str | tuple[str, ...], *inputs: Pat, name: str | None = None,
      where: Callable[[dict], bool] | None = None, **attrs: Any) -> Pat:
    """Shorthand: ``P("transpose", X("x"), name="t")``; keyword args are required attrs,
    ``where`` a predicate on the attrs instead."""
    return Pat(op, tuple(inputs) if inputs else None, where or attrs or None, name)


def X(name: str) -> Pat:
    """Any entry, bound to ``name``."""
    return Pat(name=name)


class Match:
    """The bindings of one successful match, plus shape/dtype lookups for rule functions."""

    def __init__(self, root: Node, entries: dict[str, NodeEntry], ctx: "_Context"):
        self.root, self.entries, self._ctx = root, entries, ctx

    def __getitem__(self, name: str) -> NodeEntry:
        return self.entries[name]

    def attrs(self, name: str) -> dict:
        return self.entries[name].node.attrs

    def shape(self, name_or_entry: str | NodeEntry) -> tuple | None:
        e = self.entries[name_or_entry] if isinstance(name_or_entry, str) else name_or_entry
        return self._ctx.lookup(e, "shape")

    def dtype(self, name_or_entry: str | NodeEntry) -> str | None:
        e = self.entries[name_or_entry] if isinstance(name_or_entry, str) else name_or_entry
        return self._ctx.lookup(e, "dtype")

    def uses(self, e: NodeEntry) -> int | None:
        """How many inputs (and graph outputs) read ``e`` in the original graph."""
        return self._ctx.known["uses"].get((id(e.node), e.index))

    def is_constant(self, e: NodeEntry) -> bool:
        """Whether ``e`` depends only on params (graph attr ``params``) and input-free ops."""
        return self._ctx.constant(e.node)


@dataclasses.dataclass(frozen=True)
class Rule:
    """``fn(match) -> NodeEntry | None`` replaces the root's output 0 (None: no change)."""

    name: str
    pattern: Pat
    fn: Callable[[Match], NodeEntry | None]


class _Context:
    """Shapes and dtypes of old entries, carried to their replacements; fresh nodes are
    inferred locally from their inputs with the op's FInferShape / FInferType."""

    def __init__(self, graph: Graph):
        self.known: dict[str, dict[tuple[int, int], Any]] = {"shape": {}, "dtype": {},
                                                             "uses": {}}
        idx = graph.index
        self.params = graph.attrs.get("params") or {}
        self._const: dict[int, bool] = {}
        uses = self.known["uses"]
        for i, k, _ in [*(e for ins in idx.inputs for e in ins), *idx.outputs]:
            uses[(id(idx.nodes[i]), k)] = uses.get((id(idx.nodes[i]), k), 0) + 1
        for key in ("shape", "dtype"):
            vals = graph.attrs.get(key)
            if vals is not None and len(vals) == idx.num_node_entries:
                for nid, node in enumerate(idx.nodes):
                    for k in range(node.num_outputs):
                        self.known[key][(id(node), k)] = vals[idx.entry_rptr[nid] + k]
        self._keep: list[Node] = list(idx.nodes)  # ids stay valid while nodes live

    def carry(self, old: Node, new: Sequence[NodeEntry]) -> None:
        for key, table in self.known.items():
            for k, e in enumerate(new):
                v = table.get((id(old), k))
                if v is not None:
                    table.setdefault((id(e.node), e.index), v)
        self._keep.extend(e.node for e in new)

    def constant(self, node: Node) -> bool:
        if id(node) not in self._const:
            self._keep.append(node)
            self._const[id(node)] = node.name in self.params if node.op is None else \
                is_pure(node) and all(self.constant(i.node) for i in node.inputs)
        return self._const[id(node)]

    def lookup(self, e: NodeEntry, key: str) -> Any:
        table = self.known[key]
        if (id(e.node), e.index) in table or e.node.op is None:
            return table.get((id(e.node), e.index))
        rule = e.node.op.get_attr("FInferShape" if key == "shape" else "FInferType")
        ins = [self.lookup(i, key) for i in e.node.inputs]
        if rule is None:
            known = [v for v in ins if v is not None]
            outs = [known[0] if key == "dtype" and known else None] * e.node.num_outputs
        else:
            try:
                _, outs = rule(e.node.attrs, ins, [None] * e.node.num_outputs)
            except NNVMError:
                outs = [None] * e.node.num_outputs
        self._keep.append(e.node)
        for k, v in enumerate(outs):
            table[(id(e.node), k)] = v
        return outs[e.index]


def is_pure(node: Node) -> bool:
    """Ops whose value is a pure function of their inputs: no state, no randomness."""
    op = node.op
    return (op.get_attr("FReference") is not None or op.get_attr("FReferenceNode") is not None) \
        and op.get_attr("FMutateInputs") is None and "random" not in op.name \
        and not op.get_attr("TIsStateful", False) and not node.control_deps


def _op_names(op: str | tuple[str, ...]) -> frozenset[str] | None:
    from .errors import OpNotFoundError
    from .op import get_op

    names = set()
    for n in (op,) if isinstance(op, str) else op:
        try:
            names.add(get_op(n).name)
        except OpNotFoundError:  # a rule for an op not installed never matches
            continue
    return frozenset(names)


def match(pat: Pat, e: NodeEntry, out: dict[str, NodeEntry], cache: dict) -> bool:
    """Match ``pat`` against entry ``e``, adding bindings to ``out``."""
    if pat.op is not None:
        names = cache.get(pat.op)
        if names is None:
            names = cache[pat.op] = _op_names(pat.op)
        if e.node.op is None or e.node.op.name not in names:
            return False
        if callable(pat.attrs):
            if not pat.attrs(e.node.attrs):
                return False
        elif pat.attrs and any(e.node.attrs.get(k) != v for k, v in pat.attrs.items()):
            return False
        if pat.inputs is not None:
            if len(pat.inputs) != len(e.node.inputs):
                return False
            if not all(match(p, i, out, cache) for p, i in zip(pat.inputs, e.node.inputs)):
                return False
    if pat.name is not None:
        old = out.setdefault(pat.name, e)
        if old.node is not e.node or old.index != e.index:
            return False
    return True


def _may_fire(idx, rules: Sequence[Rule]) -> bool:
    """False when every rule's root names ops and none of them occurs in the graph: then no
    rule can fire, and big graphs skip the rewrite walk entirely."""
    from .op import get_op

    wanted: set[str] = set()
    for rule in rules:
        ops = rule.pattern.op
        if ops is None:
            return True
        wanted.update(get_op(o).name for o in ((ops,) if isinstance(ops, str) else ops))
    return any(n.op is not None and n.op.name in wanted for n in idx.nodes)


def rewrite(graph: Graph, rules: Sequence[Rule], max_steps: int = 100_000) -> Graph:
    """Apply ``rules`` bottom-up until none fires; returns a new graph (or ``graph``).

    A rule may only replace a node whose outputs other than 0 are unused (so that dropout or
    batch_norm, whose hidden outputs nobody reads, can be rewritten) and that has no control
    dependencies.
    """
    idx = graph.index
    if not _may_fire(idx, rules):
        return graph
    ctx = _Context(graph)
    cache: dict = {}
    steps = [0]

    def visit(node: Node, inputs: list[NodeEntry]):
        if node.op is None or node.control_deps:
            return None
        if all(a.node is b.node and a.index == b.index for a, b in zip(inputs, node.inputs)):
            cur = node
        else:
            cur = Node(node.op, node.name, node.attrs, inputs, (), node.subgraphs)
            cur.info = node.info
        ctx.carry(node, [NodeEntry(cur, k) for k in range(cur.num_outputs)])
        if any(ctx.known["uses"].get((id(node), k)) for k in range(1, node.num_outputs)):
            return cur
        entry = NodeEntry(cur, 0)
        fired = True
        while fired and entry.node.op is not None:
            fired = False
            for rule in rules:
                bound: dict[str, NodeEntry] = {}
                if not match(rule.pattern, entry, bound, cache):
                    continue
                new = rule.fn(Match(entry.node, bound, ctx))
                if new is None or (new.node is entry.node and new.index == entry.index):
                    continue
                steps[0] += 1
                if steps[0] > max_steps:
                    raise PassError(format_error(f"rewrite: rule '{rule.name}'", "keeps firing",
                                                 fix="Two rules probably undo each other"))
                ctx.carry(entry.node, [new])
                entry, fired = new, True
                break
        return entry if entry.node is not cur else cur

    return with_outputs(graph, node_map(graph, visit))


def substitute(graph: Graph, mapping: Mapping[tuple[int, int], tuple[int, int] | NodeEntry]
               ) -> list[NodeEntry]:
    """Rebuild ``graph`` with entries replaced; returns the new outputs.

    ``mapping[(nid, k)]`` is either an earlier entry ``(nid2, k2)`` of the same graph (whose
    rewritten version is used) or a NodeEntry built outside the graph (e.g. a new variable).
    """
    idx = graph.index
    new: list[list[NodeEntry]] = []

    def resolve(i: int, k: int, v: int = 0) -> NodeEntry:
        rep = mapping.get((i, k))
        if isinstance(rep, NodeEntry):
            return rep
        if rep is not None:
            return resolve(*rep)
        return new[i][k]._replace(version=v)

    for nid, node in enumerate(idx.nodes):
        inputs = [resolve(i, k, v) for i, k, v in idx.inputs[nid]]
        deps = [new[d][0].node for d in idx.control_deps[nid]]
        if all(a.node is b.node and a.index == b.index for a, b in zip(inputs, node.inputs)) \
                and all(a is b for a, b in zip(deps, node.control_deps)):
            out = node
        else:
            out = Node(node.op, node.name, node.attrs, inputs, deps, node.subgraphs)
            out.info = node.info
        new.append([NodeEntry(out, k) for k in range(out.num_outputs)])
    return [resolve(i, k, v) for i, k, v in idx.outputs]


def with_outputs(graph: Graph, outputs: Sequence[NodeEntry], **attrs: Any) -> Graph:
    """A graph with new outputs: per-entry attributes dropped (stale), and ``params``,
    ``shape_inputs`` and ``dtype_inputs`` pruned to the inputs that are still there."""
    if not attrs and len(outputs) == len(graph.outputs) and all(
            a.node is b.node and a.index == b.index for a, b in zip(outputs, graph.outputs)):
        return graph
    stale = graph_attrs.derived()
    keep = {k: v for k, v in graph.attrs.items() if k not in stale}
    g = Graph(outputs, {**keep, **attrs})
    names = set(g.index.input_names)
    for key in ("params", "shape_inputs", "dtype_inputs"):
        if isinstance(g.attrs.get(key), dict):
            g.attrs[key] = {k: v for k, v in g.attrs[key].items() if k in names}
    return g


def ensure_inferred(graph: Graph) -> Graph:
    """Run InferShape/InferType when ``shape``/``dtype`` are missing or stale."""
    from .pass_manager import apply_passes

    n = graph.index.num_node_entries
    todo = [p for p, key in (("InferShape", "shape"), ("InferType", "dtype"))
            if len(graph.attrs.get(key) or ()) != n]
    return apply_passes(graph, todo) if todo else graph
