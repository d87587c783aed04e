"""The runtime module every backend returns: inputs in, outputs out, stats, export.

Subclasses implement ``_execute(feed) -> outputs`` (and optionally ``_artifact_members``);
input binding, checking, output bookkeeping, thread safety and the memory statistics live
here once.

Thread safety: ``outs = module.run(x=...)`` may be called on one module from many threads at
once and every call returns the outputs of its own inputs. Each call binds its inputs into a
per-call feed under the module's lock. A backend whose ``_execute`` keeps no per-module state
(``_reentrant = True``, the reference interpreter) then runs outside the lock; the others
(one activation arena or one device queue per module) run the whole call under the lock,
because giving every call its own arena would multiply the module's memory by the number of
threads. The graph-runtime sequence ``set_input(); run(); get_output()`` spans several calls
and so cannot be made atomic here: one thread should own that sequence (or use
``run(**inputs)``, whose return value is the call's own outputs).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import numpy as np

from ..dtypes import np_dtype
from ..errors import ExecutionError, format_error
from ..ir import Graph

_STRING_KINDS = "USO"

logger = logging.getLogger("nnvm.runtime")


class Module:
    """A compiled graph ready to run.

    Attributes:
        target: the target string it was built for.
        input_names: the graph inputs that are not params, in graph order.
        output_names: one name per output (NNVM's ``<node>_<output>``).
        allow_cast: opt into converting NumPy inputs of another dtype (default False: a
            float64 or int32 array fed to a float32 input is refused, as onnxruntime does,
            because a silent cast hides a caller's bug and costs a copy every run). Python
            scalars and lists carry no dtype of their own and are always converted when
            the value keeps its kind (e.g. ``[1.0, 2.0]`` to float32).

    Thread safety: ``run(**inputs)`` is safe to call from many threads on one module (see
    the module docstring for how each backend achieves it); ``set_input`` + ``run()`` +
    ``get_output`` is not atomic and should be driven by one thread.
    """

    #: Opt-in to casting NumPy inputs whose dtype differs from the compiled one.
    allow_cast: bool = False
    #: True when ``_execute`` keeps no per-module mutable state and may run concurrently.
    _reentrant: bool = False

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
        self.output_names = output_names_of(graph)
        self.output_shapes = [shapes[e] for e in idx.output_entries]
        self.output_dtypes = [dtypes[e] for e in idx.output_entries]
        self._feed: dict[str, np.ndarray] = {}
        self._outputs: list[np.ndarray] | None = None
        # Reentrant: LLVMModule.run calls Module.run for its slow path while holding it.
        self._lock = threading.RLock()
        self._numpy_reported: set[str] = set()

    # -- the graph-runtime API ---------------------------------------------------------------
    def __iter__(self):
        """``graph, lib, params = nnvm.compiler.build(...)``, the original NNVM form: the
        optimised graph, this module as the compiled library, and a copy of the params it
        runs with (a copy, so saved params do not change with later ``set_input``). See
        ``nnvm.runtime.graph_runtime`` for why unpacking rather than a second build API."""
        return iter((self.graph, self, dict(self.params)))

    def set_input(self, key: str | int | None = None, value: Any = None, **params: Any) -> None:
        """Bind an input by name or position (``params`` may rebind parameters too).

        The binding is module state: with several threads, prefer ``run(**inputs)``."""
        with self._lock:
            if key is not None:
                if isinstance(key, int):
                    if not 0 <= key < len(self.input_names):
                        raise ExecutionError(format_error(
                            "set_input", f"index {key} out of range",
                            f"0..{len(self.input_names) - 1}", key,
                            fix=f"Inputs in order: {', '.join(self.input_names)}"))
                    key = self.input_names[key]
                self._bind(key, value)
            for k, v in params.items():
                self._bind(k, v)

    def _convert(self, name: str, value: Any) -> np.ndarray:
        """``value`` checked against input ``name``'s compiled dtype and shape (no state).

        Dtypes must match exactly for NumPy values unless ``allow_cast`` is set; Python
        scalars and lists are converted when the conversion keeps the value's kind."""
        if name not in self.input_shapes:
            raise ExecutionError(format_error(f"input '{name}'", "is not an input of the module",
                                              fix=f"Inputs: {', '.join(self.input_names)}"))
        native = hasattr(value, "dtype")  # NumPy values and other typed arrays
        arr = np.asarray(value)
        want_shape = self.input_shapes[name]
        want_dtype = self.input_dtypes[name]
        if want_dtype is not None and arr.dtype.name != want_dtype:
            want = np_dtype(want_dtype)  # also "string" (object) and ml_dtypes names
            if want.kind == "O" and arr.dtype.kind in _STRING_KINDS:
                arr = arr.astype(want)  # str arrays to the object arrays string ops use
            elif (not native or self.allow_cast) and (
                    arr.dtype.kind == want.kind or np.can_cast(arr.dtype, want, "same_kind")):
                arr = arr.astype(want)
            elif native:
                raise ExecutionError(format_error(
                    f"input '{name}'", "wrong dtype (inputs are not cast silently)", want_dtype,
                    arr.dtype.name, fix=f"Pass x.astype('{want_dtype}'), or set "
                    f"module.allow_cast = True to convert inputs of another dtype (CLI: --cast)"))
            else:
                raise ExecutionError(format_error(
                    f"input '{name}'", "wrong dtype: the value cannot be converted without "
                    "changing its kind", want_dtype, arr.dtype.name,
                    fix=f"Pass a NumPy array of dtype '{want_dtype}'"))
        if want_shape is not None and not self._shape_fits(name, tuple(arr.shape)):
            raise ExecutionError(format_error(f"input '{name}'", "wrong shape", tuple(want_shape),
                                              tuple(arr.shape), fix="The module was compiled "
                                              "for that shape; rebuild with shape=... to change"
                                              " (a name such as 'N' leaves a dimension free)"))
        return arr

    def _shape_fits(self, name: str, shape: tuple) -> bool:
        """Whether ``shape`` may be fed to input ``name``; a module with a free (symbolic)
        dimension overrides it (``nnvm.runtime.batching``)."""
        return shape == tuple(self.input_shapes[name])

    def _store(self, name: str, arr: np.ndarray) -> None:
        """Keep a checked value as module state (caller holds the lock)."""
        if name in self.params:
            self.params[name] = arr
        else:
            self._feed[name] = arr

    def _bind(self, name: str, value: Any) -> None:
        self._store(name, self._convert(name, value))

    def run(self, **inputs: Any) -> list[np.ndarray]:
        """Run once; inputs given here are bound first. Returns the outputs in order.

        Safe from many threads: the returned list is always this call's own outputs (the
        inputs given here are checked and bound under the module's lock, and the run uses a
        snapshot of them; see the class docstring)."""
        converted = {k: self._convert(k, v) for k, v in inputs.items()}  # no state: unlocked
        with self._lock:
            for k, arr in converted.items():
                self._store(k, arr)
            missing = [n for n in self.input_names if n not in self._feed]
            if missing:
                raise ExecutionError(format_error(
                    "run", f"input(s) {', '.join(missing)} not set",
                    fix="Pass them to run(...) or set_input(...)"))
            feed = {**self.params, **self._feed}
            if not self._reentrant:
                with self._numpy_errors():
                    outputs = self._execute(feed)
                self._outputs = outputs
                return list(outputs)
        with self._numpy_errors():
            outputs = self._execute(feed)
        with self._lock:
            self._outputs = outputs
        return list(outputs)

    def _numpy_errors(self):
        """Floating-point errors of NumPy kernels (overflow, divide by zero, invalid) go to
        ``_numpy_error`` instead of a ``RuntimeWarning`` per occurrence. ``np.errstate`` is
        context-local (NumPy >= 2), so threads running modules do not interfere."""
        return np.errstate(divide="call", over="call", invalid="call", call=self._numpy_error)

    def _numpy_error(self, kind: str, flag: int) -> None:
        """Report a kernel's NumPy error once per module and kind (WARNING on
        ``nnvm.runtime``); repeats go to DEBUG. Why: a model whose softmax overflows on every
        run used to print the same RuntimeWarning on every run."""
        if kind in self._numpy_reported:
            logger.debug("NumPy %s in a kernel on target '%s' (again)", kind, self.target)
            return
        self._numpy_reported.add(kind)
        logger.warning("NumPy reported %s in a kernel of this model on target '%s'; outputs "
                       "may hold inf or nan (reported once per model)", kind, self.target)

    def get_output(self, index: int) -> np.ndarray:
        """Output ``index`` of the latest run (of any thread: see the class docstring)."""
        outputs = self._outputs
        if outputs is None:
            raise ExecutionError("get_output: call run() first")
        if not 0 <= index < len(outputs):
            raise ExecutionError(f"get_output: index {index} out of range; the module has "
                                 f"{len(outputs)} outputs")
        return outputs[index]

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

    def export(self, path: str, sign_key: Any = None) -> None:
        """Write one self-contained ``.nnvm`` file (see ``nnvm.runtime.artifact``);
        ``sign_key`` (a private key file from ``nnvm keygen``) signs it
        (``nnvm.runtime.signing``)."""
        from .artifact import write_artifact

        write_artifact(path, self, sign_key=sign_key)

    def _execute(self, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} target={self.target!r} inputs={self.input_names} "
                f"outputs={self.output_names}>")


def output_names_of(graph: Graph) -> list[str]:
    """The model's own output names when its frontend recorded them (graph attribute
    ``output_names``, e.g. the ONNX graph's outputs), else NNVM's ``<node>_<output>``.
    Why: users look outputs up by the names their model declares (onnxruntime does), and
    the CLI writes ``<name>.npy`` files."""
    own = graph.attrs.get("output_names")
    nnvm_names = graph.symbol.list_output_names()
    if isinstance(own, (list, tuple)) and len(own) == len(nnvm_names) and \
            all(isinstance(n, str) and n for n in own) and len(set(own)) == len(own):
        return list(own)
    return nnvm_names
