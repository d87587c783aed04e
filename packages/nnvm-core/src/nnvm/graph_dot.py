"""A graph as Graphviz DOT text: fused groups as clusters, shapes and dtypes on the edges.

Why: users look at models in Netron or Graphviz, not in text IR. ``nnvm inspect MODEL --dot
out.dot`` (and ``--svg`` when Graphviz's ``dot`` is installed) writes what this module returns.
The DOT text is written here rather than through the ``graphviz`` package so that core keeps
its two dependencies (numpy, pluggy); the only subtle part of DOT is quoting, done by
``_quote``.

A node's group is read from the ``group_root`` graph attribute (FuseOps): every group of more
than one op node becomes a ``subgraph cluster_<root>`` labelled with its kernel's ops, so the
picture shows what runs as one kernel. Parameters (weights) are drawn small and grey; graph
inputs and outputs are highlighted; each edge carries the entry's shape and dtype when
InferShape/InferType have run.
"""

from __future__ import annotations

from typing import Any

from .ir import Graph

#: parameters with more elements than this are not drawn as nodes (a 10,000-weight graph
#: would bury the operators); their edges still show where they enter
_MAX_PARAM_NODES = 2000


def _quote(text: str) -> str:
    """A DOT double-quoted string: backslashes and quotes escaped, newlines as ``\\n``."""
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _shape_label(shape, dtype) -> str:
    if shape is None and dtype is None:
        return ""
    dims = "?" if shape is None else "x".join(str(d) for d in shape) or "scalar"
    return f"{dims} {dtype}" if dtype else dims


def to_dot(graph: Graph, params: dict[str, Any] | None = None, *, title: str = "nnvm") -> str:
    """DOT text of ``graph``. ``params`` names the variables that are weights (drawn small).

    Clusters come from the ``group_root`` attribute when present (an artifact's graph, or a
    graph after FuseOps); otherwise every op is its own node and there are no clusters.
    """
    params = params or {}
    idx = graph.index
    shapes = graph.attrs.get("shape") or [None] * idx.num_node_entries
    dtypes = graph.attrs.get("dtype") or [None] * idx.num_node_entries
    roots = graph.attrs.get("group_root")
    if roots is not None and len(roots) != idx.num_nodes:
        roots = None  # stale attribute from before a rewrite: draw without clusters
    from .runtime.module import output_names_of

    out_names = output_names_of(graph)
    lines = [f"digraph {_quote(title)} {{",
             "  rankdir=TB;",
             '  node [shape=box, style="rounded,filled", fillcolor="#eef3fb", '
             'fontname="Helvetica", fontsize=10];',
             '  edge [fontname="Helvetica", fontsize=8, color="#555555"];']

    members: dict[int, list[int]] = {}
    if roots is not None:
        for nid, node in enumerate(idx.nodes):
            if node.op is not None and roots[nid] >= 0:
                members.setdefault(roots[nid], []).append(nid)

    def node_line(nid: int, indent: str = "  ") -> str:
        node = idx.nodes[nid]
        if node.op is None:
            if node.name in params:
                return (f"{indent}n{nid} [label={_quote(node.name)}, shape=note, "
                        f'fillcolor="#f2f2f2", fontsize=8];')
            return (f"{indent}n{nid} [label={_quote('input ' + node.name)}, shape=oval, "
                    f'fillcolor="#d8f0d8"];')
        return f"{indent}n{nid} [label={_quote(node.op.name + chr(10) + node.name)}];"

    drawn_params = 0
    skipped: set[int] = set()
    for nid in idx.input_nodes:
        node = idx.nodes[nid]
        if node.name in params:
            drawn_params += 1
            if drawn_params > _MAX_PARAM_NODES:
                skipped.add(nid)
                continue
        lines.append(node_line(nid))
    clustered: set[int] = set()
    for root, ids in sorted(members.items()):
        if len(ids) < 2:
            continue
        ops = "+".join(idx.nodes[i].op.name for i in ids)
        lines.append(f"  subgraph cluster_{root} {{")
        lines.append(f"    label={_quote('kernel: ' + ops)}; style=dashed; color=\"#7a8fb8\"; "
                     "fontsize=9;")
        for i in ids:
            lines.append(node_line(i, "    "))
            clustered.add(i)
        lines.append("  }")
    for nid, node in enumerate(idx.nodes):
        if node.op is not None and nid not in clustered:
            lines.append(node_line(nid))

    for nid, node in enumerate(idx.nodes):
        for src, i, _ in idx.inputs[nid]:
            if src in skipped:
                continue
            e = idx.entry_rptr[src] + i
            label = _shape_label(shapes[e], dtypes[e])
            lines.append(f"  n{src} -> n{nid}" + (f" [label={_quote(label)}];" if label else ";"))
    for k, (nid, i, _) in enumerate(idx.outputs):
        e = idx.entry_rptr[nid] + i
        name = out_names[k] if k < len(out_names) else f"output{k}"
        lines.append(f"  out{k} [label={_quote('output ' + name)}, shape=oval, "
                     'fillcolor="#f8e0c8"];')
        label = _shape_label(shapes[e], dtypes[e])
        lines.append(f"  n{nid} -> out{k}" + (f" [label={_quote(label)}];" if label else ";"))
    lines.append("}")
    return "\n".join(lines) + "\n"
