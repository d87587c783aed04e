"""The IR: Node, NodeEntry, Graph and its cached IndexedGraph (dense ids, topological order).

A graph *is* what is reachable from its outputs: passes build new graphs from outputs, and
anything unreachable simply disappears on the next indexing. Every traversal is iterative, so
a 10,000-node chain never meets Python's recursion limit.

This module is a leaf: it imports only the op registry and the errors below it. What a graph
does beyond holding nodes (run passes, serialise, print, wrap as a Symbol) is implemented
above, in ``nnvm.graph``, which installs it with :func:`install_facade` when imported.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Sequence

from .errors import GraphError, format_error, node_where
from .op import get_op


class NodeEntry(NamedTuple):
    """Output ``index`` of ``node``; ``version`` counts writes to a variable (OrderMutation)."""

    node: "Node"
    index: int = 0
    version: int = 0


class Node:
    """One operator application, or a variable when ``op`` is None.

    Attributes:
        op: the registered ``nnvm.op.Op``, or None for a variable.
        name: unique-ish name (``fc1``); variables are looked up by it.
        attrs: typed attributes (parsed by the op's parameter schema) plus ``__x__`` annotations.
        inputs: the entries this node reads, in the op's input order.
        control_deps: nodes that must run before this one.
        subgraphs: graphs held as attributes (If/Loop branches), empty for ordinary ops.
        info: scratch space that is never serialised (e.g. a variable's initial value).
    """

    __slots__ = ("op", "name", "attrs", "inputs", "control_deps", "subgraphs", "info",
                 "_nout", "__weakref__")

    def __init__(self, op, name: str, attrs: dict | None = None,
                 inputs: Sequence[NodeEntry] = (), control_deps: Sequence["Node"] = (),
                 subgraphs: Sequence["Graph"] = ()):
        self.op = op
        self.name = name
        self.attrs = dict(attrs or {})
        self.inputs = list(inputs)
        self.control_deps = list(control_deps)
        self.subgraphs = list(subgraphs)
        self.info: dict[str, Any] = {}
        self._nout: int | None = None

    @property
    def is_variable(self) -> bool:
        return self.op is None

    @property
    def num_outputs(self) -> int:
        # Cached: it is asked for on every traversal, and attrs that change it (e.g. split's
        # sections) are fixed once a node exists. Code that edits attrs in place must reset
        # ``_nout`` to None.
        if self._nout is None:
            self._nout = 1 if self.op is None else self.op.num_outputs(self.attrs)
        return self._nout

    @property
    def num_inputs(self) -> int:
        return 0 if self.op is None else len(self.inputs)

    def __getitem__(self, index: int) -> NodeEntry:
        return NodeEntry(self, index, 0)

    def __repr__(self) -> str:
        return f"<Node {self.name} op={'null' if self.op is None else self.op.name}>"


def make_node(op_name: str, inputs: Sequence[NodeEntry], attrs: dict | None = None,
              name: str | None = None, control_deps: Sequence[Node] = ()) -> Node:
    """Create an op node with parsed attributes and checked arity (for passes and gradients)."""
    op = get_op(op_name)
    name = name or _fresh_name(op.name)
    where = f"node '{name}' (op {op.name})"
    raw = dict(attrs or {})
    if op.is_variadic:
        raw.setdefault("num_args", len(inputs))
    parsed = op.parse_attrs(raw, where)
    expected = op.num_inputs(parsed)
    if expected != len(inputs):
        raise GraphError(format_error(where, "wrong number of inputs", expected, len(inputs),
                                      fix=f"Inputs are: {', '.join(op.input_names(parsed))}"))
    return Node(op, name, parsed, inputs, control_deps)


def make_variable(name: str, **attrs: Any) -> Node:
    return Node(None, name, attrs)


_counter = itertools.count()


def _fresh_name(hint: str) -> str:
    return f"{hint.strip('_')}_{next(_counter)}"


def post_order(heads: Iterable[Node]) -> list[Node]:
    """Nodes reachable from ``heads`` in deterministic post-order (inputs, then control deps).

    Iterative, matching NNVM's ``PostOrderDFSVisit`` so ids agree with the original's JSON.
    """
    order: list[Node] = []
    visited: set[int] = set()
    for head in heads:
        if id(head) in visited:
            continue
        visited.add(id(head))
        stack: list[tuple[Node, Iterator[Node]]] = [(head, _children(head))]
        while stack:
            node, it = stack[-1]
            child = next(it, None)
            if child is None:
                stack.pop()
                order.append(node)
            elif id(child) not in visited:
                visited.add(id(child))
                stack.append((child, _children(child)))
    return order


def _children(node: Node) -> Iterator[Node]:
    for e in node.inputs:
        yield e.node
    yield from node.control_deps


class IndexedGraph:
    """Dense, deterministic numbering of a graph's nodes and entries (NNVM's IndexedGraph).

    Attributes:
        nodes: nodes in topological order; node id = position.
        entry_rptr: CSR offsets, ``entry_id(nid, i) = entry_rptr[nid] + i``.
        input_nodes: ids of variable nodes, in DFS order (JSON ``arg_nodes``).
        outputs: graph outputs as ``(node_id, index, version)``.
        inputs: per node, its inputs as ``(node_id, index, version)``.
    """

    def __init__(self, outputs: Sequence[NodeEntry]):
        self.nodes = post_order(e.node for e in outputs)
        self._id = {id(n): i for i, n in enumerate(self.nodes)}
        rptr = [0]
        for n in self.nodes:
            rptr.append(rptr[-1] + n.num_outputs)
        self.entry_rptr = rptr
        self.input_nodes = [i for i, n in enumerate(self.nodes) if n.op is None]
        self.inputs = [[(self._id[id(e.node)], e.index, e.version) for e in n.inputs]
                       for n in self.nodes]
        self.control_deps = [[self._id[id(c)] for c in n.control_deps] for n in self.nodes]
        self.outputs = [(self._id[id(e.node)], e.index, e.version) for e in outputs]
        mutable = set()
        for n in self.nodes:
            if n.op is not None:
                f = n.op.get_attr("FMutateInputs")
                if f is not None:
                    for i in f(n.attrs):
                        mutable.add(self._id[id(n.inputs[i].node)])
        self.mutable_input_nodes = mutable

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    @property
    def num_node_entries(self) -> int:
        return self.entry_rptr[-1]

    def node_id(self, node: Node | str) -> int:
        if isinstance(node, str):
            for i, n in enumerate(self.nodes):
                if n.name == node:
                    return i
            raise GraphError(f"graph: no node named '{node}'")
        try:
            return self._id[id(node)]
        except KeyError:
            raise GraphError(f"graph: {node!r} is not part of this graph") from None

    def entry_id(self, node: int | Node | NodeEntry | tuple, index: int = 0) -> int:
        if isinstance(node, NodeEntry):
            return self.entry_rptr[self.node_id(node.node)] + node.index
        if isinstance(node, tuple):
            return self.entry_rptr[node[0]] + node[1]
        nid = node if isinstance(node, int) else self.node_id(node)
        return self.entry_rptr[nid] + index

    @property
    def output_entries(self) -> list[int]:
        return [self.entry_rptr[n] + i for n, i, _ in self.outputs]

    @property
    def input_names(self) -> list[str]:
        return [self.nodes[i].name for i in self.input_nodes]


class Graph:
    """Outputs plus typed graph attributes; the unit that passes consume and produce.

    Graph attributes are the pass I/O mechanism (``shape``, ``dtype``, ``storage_id``...).
    Per-entry attributes are lists indexed by ``graph.index.entry_id``.
    """

    def __init__(self, outputs: Sequence[NodeEntry], attrs: dict | None = None):
        self.outputs = list(outputs)
        self.attrs: dict[str, Any] = dict(attrs or {})
        self._index: IndexedGraph | None = None

    @property
    def index(self) -> IndexedGraph:
        if self._index is None:
            self._index = IndexedGraph(self.outputs)
        return self._index

    @property
    def symbol(self):
        """The graph's outputs as an ``nnvm.symbol.Symbol``."""
        return _facade("symbol")(self)

    def with_attrs(self, **attrs: Any) -> "Graph":
        """A graph sharing nodes and index, with attributes updated (cheap; no re-indexing)."""
        g = Graph(self.outputs, {**self.attrs, **attrs})
        g._index = self._index
        return g

    def apply(self, passes: str | Sequence[str], **attrs: Any) -> "Graph":
        """Apply passes by name, in order (NNVM's ``ApplyPasses``); ``attrs`` seed graph attrs."""
        return _facade("apply")(self.with_attrs(**attrs) if attrs else self, passes)

    def json(self) -> str:
        """The graph in NNVM's JSON schema (``nnvm.graph.load_json`` reads it back)."""
        return _facade("json")(self)

    def json_attr(self, key: str) -> Any:
        return self.attrs.get(key)

    def ir(self, join_entry_attrs: Sequence[str] = (), join_node_attrs: Sequence[str] = ()) -> str:
        """The graph as text (PrintGraphIR), optionally with per-entry/per-node attributes."""
        return _facade("ir")(self, join_entry_attrs, join_node_attrs)

    def __repr__(self) -> str:
        return f"<Graph {self.index.num_nodes} nodes, outputs={len(self.outputs)}>"


_facade_impls: dict[str, Callable[..., Any]] = {}


def install_facade(*, apply: Callable[..., "Graph"], json: Callable[["Graph"], str],
                   ir: Callable[..., str], symbol: Callable[["Graph"], Any]) -> None:
    """Give ``Graph.apply/json/ir/symbol`` their implementations (called by ``nnvm.graph``).

    They need the pass manager, the serialiser, the printer and Symbol, all of which build on
    this module: taking them as arguments keeps the IR a leaf of the import graph.
    """
    _facade_impls.update(apply=apply, json=json, ir=ir, symbol=symbol)


def _facade(method: str) -> Callable[..., Any]:
    try:
        return _facade_impls[method]
    except KeyError:
        raise GraphError(format_error(
            f"Graph.{method}", "the graph facade is not installed", "nnvm.graph imported",
            "only nnvm.ir", fix="import nnvm.graph (import nnvm does it) before using it"),
        ) from None


def node_map(graph: Graph, fn: Callable[[Node, list[NodeEntry]], Node | NodeEntry | None]
             ) -> list[NodeEntry]:
    """Rebuild a graph bottom-up; ``fn(old_node, new_inputs)`` returns a replacement.

    ``fn`` may return a Node (all its outputs replace the old node's), a NodeEntry (the old
    node had one output and is replaced by that entry), or None (copy the node with new
    inputs, sharing it when the inputs did not change). Returns the new output entries.
    """
    idx = graph.index
    new: list[list[NodeEntry]] = []
    for nid, node in enumerate(idx.nodes):
        inputs = [new[i][k]._replace(version=v) for i, k, v in idx.inputs[nid]]
        out = fn(node, inputs)
        if out is None:
            same = all(a is b or (a.node is b.node and a.index == b.index)
                       for a, b in zip(inputs, node.inputs)) and \
                all(new[idx.node_id(c)][0].node is c for c in node.control_deps)
            if same:
                out = node
            else:
                out = Node(node.op, node.name, node.attrs, inputs,
                           [new[idx.node_id(c)][0].node for c in node.control_deps],
                           node.subgraphs)
                out.info = node.info
        if isinstance(out, Node):
            new.append([NodeEntry(out, i, 0) for i in range(out.num_outputs)])
        else:
            new.append([out])
    return [new[n][i]._replace(version=v) for n, i, v in idx.outputs]


def node_where_id(graph: Graph, nid: int) -> str:
    return node_where(graph.index.nodes[nid])
