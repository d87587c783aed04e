"""Activation byte counts from a graph's shapes, dtypes and (optional) memory plan."""

from __future__ import annotations

import numpy as np

from ..ir import Graph


def dtype_bytes(name: str | None) -> int:
    from ..dtypes import itemsize

    return itemsize(name)


def entry_bytes(shape, dtype) -> int:
    if shape is None:
        return 0
    return int(np.prod(shape, dtype=np.int64)) * dtype_bytes(dtype)


def activation_bytes(graph: Graph) -> tuple[int | None, int]:
    """``(planned, naive)`` bytes of the entries produced by op nodes.

    ``planned`` sums the size of each storage id of the ``storage_id`` plan (None when the
    graph has no plan); ``naive`` gives every op output its own buffer.
    """
    idx = graph.index
    rptr = idx.entry_rptr
    shapes = graph.attrs.get("shape") or [None] * idx.num_node_entries
    dtypes = graph.attrs.get("dtype") or [None] * idx.num_node_entries
    storage = graph.attrs.get("storage_id")
    naive = 0
    pools: dict[int, int] = {}
    for nid, node in enumerate(idx.nodes):
        if node.op is None:
            continue
        for e in range(rptr[nid], rptr[nid + 1]):
            size = entry_bytes(shapes[e], dtypes[e])
            naive += size
            if storage is not None and storage[e] >= 0:
                pools[storage[e]] = max(pools.get(storage[e], 0), size)
    return (sum(pools.values()) if storage is not None else None), naive
