"""The schema of the opencl artifact's ``plan.json`` and the cross references a schema cannot
express: every entry the runtime touches has an arena offset, each tensor fits the arena at
an offset aligned to its dtype, kernel arguments carry the graph's dtypes and name kernels
that ``kernels.cl`` defines, steps name real nodes and entries.

Why: the plan fixes every kernel argument to an arena offset at load time; a corrupt or
edited plan would otherwise fail as a ``KeyError`` or ``TypeError`` while binding kernels,
or make a kernel read and write outside its tensor. Each such plan is a
``SerializationError`` naming the member and the field, raised before any device buffer is
allocated or any program is built.
"""

from __future__ import annotations

import math
import re

from nnvm.errors import SerializationError, format_error
from nnvm.serialization.schema import (Bool, Int, IntKey, List, Map, Null, Obj, OneOf, Str)

_ENTRY = Int(0, 1 << 40)
_BYTES = Int(0, 1 << 48)
_ARG = Obj({"name": Str(256), "dtype": Str(32), "entry": _ENTRY, "output": Bool()})
_KERNEL = Obj({"name": Str(256), "args": List(_ARG, 4096),
               "global_size": List(Int(1, 1 << 32), 3, min_items=1),
               "local_size": OneOf(Null(), List(Int(1, 1 << 16), 3, min_items=1)),
               "group": _ENTRY})
PLAN_SCHEMA = Obj(
    {"version": Int(1, 1), "arena_bytes": _BYTES, "activation_bytes": _BYTES,
     "offsets": Map(_BYTES, key=IntKey()),
     "steps": List(Obj({"kind": Str(16, choices=("kernel", "host")), "root": _ENTRY,
                        "members": List(_ENTRY), "inputs": List(_ENTRY),
                        "outputs": List(_ENTRY), "reason": OneOf(Str(), Null()),
                        "kernels": List(_KERNEL, 4096)}))},
    optional={"device": Obj({"platform": Str(1024), "device": Str(1024)}, extra=True)})


def load_plan(artifact) -> tuple[dict, str]:
    """``(plan, kernels.cl source)`` of an opencl artifact, both validated.

    Raises:
        SerializationError: a member is missing, not UTF-8 or not JSON, or the plan does not
            match the schema or the graph; the message names the member and the field.
    """
    where = f"opencl artifact '{artifact.path}'"
    src = artifact.members.get("kernels.cl")
    try:
        source = None if src is None else src.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SerializationError(format_error(
            f"{where}, member 'kernels.cl'", f"is not UTF-8 ({exc.reason} at byte {exc.start})",
            fix="The file is corrupt or was edited; re-export it")) from None
    if source is None:
        raise SerializationError(format_error(f"{where}, member 'kernels.cl'", "is missing",
                                              fix="Re-export the model for opencl"))
    plan = artifact.json_member("plan.json", PLAN_SCHEMA)
    check_plan(plan, artifact.graph(), source, f"{where}, member 'plan.json'")
    return plan, source


def check_plan(plan: dict, graph, source: str, where: str) -> None:
    """The cross references of a plan that matched ``PLAN_SCHEMA``."""
    from nnvm.dtypes import itemsize
    from nnvm_codegen_c.arena import host_only

    def fail(field, what, expected, got):
        raise SerializationError(format_error(
            f"{where}, field '{field}'", what, expected, got,
            fix="The file is corrupt or was edited; re-export it"))

    idx = graph.index
    n_nodes, n_entries = len(idx.nodes), idx.num_node_entries
    shapes = graph.attrs.get("shape") or [None] * n_entries
    dtypes = graph.attrs.get("dtype") or [None] * n_entries
    arena = plan["arena_bytes"]
    offsets = {}
    for key, off in plan["offsets"].items():
        e = int(key)
        if e >= n_entries:
            fail(f"offsets[{key!r}]", "names no entry of graph.json", f"< {n_entries}", e)
        if shapes[e] is None or dtypes[e] is None or host_only(dtypes[e]):
            fail(f"offsets[{key!r}]", "places an entry without an arena slot",
                 "an entry of known shape and a device dtype", f"{dtypes[e]} {shapes[e]}")
        size = itemsize(dtypes[e])
        end = off + size * math.prod(shapes[e])
        if off % size or end > arena:
            fail(f"offsets[{key!r}]", "puts the tensor outside the arena or misaligned",
                 f"a multiple of {size} with offset + {end - off} bytes <= {arena}", off)
        offsets[e] = off

    def slotted(field, e):
        if e >= n_entries:
            fail(field, "names no entry of graph.json", f"< {n_entries}", e)
        if e not in offsets and not host_only(dtypes[e]):
            fail(field, "has no arena offset", "an entry listed in 'offsets'", e)

    defined = set(re.findall(r"__kernel\b[^;{]*?\bvoid\s+(\w+)\s*\(", source))
    for i, s in enumerate(plan["steps"]):
        for f in ("root", "members"):
            for j, nid in enumerate([s[f]] if f == "root" else s[f]):
                if nid >= n_nodes or idx.nodes[nid].op is None:
                    fail(f"steps[{i}].{f}" + ("" if f == "root" else f"[{j}]"),
                         "names no op node of graph.json", f"an op node id < {n_nodes}", nid)
        for f in ("inputs", "outputs"):
            for j, e in enumerate(s[f]):
                slotted(f"steps[{i}].{f}[{j}]", e)
        if s["kind"] == "host" and s["kernels"]:
            fail(f"steps[{i}].kernels", "lists kernels for a host step", "[]",
                 len(s["kernels"]))
        for k, kern in enumerate(s["kernels"]):
            at = f"steps[{i}].kernels[{k}]"
            if kern["name"] not in defined:
                fail(f"{at}.name", "names no kernel of kernels.cl",
                     f"one of {sorted(defined)[:5]}...", kern["name"])
            for j, a in enumerate(kern["args"]):
                slotted(f"{at}.args[{j}].entry", a["entry"])
                if a["dtype"] != dtypes[a["entry"]]:
                    fail(f"{at}.args[{j}].dtype", "differs from graph.json",
                         dtypes[a["entry"]], a["dtype"])
    for nid in idx.input_nodes:
        slotted(f"offsets (graph input '{idx.nodes[nid].name}')", idx.entry_rptr[nid])
    for e in idx.output_entries:
        if idx.nodes[_node_of(idx, e)].op is not None:
            slotted(f"offsets (graph output entry {e})", e)


def _node_of(idx, entry: int) -> int:
    """The node that produces ``entry`` (entry_rptr is sorted: the last start <= entry)."""
    import bisect

    return bisect.bisect_right(idx.entry_rptr, entry) - 1
