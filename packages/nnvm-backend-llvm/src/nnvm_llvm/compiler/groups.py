"""Cut a graph into kernels: FuseOps groups when the graph has them, else one op each.

The FuseOps contract (``nnvm_passes.fuse_ops``): ``group_root[nid]`` names the node whose
outputs the group's kernel produces, ``group_master[nid]`` the node whose schedule it uses;
only the root's outputs leave a group. A group that holds an op without a lowering rule is
split back into single ops, so only that op falls back to its reference kernel.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from nnvm.ir import Graph

from .lowering import unit_axes_map, unsupported_reason

#: dtypes a kernel can take or return: NumPy exports these through DLPack (ml_dtypes'
#: bfloat16/float8/int4 are opaque to DLPack, so ops on them run their reference kernels)
KERNEL_DTYPES = frozenset(("bool", "float16", "float32", "float64", "int8", "int16", "int32",
                           "int64", "uint8", "uint16", "uint32", "uint64"))


def data_reason(node, shapes, dtypes) -> str | None:
    """Why a node's tensors cannot cross into a compiled kernel, or None."""
    for s, t in zip(shapes, dtypes):
        if t is not None and t not in KERNEL_DTYPES:
            return f"dtype {t} (llvm kernels take {', '.join(sorted(KERNEL_DTYPES))})"
        if s is not None and any(int(d) == 0 for d in s):
            return f"zero-size tensor of shape {tuple(s)}"
    return None


@dataclasses.dataclass
class Group:
    """One kernel: member node ids (topological order), root and master node ids."""

    nodes: list[int]
    root: int
    master: int
    reason: str | None = None  # set when the group runs on the reference kernel

    @property
    def lowered(self) -> bool:
        return self.reason is None


def partition(graph: Graph) -> list[Group]:
    """Groups in execution order (by root id)."""
    idx = graph.index
    shapes = graph.attrs["shape"]
    dtypes = graph.attrs.get("dtype") or [None] * len(shapes)
    rptr = idx.entry_rptr
    roots = graph.attrs.get("group_root")
    masters = graph.attrs.get("group_master")
    members: dict[int, list[int]] = {}
    for nid, node in enumerate(idx.nodes):
        if node.op is None:
            continue
        root = roots[nid] if roots is not None and roots[nid] >= 0 else nid
        members.setdefault(root, []).append(nid)
    groups = []
    for root in sorted(members):
        nodes = members[root]
        master = masters[root] if masters is not None and masters[root] >= 0 else root
        reasons = {}
        for nid in nodes:
            ins = [shapes[rptr[i] + k] for i, k, _ in idx.inputs[nid]]
            entries = [rptr[i] + k for i, k, _ in idx.inputs[nid]] + list(
                range(rptr[nid], rptr[nid + 1]))
            r = unsupported_reason(idx.nodes[nid], ins) or data_reason(
                idx.nodes[nid], [shapes[e] for e in entries], [dtypes[e] for e in entries])
            if r is not None:
                reasons[nid] = r
        if not reasons:
            groups.append(Group(nodes, root, master if master in nodes else root))
        else:  # split: lowerable members become kernels of their own
            for nid in nodes:
                groups.append(Group([nid], nid, nid, reasons.get(nid)))
    groups.sort(key=lambda g: g.root)
    return _fuse_input_views(graph, groups)


#: masters whose group takes in the reshape of a graph input (their templates are scheduled
#: over the reshaped image, see ``_fuse_input_views``)
VIEW_READERS = frozenset(("conv2d",))


def _fuse_input_views(graph: Graph, groups: list[Group]) -> list[Group]:
    """Fold the reshape of a graph input into the one kernel that reads it.

    Why: a graph input's buffer is the executor's input slot, which the plan cannot alias
    (see ``view_source``), and FuseOps gives conv2d no parents, so the (N, C, W) ->
    (N, C, 1, W) reshape in front of an imported 1-D conv was a copy kernel of its own.
    Only reshapes that add or drop size-1 axes fold: the kernel is scheduled over the
    reshaped input, then given the input's shape back (``codegen._GroupLowering.unview``).
    """
    idx = graph.index
    rptr = idx.entry_rptr
    outputs = {rptr[i] + k for i, k, _ in idx.outputs}
    readers: dict[int, list[Group]] = {}
    for g in groups:
        for e in group_inputs(graph, g):
            readers.setdefault(e, []).append(g)
    folded: set[int] = set()
    shapes = graph.attrs["shape"]
    for g in groups:
        node = idx.nodes[g.root]
        if not g.lowered or len(g.nodes) != 1 or node.op.name not in VIEW_OPS \
                or len(idx.inputs[g.root]) != 1:
            continue
        src, k, _ = idx.inputs[g.root][0]
        out = rptr[g.root]
        if idx.nodes[src].op is not None or unit_axes_map(
                tuple(shapes[rptr[src] + k]), tuple(shapes[out])) is None:
            continue  # a kernel's output is aliased instead; a general reshape is a copy
        users = readers.get(out, [])
        if out in outputs or len(users) != 1 or not users[0].lowered \
                or idx.nodes[users[0].master].op.name not in VIEW_READERS:
            continue
        users[0].nodes = sorted(users[0].nodes + g.nodes)
        folded.add(g.root)
    return [g for g in groups if g.root not in folded]


#: ops that only relabel a contiguous tensor's shape: same bytes, same order
VIEW_OPS = frozenset(("reshape", "flatten", "expand_dims", "squeeze", "reshape_like"))


def view_source(graph: Graph, group: Group) -> int | None:
    """The entry a lowered group merely re-shapes, or None when the group computes.

    Why: a reshape of a buffer the executor owns is a view of that buffer, so the plan
    aliases its output to its input instead of copying (a 1-D conv imported as reshape,
    conv2d, reshape was three kernels, two of them copies). A graph input (a variable) is
    never a source: its buffer is the executor's input slot, outside the storage pools.
    """
    idx = graph.index
    if not group.lowered or len(group.nodes) != 1:
        return None
    node = idx.nodes[group.root]
    if node.op.name not in VIEW_OPS or node.num_outputs != 1:
        return None
    src, k, _ = idx.inputs[group.root][0]
    if idx.nodes[src].op is None:
        return None
    rptr, dtypes = idx.entry_rptr, graph.attrs.get("dtype")
    e_in, e_out = rptr[src] + k, rptr[group.root]
    shapes = graph.attrs["shape"]
    size = [int(np.prod(shapes[e], dtype=np.int64)) for e in (e_in, e_out)]
    if dtypes is None or dtypes[e_in] != dtypes[e_out] or dtypes[e_in] not in KERNEL_DTYPES \
            or size[0] != size[1]:
        return None
    return e_in


def group_inputs(graph: Graph, group: Group) -> list[int]:
    """Entry ids a group reads from outside itself, in first-use order."""
    idx = graph.index
    rptr = idx.entry_rptr
    inside = set(group.nodes)
    seen: list[int] = []
    for nid in group.nodes:
        for i, k, _ in idx.inputs[nid]:
            e = rptr[i] + k
            if i not in inside and e not in seen:
                seen.append(e)
    return seen


def group_outputs(graph: Graph, group: Group) -> list[int]:
    """Entry ids the group's kernel writes: the root's outputs."""
    rptr = graph.index.entry_rptr
    return list(range(rptr[group.root], rptr[group.root + 1]))
