"""Cut a graph into kernels: FuseOps groups when the graph has them, else one op each.

The FuseOps contract (``nnvm_passes.fuse_ops``): ``group_root[nid]`` names the node whose
outputs the group's kernel produces, ``group_master[nid]`` the node whose schedule it uses;
only the root's outputs leave a group. A group that holds an op without a lowering rule is
split back into single ops, so only that op falls back to its reference kernel.
"""

from __future__ import annotations

import dataclasses

from nnvm.ir import Graph

from .lowering import unsupported_reason

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
    return groups


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
