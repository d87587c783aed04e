"""The device memory plan: ONE device allocation (the arena) with a byte offset per entry.

The arena itself is planned by ``nnvm_codegen_c.arena.plan_arena``, shared with OpenCL (per
fused step, so a fused kernel never writes storage it still reads; 256-byte alignment, which
is cudaMalloc's own).

The plan and the steps are serialised to ``plan.json`` in the artifact; kernels are recorded
by name and launch shape (their text is in ``kernels.cu`` / the PTX members).
"""

from __future__ import annotations

from nnvm_codegen_c.arena import ALIGN, plan_arena  # noqa: F401 - re-exported
from nnvm_codegen_c.lower import Step
from nnvm_codegen_c.renderer import Kernel, TensorArg
from nnvm.errors import SerializationError

PLAN_VERSION = 1


def plan_to_json(steps: list[Step], offsets: dict[int, int], arena: int, act: int,
                 **extra) -> dict:
    return {"version": PLAN_VERSION, "arena_bytes": arena, "activation_bytes": act,
            "offsets": {str(e): o for e, o in sorted(offsets.items())},
            "steps": [{"kind": s.kind, "root": s.root, "members": s.members,
                       "outputs": s.outputs, "inputs": s.inputs, "reason": s.reason,
                       "kernels": [k.to_json() for k in s.kernels]} for s in steps],
            **extra}


def plan_from_json(plan: dict) -> tuple[list[Step], dict[int, int], int, int]:
    """Inverse of :func:`plan_to_json` (kernel sources are left empty)."""
    if not isinstance(plan, dict) or plan.get("version") != PLAN_VERSION:
        got = plan.get("version") if isinstance(plan, dict) else type(plan).__name__
        raise SerializationError(f"cuda artifact: plan.json version {got!r}; this backend "
                                 f"reads version {PLAN_VERSION} -> re-export the model")
    try:
        steps = []
        for s in plan["steps"]:
            ks = [Kernel(k["name"], "", [TensorArg(**a) for a in k["args"]],
                         tuple(k["global_size"]),
                         None if k["local_size"] is None else tuple(k["local_size"]),
                         k["group"]) for k in s["kernels"]]
            steps.append(Step(s["kind"], s["root"], s["members"], ks, s["outputs"],
                              s["inputs"], s["reason"]))
        offsets = {int(e): int(o) for e, o in plan["offsets"].items()}
        return steps, offsets, int(plan["arena_bytes"]), int(plan["activation_bytes"])
    except (KeyError, TypeError, ValueError) as exc:
        raise SerializationError(f"cuda artifact: plan.json is malformed ({exc!r}) -> "
                                 f"re-export the model") from None
