"""Data-dependent shapes on compiled targets: a static part for the target, a host tail.

Ops such as NonZero, NonMaxSuppression, Unique, Compress or Range have output shapes that
depend on input *values* (the op attribute ``TDynamicShape``), and so does everything
downstream of them. The ``reference`` interpreter allocates every output at run time and
runs such graphs as they are; a compiled target plans its buffers at build time and cannot.
Rather than teaching every backend run-time allocation, ``build`` splits the graph here,
once for all compiled targets (llvm, opencl, cuda):

- the **static part**, every node not downstream of a data-dependent op, is built for the
  target as usual; its outputs are the graph outputs it computes plus every entry the tail
  reads;
- the **host tail**, the data-dependent ops and everything downstream of them, is built for
  ``reference`` and runs on the host after the static part (``nnvm.runtime.host_tail``),
  allocating its outputs at run time, so outputs come back with their real shape.

Why one tail and not per-node host steps: inside the tail every shape is unknown until run
time, so a compiled kernel there would need a build per run; in the models this was made for
(detection post-processing: thresholding, TopK, NMS, gathers) the tail is cheap host work
after the expensive static backbone.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

from ..ir import Graph, Node, NodeEntry, make_variable
from ..log import get_logger
from ..pass_manager import apply_passes

logger = get_logger("compiler")

#: targets whose modules allocate every output at run time and so run dynamic graphs whole
RUNS_DYNAMIC_SHAPES = frozenset({"reference"})


def is_dynamic_op(node: Node) -> bool:
    """Whether ``node``'s output shape depends on input values (``TDynamicShape``, a bool or
    a function of the node's attrs, e.g. an If whose branches give different shapes)."""
    if node.op is None:
        return False
    flag = node.op.get_attr("TDynamicShape", False)
    return bool(flag(node.attrs) if callable(flag) else flag)


def has_dynamic_op(graph: Graph) -> bool:
    """Cheap check (no shape inference) that decides whether a build needs a split."""
    return any(is_dynamic_op(node) for node in graph.index.nodes)


def dynamic_nodes(graph: Graph) -> list[bool]:
    """Per node id: a data-dependent op, or downstream of one."""
    idx = graph.index
    dynamic = [False] * idx.num_nodes
    for nid, node in enumerate(idx.nodes):
        dynamic[nid] = is_dynamic_op(node) or any(dynamic[i] for i, _, _ in idx.inputs[nid])
    return dynamic


@dataclasses.dataclass
class TailSplit:
    """A graph cut in two. ``static`` is None when no op runs before the tail.

    ``tail_inputs``: per tail variable, where its value comes from at run time:
    ``("static", k)`` output k of the static part, ``("feed", name)`` a graph input or param.
    ``outputs``: per graph output, ``("static", k)``, ``("tail", k)`` or ``("feed", name)``.
    """

    static: Graph | None
    tail: Graph
    tail_inputs: dict[str, tuple[str, Any]]
    outputs: list[tuple[str, Any]]
    host_nodes: list[str]


def split_host_tail(graph: Graph) -> TailSplit:
    """Cut a shape-inferred graph into its static part and its host tail (see module doc)."""
    idx = graph.index
    rptr = idx.entry_rptr
    dynamic = dynamic_nodes(graph)
    static_out: dict[int, int] = {}  # entry -> position in the static part's outputs
    static_entries: list[NodeEntry] = []

    def from_static(nid: int, k: int) -> tuple[str, Any]:
        node = idx.nodes[nid]
        if node.op is None:
            return ("feed", node.name)
        e = rptr[nid] + k
        if e not in static_out:
            static_out[e] = len(static_entries)
            static_entries.append(NodeEntry(node, k, 0))
        return ("static", static_out[e])

    own = graph.attrs.get("output_names")
    names = list(own) if isinstance(own, (list, tuple)) and \
        len(own) == len(idx.outputs) else [None] * len(idx.outputs)
    outputs: list[tuple[str, Any]] = []
    tail_heads: list[NodeEntry] = []
    tail_names: list[str] = []
    new: dict[int, Node] = {}
    tail_inputs: dict[str, tuple[str, Any]] = {}
    boundary: dict[int, Node] = {}  # entry -> tail variable
    taken = {n.name for n in idx.nodes}

    def tail_variable(nid: int, k: int) -> NodeEntry:
        e = rptr[nid] + k
        if e not in boundary:
            node = idx.nodes[nid]
            name = node.name if node.op is None else f"{node.name}_output{k}"
            while node.op is not None and name in taken:
                name += "_"
            taken.add(name)
            var = make_variable(name)
            if node.op is None:
                var.attrs = dict(node.attrs)
                var.info = node.info
            boundary[e] = var
            tail_inputs[name] = from_static(nid, k)
        return NodeEntry(boundary[e], 0, 0)

    host_nodes = []
    for nid, node in enumerate(idx.nodes):
        if not dynamic[nid]:
            continue
        inputs = [NodeEntry(new[i], k, 0) if dynamic[i] else tail_variable(i, k)
                  for i, k, _ in idx.inputs[nid]]
        deps = [new[c] for c in idx.control_deps[nid] if dynamic[c]]  # static ones ran first
        copy = Node(node.op, node.name, node.attrs, inputs, deps, node.subgraphs)
        copy.info = dict(node.info)  # the tail installs body runners: not on the caller's graph
        new[nid] = copy
        host_nodes.append(node.name)
    for (nid, k, _), name in zip(idx.outputs, names):
        if dynamic[nid]:
            outputs.append(("tail", len(tail_heads)))
            tail_heads.append(NodeEntry(new[nid], k, 0))
            tail_names.append(name or f"{idx.nodes[nid].name}_output{k}")
        else:
            outputs.append(from_static(nid, k))
    tail = Graph(tail_heads, {"output_names": tail_names})
    static = None
    if static_entries:
        inv = {pos: e for e, pos in static_out.items()}
        by_entry = {rptr[n] + k: name for (n, k, _), name in zip(idx.outputs, names) if name}
        static_names, seen = [], set()
        for pos in range(len(static_entries)):
            e = inv[pos]
            entry = static_entries[pos]
            name = by_entry.get(e) or f"{entry.node.name}_output{entry.index}"
            while name in seen:
                name += "_"
            seen.add(name)
            static_names.append(name)
        static = Graph(static_entries, {"output_names": static_names})
    return TailSplit(static, tail, tail_inputs, outputs, host_nodes)


def _infer(graph: Graph, shapes: dict, dtypes: dict, params: dict) -> Graph:
    """Shapes and dtypes only (the split needs to know what is static, not to optimise)."""
    g = graph.with_attrs(shape_inputs=shapes, dtype_inputs=dtypes, params=params)
    return apply_passes(g, ["InferShape", "InferType"])


def build_with_host_tail(graph: Graph, shapes: Mapping, dtypes: Mapping, params: Mapping,
                         build_part: Callable[..., Any], target: str):
    """Build ``graph`` (already normalised inputs) as static part + host tail.

    ``build_part(graph, target, shape, dtype, params)`` builds one part (``build`` itself,
    with the caller's options); the static part goes to ``target``, the tail to
    ``reference``. Returns a ``nnvm.runtime.host_tail.HostTailModule``, or the reference
    module of the whole graph when no op runs before the data-dependent ones (nothing to
    compile)."""
    from ..runtime.host_tail import HostTailModule

    inferred = _infer(graph, dict(shapes), dict(dtypes), dict(params))
    split = split_host_tail(inferred)
    if split.static is None:
        _report(inferred, split, target, params)
        return build_part(graph, "reference", shapes, dtypes, params)
    all_shapes, all_dtypes = inferred.attrs["shape"], inferred.attrs["dtype"]
    idx = inferred.index
    rptr = idx.entry_rptr
    names = set(split.static.index.input_names)
    static_module = build_part(
        split.static, target, {k: v for k, v in shapes.items() if k in names},
        {k: v for k, v in dtypes.items() if k in names},
        {k: v for k, v in params.items() if k in names})
    static_shapes, static_dtypes = static_module.output_shapes, static_module.output_dtypes
    by_name = {idx.nodes[n].name: rptr[n] for n in idx.input_nodes}
    tail_shapes, tail_dtypes, tail_params = {}, {}, {}
    for name, (kind, key) in split.tail_inputs.items():
        if kind == "static":
            tail_shapes[name], tail_dtypes[name] = static_shapes[key], static_dtypes[key]
        elif key in params:
            tail_params[name] = params[key]
        else:
            e = by_name[key]
            if all_shapes[e] is not None:
                tail_shapes[name] = all_shapes[e]
            if all_dtypes[e] is not None:
                tail_dtypes[name] = all_dtypes[e]
    tail_module = build_part(split.tail, "reference", tail_shapes, tail_dtypes, tail_params)
    _report(inferred, split, target, params)
    return HostTailModule(inferred, static_module, tail_module, split.tail_inputs,
                          split.outputs, split.host_nodes, target, params)


def _report(graph: Graph, split: TailSplit, target: str, params: Mapping) -> None:
    """One warning per build, as backends report their fallbacks: how much runs on the host,
    from which op, and which model inputs decide those shapes (freezing them, when they are
    constant in the user's use, compiles everything)."""
    idx = graph.index
    first = next(n for n in idx.nodes if is_dynamic_op(n))
    deciders, seen, stack = [], set(), [first]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.op is None and node.name not in params:
            deciders.append(node.name)
        stack.extend(e.node for e in node.inputs)
    where = "after the compiled part" if split.static is not None else \
        "(nothing precedes them: the module is the reference interpreter's)"
    logger.warning(
        "%s: %d node(s) from '%s' (%s) onwards have shapes that depend on the data and run on the "
        "host %s; they depend on input(s) %s (if those are constant in your use, freeze "
        "them at import, from_onnx(freeze=...), to compile everything)",
        target, len(split.host_nodes), first.name, first.op.name, where,
        ", ".join(f"'{n}'" for n in sorted(deciders)) or "(none)")


def check_host_tail_free(module: Any, where: str) -> None:
    """Raise for a module with a host tail, where ``where`` (e.g. ``nnvm export-c``) can only
    run compiled steps (the error names the first host node and the Python runtime)."""
    from ..runtime.host_tail import HostTailModule, host_tail_error

    if isinstance(module, HostTailModule):
        raise host_tail_error(module, where)


__all__ = ["RUNS_DYNAMIC_SHAPES", "TailSplit", "build_with_host_tail", "check_host_tail_free",
           "dynamic_nodes", "has_dynamic_op", "is_dynamic_op", "split_host_tail"]
