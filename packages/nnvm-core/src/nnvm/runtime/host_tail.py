"""A compiled module followed by a host tail: how compiled targets run data-dependent shapes.

``nnvm.compiler.dynamic_region`` cuts a graph whose shapes depend on data (NonZero, NMS,
Unique...) into a static part, compiled for the target, and a tail run by core's reference
interpreter, which allocates every output at run time. ``HostTailModule`` runs the two in
turn and returns the model's outputs in the model's order, those of the tail with the shape
they have in this run (``output_shapes`` says None for them).

Its artifact is the static part's own artifact (target, graph.json, params.bin and the
backend's members, so the backend loads it as ever) plus core members: the tail's graph
JSON and params, its control-flow bodies' constants, the values of model outputs folded to
constants at import (in neither part), and ``host_tail.json``, the wiring (where each tail
input comes from, where each model output comes from, the model's inputs and outputs).
``nnvm.runtime.load`` wraps the backend's module again when the wiring is there.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from ..errors import NNVMError, SerializationError, format_error
from ..ir import Graph
from .module import Module

WIRING = "host_tail.json"
TAIL_GRAPH = "host_tail_graph.json"
TAIL_PARAMS = "host_tail_params.bin"
TAIL_SUBGRAPH_PARAMS = "host_tail_subgraph_params.bin"
CONSTANT_OUTPUTS = "host_tail_constant_outputs.bin"
HOST_REASON = "data-dependent output shape, run on the host after the compiled part"
_IO = ("input_names", "input_shapes", "input_dtypes", "output_names", "output_shapes",
       "output_dtypes")


class HostTailModule(Module):
    """``static`` (a module of the compiled target) then ``tail`` (a reference module).

    Attributes:
        static, tail: the two modules.
        host_nodes: names of the nodes the tail runs on the host (for reports and for
            tools that can only run compiled steps, e.g. ``nnvm export-c``).
        wiring: ``tail_inputs`` ``{tail input: [source, key]}`` and ``outputs``
            ``[[source, key], ...]``, a source being ``"static"`` (key: output index of
            the static part), ``"tail"`` (output index of the tail) or ``"feed"`` (key: a
            model input or param name).
        constant_outputs: the values of ``"feed"`` outputs that are neither a model input
            nor a param of either part (outputs folded to constants at import, e.g. the
            Shape of a static tensor), taken from ``params``.
    """

    def __init__(self, graph: Graph, static: Module, tail: Module, tail_inputs: dict,
                 outputs: list, host_nodes: list, target: str, params: dict,
                 io: dict | None = None):
        super().__init__(graph, params, str(target))
        self.static, self.tail = static, tail
        self.host_nodes = list(host_nodes)
        self.wiring = {"tail_inputs": {k: list(v) for k, v in tail_inputs.items()},
                       "outputs": [list(v) for v in outputs]}
        for key, value in (io or {}).items():
            setattr(self, key, value)
        self.params = {**tail.params, **static.params}
        self.constant_outputs = {key: params[key] for source, key in self.wiring["outputs"]
                                 if source == "feed" and key in params and
                                 key not in self.params}
        _compile_bodies(tail.graph, static)

    #: backend extras forwarded to the compiled part (present only when it has them, so
    #: ``hasattr(module, "set_num_threads")`` keeps meaning "this backend has a pool")
    _FORWARDED = frozenset({"set_num_threads", "num_threads"})

    def __getattr__(self, name: str) -> Any:
        if name in HostTailModule._FORWARDED and "static" in self.__dict__:
            return getattr(self.static, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _execute(self, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        static_out = self.static.run(**_changed(feed, self.static))
        tail_feed = {}
        for name, (source, key) in self.wiring["tail_inputs"].items():
            if source == "static":
                tail_feed[name] = static_out[key]
            elif key not in self.tail.params or feed[key] is not self.tail.params[key]:
                tail_feed[name] = feed[key]
        tail_out = self.tail.run(**tail_feed)
        pick = {"static": static_out, "tail": tail_out, "feed": {**self.constant_outputs, **feed}}
        return [pick[source][key] for source, key in self.wiring["outputs"]]

    def stats(self) -> dict[str, Any]:
        """The compiled part's statistics plus ``host_nodes`` (how many nodes run on the host
        after it, with shapes known only at run time). Those without bodies are host steps,
        so they are counted in the backend's own fallback keys too (llvm ``num_fallback_kernels`` and
        its op list, opencl/cuda ``num_fallback_ops`` and its ``{node: "op: why"}``): a
        report of host fallbacks must not look clean because the steps sit in a tail.
        Control flow there is listed in ``control_flow_ops``: it decides on the host and
        runs its bodies compiled, as the llvm executor's own control flow does."""
        stats = self.static.stats()
        nodes = [n for n in self.tail.graph.index.nodes if n.op is not None]
        # control flow decides on the host but runs its bodies compiled: not a fallback
        flow = {n.op.name for n in nodes if n.subgraphs}
        if flow:
            stats["control_flow_ops"] = sorted(set(stats.get("control_flow_ops", ())) | flow)
        host = {n.name: n.op.name for n in nodes if not n.subgraphs}
        for key in ("num_fallback_kernels", "num_fallback_ops"):
            if key in stats:
                stats[key] += len(host)
        ops = stats.get("fallback_ops")
        if isinstance(ops, dict):
            ops.update({n: f"{op}: {HOST_REASON}" for n, op in host.items()})
        elif isinstance(ops, list):
            stats["fallback_ops"] = sorted(set(ops) | set(host.values()))
        stats.update(num_nodes=stats["num_nodes"] + len(nodes), host_nodes=len(nodes),
                     target=self.target)
        first = tail_summary(self.host_nodes, self.tail.graph)
        if first["first_node"] is not None:
            stats["host_tail_from"] = f"{first['first_node']} ({first['first_op']})"
        return stats

    def export_c(self, path: str) -> dict:
        """Refused: a C library runs compiled steps only, and this module's tail allocates
        at run time on the host."""
        raise host_tail_error(self, "export_c")

    def _num_kernels(self) -> int:
        return self.static._num_kernels() + self.tail._num_kernels()

    def export(self, path: str, sign_key: Any = None) -> None:
        """The static part's artifact plus the tail's members (see the module docstring)."""
        from .artifact import write_artifact

        write_artifact(path, _ExportView(self), sign_key=sign_key)

    def tail_members(self) -> dict[str, bytes]:
        from ..serialization.param_dict import save_param_dict
        from .artifact import subgraph_params

        io = {key: _jsonable(getattr(self, key)) for key in _IO}
        from .structured_outputs import STRUCTURE_ATTR

        structure = self.graph.attrs.get(STRUCTURE_ATTR)
        wiring = {"version": 1, **self.wiring, "host_nodes": self.host_nodes, "io": io}
        if structure is not None:
            wiring["structure"] = structure if isinstance(structure, str) else \
                json.dumps(structure)
        members = {WIRING: json.dumps(wiring).encode(),
                   TAIL_GRAPH: self.tail.graph.json().encode("utf-8"),
                   TAIL_PARAMS: save_param_dict(self._tail_params())}
        sub = subgraph_params(self.tail.graph)
        if sub:
            members[TAIL_SUBGRAPH_PARAMS] = save_param_dict(sub)
        if self.constant_outputs:
            members[CONSTANT_OUTPUTS] = save_param_dict(self.constant_outputs)
        return members


    def _tail_params(self) -> dict:
        """The tail's params plus the bound values of model inputs it reads directly."""
        fed = {name: self.params[key] for name, (source, key) in
               self.wiring["tail_inputs"].items() if source == "feed" and key in self.params}
        return {**self.tail.params, **fed}


def host_tail_error(module: HostTailModule, where: str) -> NNVMError:
    """The error for ``where`` (e.g. ``nnvm export-c``), which can run compiled steps only:
    names the first host node and points to the Python runtime."""
    nodes = module.host_nodes
    return NNVMError(format_error(
        where, f"the model has data-dependent output shapes: {len(nodes)} node(s) from "
        f"'{nodes[0]}' onwards run on the host (NumPy) after the compiled part",
        "a module without host steps", f"a host tail of {len(nodes)} node(s)",
        fix="Run it with the Python runtime (nnvm.runtime.load(path).run(...)); or freeze "
            "the inputs that decide those shapes at import (from_onnx(freeze=...))"))


class _ExportView:
    """The static module as ``write_artifact`` sees it, with the tail's members added."""

    def __init__(self, module: HostTailModule):
        self._module = module

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module.static, name)

    @property
    def params(self) -> dict:
        """The static part's params as bound on the whole module (overridable defaults that
        ``build`` binds on the whole module included, so they travel with the file)."""
        static = self._module.static
        bound = self._module.params
        return {**static.params, **{k: v for k, v in bound.items() if k in static.input_shapes}}

    @property
    def input_names(self) -> list[str]:
        return [n for n in self._module.static.input_names if n not in self.params]

    def _artifact_members(self) -> dict[str, bytes]:
        return {**self._module.static._artifact_members(), **self._module.tail_members()}


def tail_summary(host_nodes: list, tail: Graph, outputs: list | None = None) -> dict:
    """What a host tail runs: ``host_nodes`` (count), ``first_node`` and ``first_op`` (where
    the data-dependent part starts), ``ops`` (op name -> count, most first) and, given the
    model's ``outputs`` records, those too (the compiled part's are not the model's)."""
    ops = {n.name: n.op.name for n in tail.index.nodes if n.op is not None}
    counts: dict[str, int] = {}
    for op in ops.values():
        counts[op] = counts.get(op, 0) + 1
    first = host_nodes[0] if host_nodes else None
    out = {"host_nodes": len(ops), "first_node": first, "first_op": ops.get(first),
           "ops": dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))}
    if outputs is not None:
        out["outputs"] = outputs
    return out


def host_tail_summary(artifact) -> dict | None:
    """``tail_summary`` of an artifact's host tail with the model's outputs, or None when it
    has none. Why: ``nnvm inspect`` and the manifest describe ``graph.json``, which is the
    compiled part only; this reads the core members alone, so it works where the target's
    backend cannot load. Raises SerializationError for a malformed tail, as loading would."""
    if WIRING not in artifact.members:
        return None
    wiring = artifact.json_member(WIRING, _schema())
    io = wiring["io"]
    outputs = [{"name": n, "shape": s, "dtype": d} for n, s, d in
               zip(io["output_names"], io["output_shapes"], io["output_dtypes"])]
    return tail_summary(wiring["host_nodes"], _tail_graph(artifact), outputs)


def _tail_graph(artifact) -> Graph:
    """The tail's graph member, parsed (SerializationError naming it when missing or bad)."""
    from ..serialization.graph_json import load_json
    from .artifact import _as_serialization_error

    for name in (TAIL_GRAPH, TAIL_PARAMS):
        if name not in artifact.members:
            raise SerializationError(format_error(artifact._where(name), "is missing",
                                                  fix="Re-export the model"))
    return _as_serialization_error(artifact._where(TAIL_GRAPH),
                                   lambda: load_json(artifact.members[TAIL_GRAPH]))


def _compile_bodies(tail: Graph, static: Module) -> None:
    """Control flow in the tail (an If whose branches give different shapes, a Loop that
    stops early) decides on the host but runs its bodies compiled for the static part's
    target, built on first use (``nnvm.runtime.subgraph_runner``), as the llvm executor
    does for the control flow it runs itself."""
    from .subgraph_runner import SubgraphRunner

    for node in tail.index.nodes:
        if node.subgraphs:
            node.info["subgraph_runner"] = SubgraphRunner(
                static.target, getattr(static, "num_threads", 0))


def _changed(feed: dict, module: Module) -> dict:
    """The part of ``feed`` that ``module`` reads and does not hold already (a param passed
    again unchanged would make a backend re-pack its weights every run)."""
    out = {n: feed[n] for n in module.input_names if n in feed}
    for name, value in module.params.items():
        if name in feed and feed[name] is not value:
            out[name] = feed[name]
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def _schema():
    from ..serialization.schema import Int, List, Map, Null, Obj, OneOf, Shape, Str

    source = List(OneOf(Str(), Int(0)), min_items=2, max_items=2)
    maybe_shape = OneOf(Shape(), Null())
    maybe_dtype = OneOf(Str(), Null())
    io = Obj({"input_names": List(Str()), "input_shapes": Map(maybe_shape),
              "input_dtypes": Map(maybe_dtype), "output_names": List(Str()),
              "output_shapes": List(maybe_shape), "output_dtypes": List(maybe_dtype)})
    return Obj({"version": Int(1, 1), "tail_inputs": Map(source), "outputs": List(source),
                "host_nodes": List(Str()), "io": io}, optional={"structure": Str(1 << 24)})


def attach_host_tail(module: Module, artifact) -> Module:
    """``module`` (the backend's, from ``artifact``) wrapped with the artifact's host tail,
    or ``module`` itself when the artifact has none. Every reference is checked first."""
    if WIRING not in artifact.members:
        return module
    from ..backends.reference import ReferenceModule
    from ..serialization.param_dict import load_param_dict
    from .artifact import _as_serialization_error, attach_subgraph_params

    wiring = artifact.json_member(WIRING, _schema())
    graph = _tail_graph(artifact)
    params = _as_serialization_error(artifact._where(TAIL_PARAMS),
                                     lambda: load_param_dict(artifact.members[TAIL_PARAMS]))
    if TAIL_SUBGRAPH_PARAMS in artifact.members:
        where = artifact._where(TAIL_SUBGRAPH_PARAMS)
        flat = _as_serialization_error(
            where, lambda: load_param_dict(artifact.members[TAIL_SUBGRAPH_PARAMS]))
        attach_subgraph_params(graph, flat, where)
    tail = ReferenceModule(graph, params)
    constants = {}
    if CONSTANT_OUTPUTS in artifact.members:
        constants = _as_serialization_error(
            artifact._where(CONSTANT_OUTPUTS),
            lambda: load_param_dict(artifact.members[CONSTANT_OUTPUTS]))
    _check_wiring(wiring, module, tail, constants, artifact._where(WIRING))
    if "structure" in wiring:
        from .structured_outputs import STRUCTURE_ATTR

        graph = graph.with_attrs(**{STRUCTURE_ATTR: wiring["structure"]})
    io = dict(wiring["io"])
    io["input_shapes"] = {k: _tuple(v) for k, v in io["input_shapes"].items()}
    io["output_shapes"] = [_tuple(v) for v in io["output_shapes"]]
    return HostTailModule(graph, module, tail, wiring["tail_inputs"], wiring["outputs"],
                          wiring["host_nodes"], artifact.manifest["target"], constants, io)


def _tuple(shape):
    return None if shape is None else tuple(shape)


def _check_wiring(wiring: dict, static: Module, tail: Module, constants: dict,
                  where: str) -> None:
    """Every index in range and every name known, before the module is ever run."""
    known = set(wiring["io"]["input_shapes"]) | set(constants)
    sizes = {"static": len(static.output_names), "tail": len(tail.output_names)}

    def check(path: str, source: str, key: Any, allowed: tuple) -> None:
        ok = (key in known or key in tail.params) if source == "feed" else \
            source in allowed and isinstance(key, int) and key < sizes[source]
        if not ok:
            raise SerializationError(format_error(
                f"{where}, {path}", "names no value of the model", "an output index in "
                f"range of {' or '.join(allowed)}, or a model input", [source, key],
                fix="Re-export the model"))

    for name, (source, key) in wiring["tail_inputs"].items():
        if name not in tail.input_shapes:
            raise SerializationError(format_error(f"{where}, tail_inputs.{name}",
                                                  "names no input of the tail graph",
                                                  fix="Re-export the model"))
        check(f"tail_inputs.{name}", source, key, ("static",))
    for i, (source, key) in enumerate(wiring["outputs"]):
        check(f"outputs[{i}]", source, key, ("static", "tail"))


__all__ = ["HostTailModule", "attach_host_tail", "host_tail_error", "host_tail_summary",
           "tail_summary"]
