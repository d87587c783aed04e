"""PlanMemory: static memory plan for the activations of a graph (NNVM's algorithm).

Walks the nodes in topological order with reference counts per entry. An op may write its
output into an input's buffer (``FInplaceOption``) when that buffer has no other reader, or
always when the op is an identity (``FInplaceIdentity``), provided both hold the same number
of elements of the same byte width. Other outputs, largest first, take a released buffer from
a free list whose size lies within ``[size / match_range, size * match_range)`` (exact or
larger blocks first, then the largest smaller one, which then grows) or a new buffer. Buffers
are pooled per device (the ``device`` attribute of PlaceDevice), and the plan is computed for
match ranges 1, 2, 4, ... 16, keeping the one with the fewest bytes in total.

Storage ids: ``>= 0`` a planned buffer, ``-1`` unknown shape (not allocated), ``-2``
external (graph inputs and variables: bound by the caller, never shared with activations).

Graph attributes read: ``shape``, ``dtype`` (required), ``device`` (optional, per node),
``storage_match_range`` (default 16, env ``NNVM_EXEC_MATCH_RANGE``; 0 disables sharing),
``storage_auto_search`` (default True, env ``NNVM_AUTO_SEARCH_MATCH_RANGE``).
Provides ``storage_id`` (per entry), ``storage_inplace_index`` (per entry: the input slot an
output reuses, -1 none, -2 an output nobody reads), ``storage_allocated_bytes``,
``storage_num_not_allocated`` and ``storage_match_range`` (the range that won).
"""

from __future__ import annotations

import bisect
import dataclasses
import os
from typing import Any, Sequence

from nnvm.errors import AttrError, format_error, node_where
from nnvm.ir import Graph, IndexedGraph
from nnvm.pass_manager import PassSet
from nnvm.runtime.memory import dtype_bytes, entry_bytes

PASSES = PassSet()

BAD_STORAGE = -1
EXTERNAL_STORAGE = -2
UNUSED_OUTPUT = -2  # storage_inplace_index of an output that no node reads


@PASSES.define("PlanMemory", requires=("shape", "dtype"),
               provides=("storage_id", "storage_inplace_index", "storage_allocated_bytes",
                         "storage_num_not_allocated"), opt_level=0)
def plan_memory(graph: Graph) -> Graph:
    """Share activation buffers between entries whose lifetimes do not overlap.

    NNVM's algorithm: reference counts, in-place reuse (FInplaceOption/FInplaceIdentity,
    same size and dtype width), a size-matched free list per device, and a search over the
    match range keeping the plan with the fewest bytes. Graph inputs get storage id -2.
    """
    idx = graph.index
    shapes, dtypes = graph.attrs["shape"], graph.attrs["dtype"]
    for key, vals in (("shape", shapes), ("dtype", dtypes)):
        if len(vals) != idx.num_node_entries:
            raise AttrError(format_error(
                "pass 'PlanMemory'", f"graph attribute '{key}' is stale", idx.num_node_entries,
                f"{len(vals)} entries", fix="Run InferShape/InferType after the last pass "
                                            "that changed the graph"))
    devices = _devices(graph)
    max_range = int(graph.attrs.get("storage_match_range",
                                    os.environ.get("NNVM_EXEC_MATCH_RANGE", 16)))
    auto = graph.attrs.get("storage_auto_search",
                           os.environ.get("NNVM_AUTO_SEARCH_MATCH_RANGE", "1") not in ("0", ""))
    ranges = [max_range]
    if auto and max_range > 1:
        ranges, r = [], 1
        while r <= max_range:
            ranges.append(r)
            r *= 2
    ctx = _Context.of(idx, shapes, dtypes, devices)
    best = None
    for match_range in ranges:
        plan = _allocate(ctx, match_range)
        if best is None or plan.allocated_bytes < best.allocated_bytes:
            best = plan
    return graph.with_attrs(storage_id=best.storage, storage_inplace_index=best.inplace_index,
                            storage_allocated_bytes=best.allocated_bytes,
                            storage_num_not_allocated=best.num_not_allocated,
                            storage_match_range=best.match_range)


def _devices(graph: Graph) -> list[Any] | None:
    devices = graph.attrs.get("device")
    if devices is None:
        return None
    if len(devices) != graph.index.num_nodes:
        raise AttrError(format_error("pass 'PlanMemory'", "graph attribute 'device' is stale",
                                     f"{graph.index.num_nodes} nodes", f"{len(devices)}",
                                     fix="Run PlaceDevice after the last pass that changed "
                                         "the graph"))
    return list(devices)


@dataclasses.dataclass
class _Context:
    """Per-graph facts shared by every match-range trial."""

    idx: IndexedGraph
    sizes: list[int | None]      # bytes per entry, None = unknown shape
    widths: list[int]            # bytes per element
    elems: list[int | None]      # elements per entry
    devices: list[Any] | None
    entry_refs: list[int]
    ignored: list[set[int]]      # per node: input slots in FIgnoreInputs
    inplace: list[list[tuple[int, int, bool]]]  # per node: (in, out, identity)

    @classmethod
    def of(cls, idx: IndexedGraph, shapes: Sequence, dtypes: Sequence,
           devices: list[Any] | None) -> "_Context":
        n = idx.num_node_entries
        sizes = [None if shapes[e] is None else entry_bytes(shapes[e], dtypes[e])
                 for e in range(n)]
        widths = [dtype_bytes(dtypes[e]) for e in range(n)]
        elems = [None if shapes[e] is None else sizes[e] // max(1, widths[e]) for e in range(n)]
        refs = [0] * n
        ignored, inplace = [], []
        for nid, node in enumerate(idx.nodes):
            ign: set[int] = set()
            pairs: list[tuple[int, int, bool]] = []
            if node.op is not None:
                f = node.op.get_attr("FIgnoreInputs")
                ign = set(f(node.attrs)) if f is not None else set()
                f = node.op.get_attr("FInplaceOption")
                opts = list(f(node.attrs)) if f is not None else []
                f = node.op.get_attr("FInplaceIdentity")
                ident = list(f(node.attrs)) if f is not None else [False] * len(opts)
                if len(ident) != len(opts):
                    raise AttrError(format_error(
                        node_where(node), "FInplaceOption and FInplaceIdentity disagree in "
                        "length", len(opts), len(ident)))
                pairs = [(i, o, bool(b)) for (i, o), b in zip(opts, ident)]
            for slot, (src, k, _) in enumerate(idx.inputs[nid]):
                if slot not in ign:
                    refs[idx.entry_rptr[src] + k] += 1
            ignored.append(ign)
            inplace.append(pairs)
        for e in idx.output_entries:
            refs[e] += 1
        return cls(idx, sizes, widths, elems, devices, refs, ignored, inplace)


@dataclasses.dataclass
class _Plan:
    storage: list[int]
    inplace_index: list[int]
    allocated_bytes: int
    num_not_allocated: int
    match_range: int


class _Allocator:
    """NNVM's GraphAllocator: a free list per device, searched by size within a match range."""

    def __init__(self, match_range: int):
        self.match_range = match_range
        self.block_bytes: list[int] = []
        self.block_device: list[Any] = []
        self.free: dict[Any, list[tuple[int, int]]] = {}  # device -> sorted (bytes, id)

    def request(self, size: int, device: Any) -> int:
        if self.match_range == 0:
            return self._new(size, device)
        pool = self.free.setdefault(device, [])
        lo = size // self.match_range
        hi = size * self.match_range
        mid = bisect.bisect_left(pool, (size, -1))
        end = bisect.bisect_right(pool, (hi, len(self.block_bytes)))
        if mid < end and mid < len(pool):  # the smallest block at least as large
            _, sid = pool.pop(mid)
            return sid
        begin = bisect.bisect_left(pool, (lo, -1))
        if mid > begin:  # else the largest smaller block, grown to fit
            _, sid = pool.pop(mid - 1)
            self.block_bytes[sid] = max(self.block_bytes[sid], size)
            return sid
        return self._new(size, device)

    def release(self, sid: int) -> None:
        bisect.insort(self.free.setdefault(self.block_device[sid], []),
                      (self.block_bytes[sid], sid))

    def _new(self, size: int, device: Any) -> int:
        self.block_bytes.append(size)
        self.block_device.append(device)
        return len(self.block_bytes) - 1

    @property
    def total_bytes(self) -> int:
        return sum(self.block_bytes)


def _allocate(ctx: _Context, match_range: int) -> _Plan:
    idx = ctx.idx
    rptr = idx.entry_rptr
    storage = [BAD_STORAGE] * idx.num_node_entries
    inplace_index = [-1] * idx.num_node_entries
    storage_refs: dict[int, int] = {}
    alloc = _Allocator(match_range)
    not_allocated = 0
    for nid in idx.input_nodes:
        storage[rptr[nid]] = EXTERNAL_STORAGE
    for nid, node in enumerate(idx.nodes):
        if node.op is None:
            continue
        ins = [rptr[src] + k for src, k, _ in idx.inputs[nid]]
        ignore_all = len(ctx.ignored[nid]) == len(ins) and len(ins) > 0
        taken = [False] * len(ins)
        device = None if ctx.devices is None else ctx.devices[nid]
        for slot, out, identity in ctx.inplace[nid]:
            if slot >= len(ins) or out >= rptr[nid + 1] - rptr[nid]:
                continue
            e_in, e_out = ins[slot], rptr[nid] + out
            sid = storage[e_in]
            if (not taken[slot] and storage[e_out] == BAD_STORAGE and sid >= 0
                    and ((storage_refs[sid] == 1 and not ignore_all) or identity)
                    and ctx.entry_refs[e_out] > 0
                    and ctx.elems[e_out] is not None and ctx.elems[e_out] == ctx.elems[e_in]
                    and ctx.widths[e_out] == ctx.widths[e_in]
                    and alloc.block_device[sid] == device
                    and ctx.sizes[e_out] <= alloc.block_bytes[sid]):
                taken[slot] = True
                storage[e_out] = sid
                storage_refs[sid] += ctx.entry_refs[e_out]
                inplace_index[e_out] = slot
        fresh = [e for e in range(rptr[nid], rptr[nid + 1]) if storage[e] == BAD_STORAGE
                 and ctx.sizes[e] is not None]
        for e in sorted(fresh, key=lambda e: -ctx.sizes[e]):
            sid = alloc.request(ctx.sizes[e], device)
            storage[e] = sid
            storage_refs[sid] = ctx.entry_refs[e]
        for slot, e in enumerate(ins):
            sid = storage[e]
            if slot in ctx.ignored[nid] or sid < 0:
                continue
            storage_refs[sid] -= 1
            if storage_refs[sid] == 0:
                alloc.release(sid)
        for e in range(rptr[nid], rptr[nid + 1]):
            sid = storage[e]
            if sid >= 0 and storage_refs[sid] == 0:
                alloc.release(sid)
                inplace_index[e] = UNUSED_OUTPUT
            if sid == BAD_STORAGE:
                not_allocated += 1
    return _Plan(storage, inplace_index, alloc.total_bytes, not_allocated, match_range)


# -- verification --------------------------------------------------------------------------

def check_memory_plan(graph: Graph) -> dict[str, int]:
    """Verify a memory plan by simulating liveness; raise AssertionError on the first clash.

    Each entry is live from the step of the node that writes it to the last step that reads
    it (graph outputs: to the end). Two entries may share a storage id only if their live
    ranges are disjoint, or one hands its buffer to the other in place at its last read
    (``storage_inplace_index``), or an identity op (FInplaceIdentity) made them one value.
    Also checked: variables are external (-2) and nothing else is, a buffer stays on one
    device, and every entry fits its buffer.

    Returns:
        ``planned_bytes`` (sum of buffer sizes), ``naive_bytes`` (one buffer per op output)
        and ``peak_live_bytes`` (largest total size of op outputs live at one step, where
        the inputs a step reads for the last time count as live: a lower bound for any plan
        without in-place reuse).
    """
    idx = graph.index
    rptr = idx.entry_rptr
    storage = graph.attrs["storage_id"]
    inplace_index = graph.attrs["storage_inplace_index"]
    shapes, dtypes = graph.attrs["shape"], graph.attrs["dtype"]
    devices = graph.attrs.get("device")
    n_steps = idx.num_nodes
    start = [0] * idx.num_node_entries
    end = [0] * idx.num_node_entries
    parent = list(range(idx.num_node_entries))

    def find(e: int) -> int:
        while parent[e] != e:
            parent[e] = parent[parent[e]]
            e = parent[e]
        return e

    for nid, node in enumerate(idx.nodes):
        for e in range(rptr[nid], rptr[nid + 1]):
            start[e] = end[e] = nid
            if node.op is None:
                assert storage[e] == EXTERNAL_STORAGE, f"variable '{node.name}' is not external"
            else:
                assert storage[e] != EXTERNAL_STORAGE, f"op output of '{node.name}' is external"
    for nid, node in enumerate(idx.nodes):
        ignored = set()
        if node.op is not None:
            f = node.op.get_attr("FIgnoreInputs")
            ignored = set(f(node.attrs)) if f is not None else set()
            f = node.op.get_attr("FInplaceIdentity")
            pairs = node.op.get_attr("FInplaceOption")
            if f is not None and pairs is not None:
                for (i, o), same in zip(pairs(node.attrs), f(node.attrs)):
                    e_out = rptr[nid] + o
                    if same and inplace_index[e_out] == i:
                        src, k, _ = idx.inputs[nid][i]
                        parent[find(e_out)] = find(rptr[src] + k)
        for slot, (src, k, _) in enumerate(idx.inputs[nid]):
            if slot not in ignored:
                end[rptr[src] + k] = max(end[rptr[src] + k], nid)
    for e in idx.output_entries:
        end[e] = n_steps
    by_sid: dict[int, list[int]] = {}
    for e, sid in enumerate(storage):
        if sid >= 0:
            by_sid.setdefault(sid, []).append(e)
    producer = [nid for nid in range(idx.num_nodes) for _ in range(rptr[nid], rptr[nid + 1])]
    sizes = [entry_bytes(shapes[e], dtypes[e]) for e in range(idx.num_node_entries)]
    planned = 0
    for sid, entries in by_sid.items():
        planned += max(sizes[e] for e in entries)
        if devices is not None:
            devs = {devices[producer[e]] for e in entries}
            assert len(devs) == 1, f"storage {sid} is shared across devices {devs}"
        entries.sort(key=lambda e: (start[e], end[e]))
        open_: list[int] = []  # earlier entries still live at the current start
        for b in entries:
            open_ = [a for a in open_ if end[a] >= start[b]]
            for a in open_:
                if find(a) == find(b):
                    continue
                handoff = end[a] == start[b] and inplace_index[b] >= 0 and \
                    rptr[idx.inputs[producer[b]][inplace_index[b]][0]] + \
                    idx.inputs[producer[b]][inplace_index[b]][1] == a
                assert handoff, (
                    f"storage {sid}: entry {a} ({idx.nodes[producer[a]].name}, live "
                    f"{start[a]}..{end[a]}) and entry {b} ({idx.nodes[producer[b]].name}, live "
                    f"{start[b]}..{end[b]}) overlap")
            open_.append(b)
    delta = [0] * (n_steps + 2)
    naive = 0
    for e in range(idx.num_node_entries):
        if idx.nodes[producer[e]].op is None:
            continue
        naive += sizes[e]
        delta[start[e]] += sizes[e]
        delta[end[e] + 1] -= sizes[e]
    peak = live = 0
    for d in delta:
        live += d
        peak = max(peak, live)
    return {"planned_bytes": planned, "naive_bytes": naive, "peak_live_bytes": peak}
