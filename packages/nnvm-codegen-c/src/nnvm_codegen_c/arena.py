"""Device arena planning shared by the C-like backends (OpenCL, CUDA): one allocation per
device with a byte offset per entry.

The plan is made per *step* (fused group), not per node: an output never shares storage with
the inputs its own kernel reads, because a fused injective kernel (transpose, pad, gather)
reads other positions than it writes, so NNVM's node-level in-place sharing (PlanMemory's
``storage_id``) would be unsafe here. Take the group ``x -> transpose -> relu`` (``x``
produced by an earlier group): PlanMemory releases ``x``'s buffer after its last reader,
``transpose``, and gives it to ``relu``; the fused kernel then writes ``relu[i, j]`` while
other work-items still read ``x[j, i]`` from the same bytes -- a race. Node-level ids also
allocate every intermediate entry of a group, which a fused kernel never materialises.
Planning per step (a group's inputs all die after its kernel, never during it) keeps the
correctness property and sizes only what kernels store. Storage is freed after the last step
that reads it and reused best-fit by later steps (sizes rounded up to ``ALIGN`` = 256 bytes,
cudaMalloc's own alignment, which also aligns every tensor for vector loads). Graph inputs and
params get fixed slots, so a param uploaded once stays valid across runs.

Entries of a *host-only* dtype (``string``: NumPy object arrays of Python strings) get no
slot at all: their bytes are pointers into the host process, meaningless (and, read back,
a crash) on a device. Lowering turns every node touching one into a host step, and the
runtime modules keep such values as host arrays (:func:`host_only`).
"""


from __future__ import annotations

from nnvm.runtime.memory import entry_bytes

ALIGN = 256


def _round(n: int) -> int:
    return max(ALIGN, -(-n // ALIGN) * ALIGN)


#: dtypes whose values never leave the host (no device layout exists for them).
HOST_ONLY_DTYPES = frozenset({"string"})


def host_only(dtype: str | None) -> bool:
    """Whether an entry of ``dtype`` must stay a host array (never in a device arena)."""
    return dtype in HOST_ONLY_DTYPES


def plan_arena(info, steps, aliases: dict[int, int] | None = None
               ) -> tuple[dict[int, int], int, int]:
    """``(offset in bytes per entry, arena bytes, activation bytes)`` for ``steps``.

    Host-only entries (:func:`host_only`) get no offset. ``aliases`` maps an entry to the
    entry whose bytes it reuses as they are (a reshape is the same row-major bytes): it gets
    that entry's offset, and the storage lives until the last reader of either.
    """
    idx = info.idx
    aliases = aliases or {}
    offsets: dict[int, int] = {}
    end = 0

    def size(e):
        return _round(entry_bytes(info.shapes[e], info.dtypes[e]))

    def root(e):
        while e in aliases:
            e = aliases[e]
        return e

    for nid in idx.input_nodes:  # inputs and params: fixed slots
        e = info.entry(nid, 0)
        if host_only(info.dtypes[e]):
            continue
        offsets[e] = end
        end += size(e)
    act_start = end
    last_use: dict[int, int] = {}
    for s, step in enumerate(steps):
        for e in step.inputs:
            last_use[root(e)] = s
    keep = {root(e) for e in idx.output_entries}
    free: list[tuple[int, int]] = []  # (size, offset)
    for s, step in enumerate(steps):
        for e in step.outputs:
            if host_only(info.dtypes[e]):
                continue
            if e in aliases:
                offsets[e] = offsets[root(e)]
                continue
            need = size(e)
            fits = [blk for blk in free if blk[0] >= need]
            if fits:
                blk = min(fits)
                free.remove(blk)
                offsets[e] = blk[1]
                if blk[0] - need >= ALIGN:  # return the tail to the free list
                    free.append((blk[0] - need, blk[1] + need))
            else:
                offsets[e] = end
                end += need
        dead = {root(e) for e in step.inputs if last_use.get(root(e)) == s}
        dead |= {e for e in step.outputs if e not in aliases and e not in last_use}
        for e in sorted(dead):
            if e in keep or e not in offsets or idx.nodes[info.entry_node[e]].op is None:
                continue
            free.append((size(e), offsets[e]))
    return offsets, max(end, ALIGN), end - act_start
