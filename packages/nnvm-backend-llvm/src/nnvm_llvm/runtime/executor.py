"""The lean graph executor of the LLVM backend (tvm_ffi only; never imports ``tvm``).

A build produces one shared library (every kernel of the model) and an *executor plan*:
the ordered steps (a kernel function name and the entries it reads and writes, or a NumPy
reference fallback), the storage of every entry, and the weights to repack. At creation the
executor allocates every buffer once (64-byte aligned, shared along the memory plan), wraps
each as a DLPack tensor and precomputes the call list, so ``run`` is one Python loop of
``fn(*tensors)`` calls (about 0.3 us of FFI overhead each) plus copying the inputs in and
the outputs out.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from typing import Any

import numpy as np

from nnvm.errors import ExecutionError, NNVMError, SerializationError, format_error, node_where
from nnvm.runtime.module import Module

from . import buffers, packing

PLAN_FORMAT = "nnvm-llvm-plan"
PLAN_VERSION = 1


def _ffi():
    try:
        import tvm_ffi
    except ImportError as exc:
        raise NNVMError("the llvm runtime needs apache-tvm-ffi: pip install apache-tvm-ffi"
                        ) from exc
    return tvm_ffi


def load_library(so_bytes: bytes):
    """Load a TVM-exported shared library from bytes with ``tvm_ffi.load_module``.

    The bytes go to a private temporary file that is removed once loaded (the mapping
    stays valid on POSIX).
    """
    tvm_ffi = _ffi()
    fd, path = tempfile.mkstemp(suffix=".so", prefix="nnvm-llvm-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(so_bytes)
        return tvm_ffi.load_module(path)
    finally:
        os.unlink(path)


def graph_fingerprint(graph) -> str:
    """Hash of the node order and names: a plan is only valid for the graph it indexes."""
    names = "\n".join(f"{n.op.name if n.op else 'null'}:{n.name}" for n in graph.index.nodes)
    return hashlib.sha256(names.encode()).hexdigest()[:16]


class LLVMModule(Module):
    """Runtime module of the ``llvm`` target.

    Args:
        graph: the optimised graph the plan indexes (also used for reference fallbacks).
        params: weights in model layout.
        target: the target string.
        lib: the loaded library (a ``tvm_ffi.Module``).
        so_bytes: the library file, exported as ``lib.so``.
        plan: the executor plan (see ``nnvm_llvm.compiler.codegen``).
        build_info: compiler statistics for ``stats()`` (empty after loading).
    """

    def __init__(self, graph, params, target: str, lib, so_bytes: bytes, plan: dict,
                 build_info: dict | None = None, num_threads: int | None = None):
        super().__init__(graph, params, target)
        if plan.get("format") != PLAN_FORMAT or plan.get("version") != PLAN_VERSION:
            raise SerializationError(format_error("llvm executor plan", "unsupported format",
                                                  f"{PLAN_FORMAT} v{PLAN_VERSION}",
                                                  f"{plan.get('format')} v{plan.get('version')}",
                                                  fix="Rebuild with this nnvm-backend-llvm"))
        if plan.get("graph") != graph_fingerprint(graph):
            raise SerializationError("llvm executor plan: it was made for a different graph "
                                     "(node order or names differ); rebuild the model")
        self._lib = lib
        self._so_bytes = so_bytes
        self._plan = plan
        self._build_info = dict(build_info or {})
        self.num_threads = self.set_num_threads(
            num_threads if num_threads is not None else int(plan.get("num_threads", 0)))
        self._allocate()
        self._bind_params()
        self._make_calls()

    # -- setup ---------------------------------------------------------------------------------
    def _allocate(self) -> None:
        idx = self.graph.index
        rptr = idx.entry_rptr
        entries = {int(k): v for k, v in self._plan["entries"].items()}
        self._entry_info = entries
        var_entries = {rptr[nid]: idx.nodes[nid].name for nid in idx.input_nodes}
        self._var_entries = var_entries
        sizes, storage = {}, {}
        for eid, info in entries.items():
            if eid in var_entries or info["dtype"] == "string":
                continue
            shape, dtype = tuple(info["shape"]), info["dtype"]
            sizes[eid] = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            storage[eid] = info["storage"]
        sid = [-1] * idx.num_node_entries
        for eid, s in storage.items():
            sid[eid] = s
        self._storage = buffers.StoragePlan(sizes, sid)
        self._arrays: dict[int, np.ndarray] = {}
        for eid, info in entries.items():
            shape, dtype = tuple(info["shape"]), info["dtype"]
            if dtype == "string":  # object arrays of str: only reference kernels touch them
                self._arrays[eid] = np.empty(shape, dtype=object)
            elif eid in var_entries:
                self._arrays[eid] = buffers.view(buffers.aligned_empty(
                    int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize), shape, dtype)
            else:
                self._arrays[eid] = self._storage.entry(eid, shape, dtype)
        self._packed = {key: None for key in self._plan["packed"]}
        self._bound_params: dict[str, Any] = {}

    def _bind_params(self) -> None:
        """Copy params into their aligned buffers and repack the ones kernels read packed."""
        name_to_entry = {n: e for e, n in self._var_entries.items()}
        for name, value in self.params.items():
            if self._bound_params.get(name) is value:
                continue
            baked = self._plan.get("baked", {})
            if name in baked and not np.array_equal(np.asarray(value, np.float64).reshape(-1),
                                                    [baked[name]]):
                raise ExecutionError(format_error(
                    f"llvm module, param '{name}'", "was compiled into the kernels as a "
                    "constant and cannot be rebound", baked[name], np.asarray(value).tolist(),
                    fix="Rebuild the model with the new value"))
            self._bound_params[name] = value
            eid = name_to_entry.get(name)
            if eid is not None and eid in self._arrays:
                np.copyto(self._arrays[eid], value)
            for key, spec in self._plan["packed"].items():
                if spec["param"] == name:
                    arr = packing.pack(spec["layout"], value, spec["block"])
                    if self._packed[key] is None:
                        self._packed[key] = buffers.aligned_copy(arr)
                    else:
                        np.copyto(self._packed[key], arr)

    def _make_calls(self) -> None:
        tvm_ffi = _ffi()
        idx = self.graph.index
        tensors: dict[Any, Any] = {}

        def tensor(ref):
            key = ("p", ref["packed"]) if "packed" in ref else ("e", ref["entry"])
            if key not in tensors:
                arr = self._packed[ref["packed"]] if key[0] == "p" else self._arrays[ref["entry"]]
                tensors[key] = tvm_ffi.from_dlpack(arr)
            return tensors[key]

        calls, names = [], []
        self._fallbacks: list[str] = []
        for step in self._plan["steps"]:
            if step["kind"] == "kernel":
                try:
                    fn = self._lib[step["func"]]
                except Exception as exc:  # noqa: BLE001 - tvm_ffi raises its own errors
                    raise SerializationError(format_error(
                        "llvm library", f"has no function '{step['func']}'",
                        fix="The artifact's lib.so and plan disagree; re-export it")) from exc
                calls.append((fn, tuple(tensor(a) for a in step["args"])))
                names.append(step["func"])
            else:
                node = idx.nodes[step["node"]]
                calls.append(self._reference_call(node, step))
                names.append(f"reference:{node.op.name}")
                self._fallbacks.append(node.op.name)
        self._calls = calls
        self._call_names = names
        self._inputs = [(self._arrays[e], n) for e, n in self._var_entries.items()
                        if n not in self.params and e in self._arrays]
        self._outputs_arr = [self._arrays[e] for e in idx.output_entries]
        self._exact_inputs = {n: (a.dtype, a.shape) for a, n in self._inputs}
        self._params_dirty = False

    def _reference_call(self, node, step):
        kernel = node.op.get_attr("FReferenceNode")
        if kernel is None:
            plain = node.op.get_attr("FReference")
            kernel = (lambda n, *a: plain(n.attrs, *a)) if plain is not None else None
        if kernel is None:
            raise ExecutionError(format_error(node_where(node), "has no compiled kernel and no "
                                              "reference kernel"))
        ins = [self._arrays[e] for e in step["inputs"]]
        outs = [self._arrays[e] for e in step["outputs"]]

        def run_reference(*_):
            res = kernel(node, *ins)
            res = res if isinstance(res, (tuple, list)) else (res,)
            for o, r in zip(outs, res):
                np.copyto(o, np.asarray(r).reshape(o.shape), casting="unsafe")

        return run_reference, ()

    # -- running -------------------------------------------------------------------------------
    def set_num_threads(self, num_threads: int = 0) -> int:
        """Size the kernel thread pool; 0 = TVM_NUM_THREADS, else the CPU count."""
        self.num_threads = int(self._lib["nnvm_runtime_config"](int(num_threads)))
        return self.num_threads

    def _bind(self, name: str, value: Any) -> None:
        super()._bind(name, value)
        if name in self.params:
            self._params_dirty = True

    def run(self, **inputs: Any) -> list[np.ndarray]:
        """Run once (see ``Module.run``). An input passed as a NumPy array of exactly the
        compiled dtype and shape skips conversion (the per-frame path of small models)."""
        exact = self._exact_inputs
        for k, v in inputs.items():
            want = exact.get(k)
            if want is not None and type(v) is np.ndarray and v.dtype == want[0] \
                    and v.shape == want[1]:
                self._feed[k] = v
            else:
                self._bind(k, v)
        if len(self._feed) < len(self._inputs):
            return super().run()  # raises the missing-input error
        self._outputs = self._execute(self._feed)
        return list(self._outputs)

    def _execute(self, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        if self._params_dirty or any(self._bound_params.get(k) is not v
                                     for k, v in self.params.items()):
            self._bind_params()
            self._params_dirty = False
        for arr, name in self._inputs:
            np.copyto(arr, feed[name])
        step = None
        try:
            for step in self._calls:
                step[0](*step[1])
        except NNVMError:
            raise
        except Exception as exc:
            where = self._call_names[self._calls.index(step)] if step is not None else "?"
            raise ExecutionError(format_error(f"llvm kernel '{where}'", f"failed: {exc}")
                                 ) from exc
        return [a.copy() for a in self._outputs_arr]

    def benchmark(self, repeat: int = 100, warmup: int = 5) -> float:
        """Median seconds of one run of the kernels (inputs already bound), no copies."""
        for _ in range(warmup):
            for fn, args in self._calls:
                fn(*args)
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            for fn, args in self._calls:
                fn(*args)
            times.append(time.perf_counter() - t0)
        return float(np.median(times))

    def profile(self, repeat: int = 20, warmup: int = 2) -> list[tuple[str, float]]:
        """Median seconds of every step (kernel function or ``reference:<op>``), in
        execution order: where the time of a run goes (inputs already bound)."""
        for _ in range(warmup):
            for fn, args in self._calls:
                fn(*args)
        times = np.zeros((repeat, len(self._calls)))
        clock = time.perf_counter
        for r in range(repeat):
            for s, (fn, args) in enumerate(self._calls):
                t0 = clock()
                fn(*args)
                times[r, s] = clock() - t0
        med = np.median(times, axis=0)
        return [(n, float(t)) for n, t in zip(self._call_names, med)]

    # -- stats and export ----------------------------------------------------------------------
    def _num_kernels(self) -> int:
        return len(self._calls)

    def stats(self) -> dict[str, Any]:
        """Core stats plus: ``num_fallback_kernels`` / ``fallback_ops`` (steps run by NumPy
        reference kernels because no lowering rule exists), ``num_compiled_kernels``
        (distinct functions in the library), ``executor_bytes`` (bytes the executor actually
        allocated for activations), ``packed_weight_bytes``, ``lib_bytes``, ``num_threads``
        and, after a build, compile time and kernel-cache hits."""
        s = super().stats()
        s.update({
            "num_fallback_kernels": len(self._fallbacks),
            "fallback_ops": sorted(set(self._fallbacks)),
            "num_compiled_kernels": len({n for n in self._call_names
                                         if not n.startswith("reference:")}),
            "executor_bytes": self._storage.nbytes,
            "packed_weight_bytes": int(sum(a.nbytes for a in self._packed.values()
                                           if a is not None)),
            "lib_bytes": len(self._so_bytes),
            "num_threads": self.num_threads,
        })
        s.update(self._build_info)
        return s

    def _artifact_members(self) -> dict[str, bytes]:
        plan = dict(self._plan, num_threads=0)
        return {"lib.so": self._so_bytes,
                "executor.json": json.dumps(plan, sort_keys=True).encode("utf-8")}


def load_artifact(artifact, num_threads: int | None = None) -> LLVMModule:
    """Create a module from a verified artifact (hashes already checked by core)."""
    for member in ("lib.so", "executor.json"):
        if member not in artifact.members:
            raise SerializationError(f"llvm artifact: member '{member}' is missing; re-export "
                                     f"the model with target llvm")
    try:
        plan = json.loads(artifact.members["executor.json"])
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SerializationError(f"llvm artifact: executor.json unreadable ({exc})") from None
    so = artifact.members["lib.so"]
    lib = load_library(so)
    return LLVMModule(artifact.graph(), artifact.params, artifact.manifest["target"], lib, so,
                      plan, num_threads=num_threads)
