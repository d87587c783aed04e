"""64-byte aligned NumPy buffers laid out by the static memory plan.

DLPack hands a buffer's address straight to the kernels; TVM-generated code assumes the
alignment of its buffers, so every array the executor owns starts on a 64-byte boundary (one
cache line, one AVX-512 vector). Entries that share a ``storage_id`` are views of one pool.
"""

from __future__ import annotations

import numpy as np

ALIGN = 64


def aligned_empty(nbytes: int) -> np.ndarray:
    """A uint8 array of ``nbytes`` whose data pointer is ALIGN-aligned."""
    raw = np.empty(max(int(nbytes), 1) + ALIGN, dtype=np.uint8)
    offset = (-raw.ctypes.data) % ALIGN
    return raw[offset:offset + max(int(nbytes), 1)]


def view(pool: np.ndarray, shape: tuple, dtype: str) -> np.ndarray:
    """An array of ``shape``/``dtype`` at the start of ``pool`` (which must be large enough)."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    return pool[:n].view(dt).reshape(shape)


def aligned_copy(arr: np.ndarray) -> np.ndarray:
    """An aligned C-contiguous copy of ``arr``."""
    arr = np.asarray(arr)
    out = view(aligned_empty(arr.nbytes), arr.shape, arr.dtype.name)
    np.copyto(out, arr)
    return out


class StoragePlan:
    """Pools for the entries of a graph, following ``storage_id`` when present.

    Args:
        sizes: ``{entry id: nbytes}`` of every entry the executor materialises.
        storage_id: the PlanMemory result (per entry) or None: one buffer per entry.

    Attributes:
        pools: ``{storage key: aligned uint8 array}``.
        key_of: ``{entry id: storage key}``.
    """

    def __init__(self, sizes: dict[int, int], storage_id: list[int] | None):
        self.key_of: dict[int, object] = {}
        need: dict[object, int] = {}
        for eid, nbytes in sizes.items():
            sid = storage_id[eid] if storage_id is not None else -1
            key = sid if sid is not None and sid >= 0 else ("entry", eid)
            self.key_of[eid] = key
            need[key] = max(need.get(key, 0), nbytes)
        self.pools = {k: aligned_empty(n) for k, n in need.items()}

    def entry(self, eid: int, shape: tuple, dtype: str) -> np.ndarray:
        return view(self.pools[self.key_of[eid]], shape, dtype)

    @property
    def nbytes(self) -> int:
        return int(sum(p.nbytes for p in self.pools.values()))
