"""The device memory plan: ONE device allocation (the arena) with a byte offset per entry.

Planned per *step* (fused group), not per node: an output never shares storage with inputs
its own kernel reads, because a fused injective kernel (transpose, pad, gather) reads other
positions than it writes, so PlanMemory's node-level in-place ``storage_id`` sharing would be
unsafe for fused kernels. Storage is released after the last step reading it and reused
best-fit (sizes rounded to ``ALIGN`` = 256 bytes, cudaMalloc's own alignment, so every tensor
starts aligned for coalesced and vector loads). Graph inputs and params get fixed slots so a
param uploaded once stays valid across runs.

The plan and the steps are serialised to ``plan.json`` in the artifact; kernels are recorded
by name and launch shape (their text is in ``kernels.cu`` / the PTX members).
"""

from __future__ import annotations

from nnvm.codegen.lower import Step
from nnvm.codegen.renderer import Kernel, TensorArg
from nnvm.errors import SerializationError
from nnvm.runtime.memory import entry_bytes

ALIGN = 256
PLAN_VERSION = 1


def _round(n: int) -> int:
    return max(ALIGN, -(-n // ALIGN) * ALIGN)


def plan_arena(info, steps: list[Step]) -> tuple[dict[int, int], int, int]:
    """``(byte offset per entry, arena bytes, activation bytes)`` for ``steps``."""
    idx = info.idx
    offsets: dict[int, int] = {}
    end = 0

    def size(e: int) -> int:
        return _round(entry_bytes(info.shapes[e], info.dtypes[e]))

    for nid in idx.input_nodes:  # inputs and params: fixed slots
        e = info.entry(nid, 0)
        offsets[e] = end
        end += size(e)
    act_start = end
    last_use: dict[int, int] = {}
    for s, step in enumerate(steps):
        for e in step.inputs:
            last_use[e] = s
    keep = set(idx.output_entries)
    free: list[tuple[int, int]] = []  # (size, offset)
    for s, step in enumerate(steps):
        for e in step.outputs:
            need = size(e)
            fits = [blk for blk in free if blk[0] >= need]
            if fits:
                blk = min(fits)
                free.remove(blk)
                offsets[e] = blk[1]
                if blk[0] - need >= ALIGN:
                    free.append((blk[0] - need, blk[1] + need))
            else:
                offsets[e] = end
                end += need
        dead = [e for e in step.inputs if last_use.get(e) == s]
        dead += [e for e in step.outputs if e not in last_use]
        for e in dead:
            if e in keep or idx.nodes[info.entry_node[e]].op is None:
                continue
            free.append((size(e), offsets[e]))
    return offsets, max(end, ALIGN), end - act_start


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
