"""OrderMutation: order the reads and writes of mutated variables with control dependencies.

A graph is a dataflow graph, so nothing but data edges orders its nodes; a variable that an op
mutates (``FMutateInputs``, e.g. ``_assign``) needs more. Versions say which value each read
means: composing a mutating op bumps the variable's version, and the entry it writes carries
the *new* version ``v`` (NNVM's convention); every later read of the variable carries ``v``
too. The pass adds control dependencies so that

* a read of version ``v`` runs after the write that produced ``v`` (read-after-write),
* the write producing ``v`` runs after every read of ``v - 1`` (write-after-read) and, when
  there is none, after the write that produced ``v - 1`` (write-after-write).

A graph without versioned entries is returned unchanged. Conflicting histories (two writes of
one version, or dependencies that form a cycle) are errors naming the variable.
Provides ``num_mutation_deps`` (control dependencies added).
"""

from __future__ import annotations

from typing import Iterator

from nnvm.errors import GraphError, format_error, node_where
from nnvm.graph_attrs import DERIVED
from nnvm.ir import Graph, Node, NodeEntry
from nnvm.pass_manager import PassSet

PASSES = PassSet()


@PASSES.define("OrderMutation", provides=("num_mutation_deps",), invalidates=DERIVED,
               opt_level=0)
def order_mutation(graph: Graph) -> Graph:
    """Add control deps so reads and writes of mutated variables follow their versions.

    Read-after-write and write-after-read on every variable written by an ``FMutateInputs``
    op, from the ``version`` of each entry. No-op when no entry is versioned.
    """
    idx = graph.index
    accesses = _accesses(idx.nodes)
    if not any(v != 0 for per_var in accesses.values() for _, v, _ in per_var):
        return graph.with_attrs(num_mutation_deps=0)
    extra: dict[int, list[Node]] = {}
    added = 0
    for var, per_var in accesses.items():
        writes: dict[int, Node] = {}
        reads: dict[int, list[Node]] = {}
        for node, version, is_write in per_var:
            if is_write:
                if version in writes and writes[version] is not node:
                    raise GraphError(format_error(
                        f"variable '{var.name}'", f"two nodes write version {version}",
                        fix=f"{node_where(writes[version])} and {node_where(node)}: compose "
                            f"mutating ops one after another so each bumps the version"))
                writes[version] = node
            else:
                reads.setdefault(version, []).append(node)
        for node, version, is_write in per_var:
            if is_write:
                before = reads.get(version - 1) or \
                    ([writes[version - 1]] if version - 1 in writes else [])
            else:
                before = [writes[version]] if version in writes else []
            for dep in before:
                if dep is not node and _add(extra, node, dep):
                    added += 1
    if not added:
        return graph.with_attrs(num_mutation_deps=0)
    outputs = _rebuild(graph, extra)
    return Graph(outputs, {**graph.attrs, "num_mutation_deps": added})


def _accesses(nodes) -> dict[Node, list[tuple[Node, int, bool]]]:
    """Per variable node: (accessing node, version, is_write) in topological order."""
    out: dict[Node, list[tuple[Node, int, bool]]] = {}
    for node in nodes:
        if node.op is None:
            continue
        f = node.op.get_attr("FMutateInputs")
        mutated = set(f(node.attrs)) if f is not None else set()
        for slot, e in enumerate(node.inputs):
            if e.node.op is None:
                out.setdefault(e.node, []).append((node, e.version, slot in mutated))
    return out


def _add(extra: dict[int, list[Node]], node: Node, dep: Node) -> bool:
    deps = extra.setdefault(id(node), [])
    if any(d is dep for d in deps) or any(d is dep for d in node.control_deps):
        return False
    deps.append(dep)
    return True


def _rebuild(graph: Graph, extra: dict[int, list[Node]]) -> list[NodeEntry]:
    """Copy the graph with the extra control deps, in an order that honours them."""
    order = _topo_with_extra(graph, extra)
    new: dict[int, Node] = {}
    for node in order:
        if node.op is None:
            new[id(node)] = node
            continue
        inputs = [NodeEntry(new[id(e.node)], e.index, e.version) for e in node.inputs]
        deps = [new[id(c)] for c in node.control_deps] + \
            [new[id(c)] for c in extra.get(id(node), [])]
        if all(a.node is b.node for a, b in zip(inputs, node.inputs)) and \
                len(deps) == len(node.control_deps):
            new[id(node)] = node
            continue
        copy = Node(node.op, node.name, node.attrs, inputs, deps, node.subgraphs)
        copy.info = node.info
        new[id(node)] = copy
    return [NodeEntry(new[id(e.node)], e.index, e.version) for e in graph.outputs]


def _topo_with_extra(graph: Graph, extra: dict[int, list[Node]]) -> list[Node]:
    def children(n: Node) -> Iterator[Node]:
        for e in n.inputs:
            yield e.node
        yield from n.control_deps
        yield from extra.get(id(n), [])

    order: list[Node] = []
    state: dict[int, int] = {}  # 1 = on the stack, 2 = done
    for head in (e.node for e in graph.outputs):
        if id(head) in state:
            continue
        state[id(head)] = 1
        stack = [(head, children(head))]
        while stack:
            node, it = stack[-1]
            child = next(it, None)
            if child is None:
                stack.pop()
                state[id(node)] = 2
                order.append(node)
            elif state.get(id(child)) == 1:
                raise GraphError(format_error(
                    node_where(child), "the variable versions form a cycle",
                    fix="A node reads a version written after a node that depends on it; "
                        "check the order in which mutating ops were composed"))
            elif id(child) not in state:
                state[id(child)] = 1
                stack.append((child, children(child)))
    return order
