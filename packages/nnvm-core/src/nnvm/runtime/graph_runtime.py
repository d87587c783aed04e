"""The original NNVM deployment API: ``graph_runtime.create(graph, lib, ctx)``.

The original NNVM (TVM v0.4-v0.6) split a build into three results and put them back
together at run time::

    graph, lib, params = nnvm.compiler.build(graph, target, shape={"data": s}, params=params)
    module = nnvm.runtime.graph_runtime.create(graph, lib, nnvm.cpu(0))
    module.set_input(**params)
    module.run(data=x)
    out = module.get_output(0)

This project's ``build`` returns one object instead (``lib = build(...)``; ``lib.run(x=...)``,
``lib.export(...)``), which already holds the optimised graph, the compiled kernels and the
params. Both forms work without two build functions or a flag:

* the module returned by ``build`` unpacks as ``(graph, lib, params)`` (``Module.__iter__``:
  the optimised graph, the module itself as the compiled library, and a copy of the params
  *it* runs with, i.e. after constant folding and the like, exactly what NNVM returned; a
  copy, because code that saves those params must not see later ``set_input`` rebinding).
  Unpacking is the only way the original code uses the result, and a module was never
  iterable before, so nothing that works today changes meaning;
* ``create`` accepts that module as ``lib`` and returns a ``GraphModule``: a view with the
  graph runtime's method names over the same module (no copy of the weights), after
  checking that ``graph`` is the module's graph and ``ctx`` a device its target runs on.

Why not return a tuple from ``build`` when asked (``return_tuple=True``) or a separate
``build_legacy``: code written for NNVM would still not run as written, which is the point.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..errors import ExecutionError, NNVMError, format_error

__all__ = ["Device", "GraphModule", "cpu", "gpu", "cuda", "cl", "opencl", "create"]


@dataclasses.dataclass(frozen=True)
class Device:
    """A device context as the original API passed it (``nnvm.cpu(0)``, TVM's ``tvm.cpu(0)``).

    NNVM modules are bound to their device when built (the target says where they run), so
    the context is checked against the module's target rather than used to move anything.
    """

    device_type: str
    device_id: int = 0

    def __repr__(self) -> str:
        return f"{self.device_type}({self.device_id})"


def cpu(device_id: int = 0) -> Device:
    """The host CPU (targets ``reference`` and ``llvm``)."""
    return Device("cpu", int(device_id))


def cuda(device_id: int = 0) -> Device:
    """An NVIDIA GPU (target ``cuda``); ``gpu`` is the original name."""
    return Device("cuda", int(device_id))


def opencl(device_id: int = 0) -> Device:
    """An OpenCL device (target ``opencl``); ``cl`` is the original name."""
    return Device("opencl", int(device_id))


gpu = cuda
cl = opencl

#: The device type each built-in target runs on; third-party targets accept any context.
_TARGET_DEVICE = {"reference": "cpu", "llvm": "cpu", "cuda": "cuda", "opencl": "opencl"}


class GraphModule:
    """The graph runtime's interface over a compiled module (see the module docstring).

    Inputs and params bound here are bound on the underlying module: ``create`` makes a
    view, not a copy, because a module's weights can be large and the original API's
    ``set_input(**params)`` rebinding them is the common case, not a reason to duplicate.
    """

    def __init__(self, module, device: Device):
        self.module = module
        self.device = device

    def set_input(self, key: str | int | None = None, value: Any = None, **params: Any) -> None:
        """Bind an input by name or position, and/or params by keyword (``**params``)."""
        self.module.set_input(key, value, **params)

    def run(self, **inputs: Any) -> list[np.ndarray]:
        """Run once, binding ``inputs`` first. Returns the outputs too (the original
        returned nothing; the outputs are also what ``get_output`` gives)."""
        return self.module.run(**inputs)

    def get_output(self, index: int, out: np.ndarray | None = None) -> np.ndarray:
        """Output ``index`` of the last run; copied into ``out`` when given (the original
        ``get_output(0, tvm.nd.empty(shape))`` form), which is then returned."""
        value = np.asarray(self.module.get_output(index))
        if out is None:
            return value
        if not isinstance(out, np.ndarray) or out.shape != value.shape:
            raise ExecutionError(format_error(
                f"get_output({index}, out)", "out must be a NumPy array of the output's shape",
                value.shape, getattr(out, "shape", type(out).__name__),
                fix=f"Pass np.empty({value.shape}, '{value.dtype}') or leave out out="))
        np.copyto(out, value, casting="same_kind")
        return out

    def get_input(self, key: str | int) -> np.ndarray:
        """The value bound to input or param ``key`` (name or input position)."""
        m = self.module
        name = m.input_names[key] if isinstance(key, int) else key
        if name in m.params:
            return np.asarray(m.params[name])
        feed = getattr(m, "_feed", {})
        if name not in feed:
            raise ExecutionError(format_error(f"get_input('{name}')", "no value is bound",
                                              fix="Call set_input first; inputs: "
                                                  + ", ".join(m.input_names)))
        return np.asarray(feed[name])

    def get_num_outputs(self) -> int:
        return len(self.module.output_names)

    def load_params(self, param_bytes: bytes | bytearray) -> None:
        """Bind params from ``nnvm.compiler.save_param_dict`` bytes (the deploy pattern
        ``module.load_params(bytearray(open("deploy.params", "rb").read()))``)."""
        from ..serialization.param_dict import load_param_dict

        self.module.set_input(**load_param_dict(bytes(param_bytes)))

    def __getitem__(self, name: str):
        """``module["set_input"]``, as the graph runtime's packed functions were fetched."""
        if name in ("set_input", "run", "get_output", "get_input", "get_num_outputs",
                    "load_params"):
            return getattr(self, name)
        raise KeyError(f"graph runtime has no function {name!r}")

    def __repr__(self) -> str:
        return f"<GraphModule {self.module!r} on {self.device!r}>"


def create(graph, lib, ctx: Device | None = None) -> GraphModule:
    """Combine ``(graph, lib)`` from ``nnvm.compiler.build`` into a runnable graph module.

    Args:
        graph: the optimised graph ``build`` returned (a Graph, or its ``graph.json()``).
        lib: the module ``build`` returned (or ``nnvm.runtime.load`` gave).
        ctx: where to run: ``nnvm.cpu(0)`` for ``reference``/``llvm``, ``nnvm.cuda(0)`` for
            ``cuda``, ``nnvm.opencl(0)`` for ``opencl``; None accepts the module's device.

    Raises:
        NNVMError: ``lib`` is not a compiled module, ``graph`` is not the one it was built
            from, or ``ctx`` names a device its target does not run on.
    """
    from .module import Module

    if not isinstance(lib, Module):
        raise NNVMError(format_error(
            "graph_runtime.create", "lib must be the module nnvm.compiler.build returned",
            "an nnvm.runtime.Module", type(lib).__name__,
            fix="graph, lib, params = nnvm.compiler.build(...); then create(graph, lib, ctx)"))
    if graph is not lib.graph:
        text = graph if isinstance(graph, (str, bytes)) else getattr(graph, "json", None)
        text = text() if callable(text) else text
        if isinstance(text, bytes):
            text = text.decode()
        if text is None or text != lib.graph.json():
            raise NNVMError(format_error(
                "graph_runtime.create", "graph is not the graph lib was built from",
                fix="Pass the graph returned by the same nnvm.compiler.build call (build "
                    "optimises the graph, so the input graph is not it)"))
    kind = str(lib.target).split()[0] if lib.target else ""
    want = _TARGET_DEVICE.get(kind)
    if ctx is None:
        ctx = Device(want or "cpu", 0)
    elif not isinstance(ctx, Device):
        raise NNVMError(format_error("graph_runtime.create", "ctx must be a device context",
                                     "nnvm.cpu(0), nnvm.cuda(0) or nnvm.opencl(0)",
                                     type(ctx).__name__))
    elif want is not None and ctx.device_type != want:
        raise NNVMError(format_error(
            "graph_runtime.create", f"target '{lib.target}' does not run on {ctx!r}",
            f"nnvm.{want}(0)", f"nnvm.{ctx!r}",
            fix=f"Pass nnvm.{want}(0), or build for a target that runs on {ctx.device_type}"))
    return GraphModule(lib, ctx)
