"""The schema of the llvm artifact's ``executor.json`` and the cross references a schema
cannot express (entries exist in the graph with its shapes and dtypes, kernel arguments name
listed entries and packed weights, reference steps name real nodes). Why: the plan drives
native calls with raw buffers; a corrupt or edited plan must be a ``SerializationError``
naming the field before any library is mapped, never an IndexError deep in the executor.
"""

from __future__ import annotations

from nnvm.errors import SerializationError, format_error
from nnvm.serialization.schema import (AnyValue, Int, IntKey, List, Map, Num, Obj, OneOf, Shape,
                                       Str, validate)

_REF = OneOf(Obj({"entry": Int(0, 1 << 40)}), Obj({"packed": Str(1024)}))
PLAN_SCHEMA = Obj(
    {"format": Str(64, choices=("nnvm-llvm-plan",)), "version": Int(1, 1), "graph": Str(64),
     "steps": List(OneOf(
         Obj({"kind": Str(choices=("kernel",)), "func": Str(1024), "args": List(_REF, 4096)},
             optional={"nodes": List(Int(0, 1 << 40), 4096), "group": List(Str(256), 4096)},
             extra=True),
         Obj({"kind": Str(choices=("reference",)), "node": Int(0, 1 << 40),
              "inputs": List(Int(0, 1 << 40), 4096), "outputs": List(Int(0, 1 << 40), 4096)},
             extra=True))),
     "entries": Map(Obj({"shape": Shape(), "dtype": Str(32), "storage": Int(-2, 1 << 40)}),
                    key=IntKey()),
     "packed": Map(Obj({"param": Str(1024), "layout": Str(64), "block": Int(1, 1 << 16)})),
     "baked": Map(Num())},
    optional={"num_threads": Int(0, 1 << 16), "tvm_target": Str(1 << 16)}, extra=True)


def check_plan(plan, graph, params, where="llvm artifact, member 'executor.json'"):
    """Schema, then the cross references the schema cannot express."""
    validate(plan, PLAN_SCHEMA, where)
    n_entries, n_nodes = graph.index.num_node_entries, len(graph.index.nodes)
    entries = {int(k) for k in plan["entries"]}

    def fail(field, what, expected, got):
        raise SerializationError(format_error(
            f"{where}, field '{field}'", what, expected, got,
            fix="The file is corrupt or was edited; re-export it"))
    for e in entries:
        if e >= n_entries:
            fail(f"entries[{str(e)!r}]", "names no entry of graph.json", f"< {n_entries}", e)
    shapes = graph.attrs.get("shape") or [None] * n_entries
    dtypes = graph.attrs.get("dtype") or [None] * n_entries
    for k, info in plan["entries"].items():
        e = int(k)
        if shapes[e] is not None and list(shapes[e]) != info["shape"]:
            fail(f"entries[{k!r}].shape", "differs from graph.json", list(shapes[e]),
                 info["shape"])
        if dtypes[e] is not None and dtypes[e] != info["dtype"]:
            fail(f"entries[{k!r}].dtype", "differs from graph.json", dtypes[e], info["dtype"])
    for i, s in enumerate(plan["steps"]):
        if s["kind"] == "kernel":
            for j, a in enumerate(s["args"]):
                if "entry" in a and a["entry"] not in entries:
                    fail(f"steps[{i}].args[{j}].entry", "is not in 'entries'",
                         "a listed entry", a["entry"])
                if "packed" in a and a["packed"] not in plan["packed"]:
                    fail(f"steps[{i}].args[{j}].packed", "is not in 'packed'",
                         "a listed key", a["packed"])
        else:
            if s["node"] >= n_nodes:
                fail(f"steps[{i}].node", "names no node", f"< {n_nodes}", s["node"])
            for f in ("inputs", "outputs"):
                for j, e in enumerate(s[f]):
                    if e not in entries:
                        fail(f"steps[{i}].{f}[{j}]", "is not in 'entries'", "a listed entry", e)
    for key, spec in plan["packed"].items():
        if spec["param"] not in params:
            fail(f"packed[{key!r}].param", "is not a param of params.bin", "a param name",
                 spec["param"])
    for e in graph.index.output_entries:
        if e not in entries:
            fail("entries", "lacks an output entry", e, sorted(entries)[:10])
