"""The runtime module every backend returns: inputs in, outputs out, stats, export.

Subclasses implement ``_execute(feed) -> outputs`` (and optionally ``_artifact_members``);
input binding, checking, output bookkeeping and the memory statistics live here once.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import np_dtype
from ..errors import ExecutionError, format_error
from ..ir import Graph


class Module:
    """A compiled graph ready to run.

    Attributes:
        target: the target string it was built for.
        input_names: the graph inputs that are not params, in graph order.
        output_names: one name per output (NNVM's ``<node>_<output>``).
    """

    def __init__(self, graph: Graph, params: dict[str, np.ndarray], target: str):
        self.graph = graph
        self.params = dict(params)
        self.target = target
        idx = graph.index
        rptr = idx.entry_rptr
        shapes = graph.attrs.get("shape") or [None] * idx.num_node_entries
        dtypes = graph.attrs.get("dtype") or [None] * idx.num_node_entries
        self.input_names = [n for n in idx.input_names if n not in self.params]
        self.input_shapes = {idx.nodes[i].name: shapes[rptr[i]] for i in idx.input_nodes}
        self.input_dtypes = {idx.nodes[i].name: dtypes[rptr[i]] for i in idx.input_nodes}
        self.output_names = graph.symbol.list_output_names()
        self.output_shapes = [shapes[e] for e in idx.output_entries]
        self.output_dtypes = [dtypes[e] for e in idx.output_entries]
        self._feed: dict[str, np.ndarray] = {}
        self._outputs: list[np.ndarray] | None = None

    # -- the graph-runtime API ---------------------------------------------------------------
    def set_input(self, key: str | int | None = None, value: Any = None, **params: Any) -> None:
        """Bind an input by name or position (``params`` may rebind parameters too)."""
        if key is not None:
            if isinstance(key, int):
                if not 0 <= key < len(self.input_names):
                    raise ExecutionError(f"set_input: index {key} out of range; the module has "
                                         f"{len(self.input_names)} inputs {self.input_names}")
                key = self.input_names[key]
            self._bind(key, value)
        for k, v in params.items():
            self._bind(k, v)

    def _bind(self, name: str, value: Any) -> None:
        if name not in self.input_shapes:
            raise ExecutionError(format_error(f"input '{name}'", "is not an input of the module",
                                              fix=f"Inputs: {', '.join(self.input_names)}"))
        arr = np.asarray(value)
        want_shape = self.input_shapes[name]
        want_dtype = self.input_dtypes[name]
        if want_dtype is not None and arr.dtype.name != want_dtype:
            want = np_dtype(want_dtype)  # also "string" (object) and ml_dtypes names
            if arr.dtype.kind == want.kind or np.can_cast(arr.dtype, want, "same_kind"):
                arr = arr.astype(want)
            else:
                raise ExecutionError(format_error(f"input '{name}'", "wrong dtype", want_dtype,
                                                  arr.dtype.name, fix=f"Pass x.astype("
                                                  f"'{want_dtype}')"))
        if want_shape is not None and tuple(arr.shape) != tuple(want_shape):
            raise ExecutionError(format_error(f"input '{name}'", "wrong shape", tuple(want_shape),
                                              tuple(arr.shape), fix="The module was compiled "
                                              "for that shape; rebuild with shape=... to change"))
        if name in self.params:
            self.params[name] = arr
        else:
            self._feed[name] = arr

    def run(self, **inputs: Any) -> list[np.ndarray]:
        """Run once; inputs given here are bound first. Returns the outputs in order."""
        for k, v in inputs.items():
            self._bind(k, v)
        missing = [n for n in self.input_names if n not in self._feed]
        if missing:
            raise ExecutionError(format_error("run", f"input(s) {', '.join(missing)} not set",
                                              fix="Pass them to run(...) or set_input(...)"))
        self._outputs = self._execute({**self.params, **self._feed})
        return list(self._outputs)

    def get_output(self, index: int) -> np.ndarray:
        if self._outputs is None:
            raise ExecutionError("get_output: call run() first")
        if not 0 <= index < len(self._outputs):
            raise ExecutionError(f"get_output: index {index} out of range; the module has "
                                 f"{len(self._outputs)} outputs")
        return self._outputs[index]

    def get_num_outputs(self) -> int:
        return len(self.output_names)

    # -- stats and export ---------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Memory and size statistics.

        Keys: ``activation_bytes`` (bytes of the planned activation storage, or the unshared
        total when no memory plan ran), ``activation_bytes_naive`` (bytes of every entry an op
        produces, unshared), ``param_bytes``, ``num_kernels``, ``num_nodes`` (op nodes),
        ``memory_planned`` (whether a PlanMemory result was used).
        """
        from .memory import activation_bytes

        planned, naive = activation_bytes(self.graph)
        idx = self.graph.index
        return {
            "activation_bytes": planned if planned is not None else naive,
            "activation_bytes_naive": naive,
            "memory_planned": planned is not None,
            "param_bytes": int(sum(np.asarray(v).nbytes for v in self.params.values())),
            "num_kernels": self._num_kernels(),
            "num_nodes": sum(1 for n in idx.nodes if n.op is not None),
            "target": self.target,
        }

    def _num_kernels(self) -> int:
        return sum(1 for n in self.graph.index.nodes if n.op is not None)

    def _artifact_members(self) -> dict[str, bytes]:
        """Backend-specific members of the exported file (e.g. ``lib.so``)."""
        return {}

    def export(self, path: str) -> None:
        """Write one self-contained ``.nnvm`` file (see ``nnvm.runtime.artifact``)."""
        from .artifact import write_artifact

        write_artifact(path, self)

    def _execute(self, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} target={self.target!r} inputs={self.input_names} "
                f"outputs={self.output_names}>")
