"""The OpenCL memory plan: one arena per device (see ``nnvm.codegen.arena`` for why it is
planned per fused step rather than taken from PlanMemory's ``storage_id``)."""

from __future__ import annotations

from nnvm.codegen.arena import ALIGN, plan_arena

__all__ = ["ALIGN", "plan_arena"]
