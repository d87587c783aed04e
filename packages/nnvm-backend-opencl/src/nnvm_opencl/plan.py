"""The OpenCL memory plan: one arena per device (see ``nnvm_codegen_c.arena`` for why it is
planned per fused step rather than taken from PlanMemory's ``storage_id``), with readable
guard bytes before its first and after its last tensor."""

from __future__ import annotations

from nnvm_codegen_c.arena import ALIGN, plan_arena as _plan_tensors

__all__ = ["ALIGN", "GUARD_BYTES", "plan_arena"]

#: bytes kept around the arena's tensors (a multiple of ``ALIGN``). The CPU convolution reads
#: row edges as whole vectors and masks the lanes outside the row (one AND instead of a
#: guarded scalar read per lane), so a read may run up to a segment past a tensor's end or
#: a few elements before its start; the guard keeps such reads inside the allocation.
#: Announced to the kernel templates as ``limits["overread_guard_bytes"]``.
GUARD_BYTES = 2048


def plan_arena(info, steps, aliases: dict[int, int] | None = None
               ) -> tuple[dict[int, int], int, int]:
    """``(offsets, arena bytes, activation bytes)`` with every offset shifted past the guard
    (``aliases``: see ``nnvm_codegen_c.arena.plan_arena``)."""
    offsets, arena, act = _plan_tensors(info, steps, aliases)
    return {e: o + GUARD_BYTES for e, o in offsets.items()}, arena + 2 * GUARD_BYTES, act
