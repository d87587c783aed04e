"""PrintGraphIR: a stable text form of a graph, used for dumps and test expectations."""

from __future__ import annotations

from typing import Sequence

from ..ir import Graph
from ..pass_manager import PassSet
from ..params import to_string

PASSES = PassSet()


def print_graph_ir(graph: Graph, join_entry_attrs: Sequence[str] = (),
                   join_node_attrs: Sequence[str] = ()) -> str:
    """Render ``Graph(%x, %w) { %2 = dense(%x, %w, units=4) ... ret %2 }``.

    Args:
        join_entry_attrs: per-entry graph attributes (e.g. ``shape``) to print next to outputs.
        join_node_attrs: per-node graph attributes (e.g. ``device``) to print per node.
    """
    idx = graph.index
    rptr = idx.entry_rptr

    def ref(nid: int, k: int) -> str:
        n = idx.nodes[nid]
        base = f"%{n.name}" if n.op is None else f"%{nid}"
        return base if n.op is None or n.num_outputs == 1 else f"{base}.{k}"

    lines = ["Graph(" + ", ".join(f"%{idx.nodes[i].name}" for i in idx.input_nodes) + ") {"]
    for nid, node in enumerate(idx.nodes):
        extra = []
        for key in join_node_attrs:
            vals = graph.attrs.get(key)
            if vals is not None and nid < len(vals):
                extra.append(f"{key}={to_string(vals[nid])}")
        for key in join_entry_attrs:
            vals = graph.attrs.get(key)
            if vals is not None:
                es = [to_string(vals[e]) for e in range(rptr[nid], rptr[nid + 1])]
                extra.append(f"{key}=" + (es[0] if len(es) == 1 else "[" + ", ".join(es) + "]"))
        suffix = (", " + ", ".join(extra)) if extra else ""
        if node.op is None:
            if extra:
                lines.append(f"  %{node.name}{suffix}")
            continue
        args = [ref(i, k) for i, k, _ in idx.inputs[nid]]
        args += [f"{k}={to_string(v)}" for k, v in sorted(node.attrs.items())]
        deps = "".join(f", ^%{c}" for c in idx.control_deps[nid])
        lines.append(f"  %{nid} = {node.op.name}({', '.join(args)}{deps}) "
                     f"/* {node.name} */{suffix}")
    lines.append("  ret " + ", ".join(ref(n, k) for n, k, _ in idx.outputs))
    lines.append("}")
    return "\n".join(lines)


@PASSES.define("PrintGraphIR", provides=("graphir",))
def print_graph_ir_pass(graph: Graph) -> Graph:
    """Store the text IR in graph attribute ``graphir``; ``join_entry_attrs`` and
    ``join_node_attrs`` (lists of attribute names) choose what is printed with each node."""
    text = print_graph_ir(graph, graph.attrs.get("join_entry_attrs", ()),
                          graph.attrs.get("join_node_attrs", ()))
    return graph.with_attrs(graphir=text)
