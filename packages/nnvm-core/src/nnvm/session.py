"""``nnvm.InferenceSession``: the onnxruntime-style way to run a model.

Why: users arriving from onnxruntime expect ``sess.run(output_names, input_feed)`` with the
model's own names, ``get_inputs()``/``get_outputs()``, and a second session that starts in
well under a second. This composes what exists: the frontend imports, ``compiler.build``
compiles, and compiled artifacts are cached on disk by the model's sha256, the target, the opt
level, the input shapes and frozen inputs, so the next session (or process) loads the cached
``.nnvm`` instead of compiling.

A model whose inputs share one symbolic dimension (a batch ``N``, declared by the model or
named in ``shape=``) is compiled once, for ``batch_bucket`` samples, when its samples are
independent (``nnvm.compiler.batch_axis`` proves it; the proof is cached beside the
artifact), and every batch size runs by splitting the feed into runs of that size
(``nnvm.runtime.batching``): no recompilation for a new batch size. Other symbolic
dimensions (a sequence length beside the batch) are compiled once per value, each build
splitting the batch. A model whose batch cannot be split is compiled on first use for each
shape fed, one cached module per shape signature, and the reason is logged once.

As in onnxruntime, an initializer the model also lists as a graph input is an overridable
default: ``get_inputs()`` leaves it out, ``get_overridable_initializers()`` lists it, and
``run()`` uses a fed value for that call only. Outputs that are not tensors (ZipMap's dicts,
sequences) come back in onnxruntime's form (``nnvm.runtime.structured_outputs``), also from
a cached or exported ``.nnvm``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from . import cache_dirs
from .errors import ExecutionError, NNVMError, format_error
from .runtime.structured_outputs import NAMES_ATTR, persistable, regroup, structure_of

logger = logging.getLogger("nnvm.session")

_ONNX_TYPES = {"float32": "float", "float64": "double", "int64": "int64", "int32": "int32",
               "int8": "int8", "uint8": "uint8", "bool": "bool", "float16": "float16",
               "int16": "int16", "uint16": "uint16", "string": "string"}


@dataclass(frozen=True)
class NodeArg:
    """An input or output as onnxruntime describes it: name, shape (None or a name for a
    symbolic dimension), element type (``tensor(float)``) and the NNVM dtype."""

    name: str
    shape: tuple
    type: str
    dtype: str


def _cache_root(cache_dir: str | None) -> str | None:
    """The sessions' artifact folder: ``<cache_dir>/sessions`` when the caller named one, else
    the shared rule's (``nnvm.cache_dirs``): None, no disk cache, under ``NNVM_CACHE_DIR=off``."""
    if cache_dir:
        return os.path.join(cache_dir, "sessions")
    return cache_dirs.package_dir("sessions")


class InferenceSession:
    """Run an ONNX model (path or bytes) or a ``.nnvm`` artifact (path or bytes).

    Args:
        model: ``.onnx`` / ``.nnvm`` path, or the file's bytes.
        target: ``reference``, ``llvm``, ``opencl``...; None picks the best available.
        shape: ``{input: shape}`` to fix symbolic dimensions (ints) or to name a free batch
            (``("N", 3, 224, 224)``); dimensions left symbolic run any size (see above).
        freeze: ``{input: value}`` bound as constants at import (e.g. a sample rate).
        opt_level: optimisation level (default 3).
        cache_dir: where compiled artifacts go (default ``$NNVM_CACHE_DIR/sessions`` or
            ``~/.cache/nnvm/sessions``); ``False``, or ``NNVM_CACHE_DIR=off`` with no folder
            named here, disables the disk cache (the session compiles in memory).
        batch_bucket: the batch a symbolic-batch model is compiled for (default 1: no
            padding ever; larger values trade padding of the last run for fewer, wider runs).
    """

    def __init__(self, model: Any, target: str | None = None, *,
                 shape: Mapping | None = None, freeze: Mapping | None = None,
                 opt_level: int = 3, cache_dir: str | bool | None = None,
                 batch_bucket: int = 1):
        self._lock = threading.Lock()
        self._modules: dict[tuple, Any] = {}
        self._by_value: dict[tuple, Any] = {}
        self._defaults: dict[str, np.ndarray] = {}  # overridable initializers, as compiled
        data, path = self._read(model)
        self._artifact = data[:2] == b"PK"
        if self._artifact:
            self._fixed = self._load_artifact_bytes(data)
            self.target = self._fixed.target
            self._inputs, self._outputs, self._overridable = self._args_of(self._fixed)
            self._keep_defaults(self._fixed)
            return
        from .backend import best_target, parse_target

        self.target = str(parse_target(target)) if target is not None else best_target()
        self._onnx = data
        self._shape = {k: tuple(d if isinstance(d, str) else int(d) for d in v)
                       for k, v in (shape or {}).items()}
        self._bucket = int(batch_bucket)
        self._freeze = {k: np.asarray(v) for k, v in (freeze or {}).items()}
        self._opt_level = opt_level
        self._cache = None if cache_dir is False else _cache_root(
            cache_dir if isinstance(cache_dir, str) else None)
        self._inputs, self._outputs, self._overridable = self._declared(data)
        self._fixed = None
        if all(all(isinstance(d, int) for d in a.shape) for a in self._inputs):
            self._fixed = self._module({a.name: a.shape for a in self._inputs})
        else:
            self._fixed = self._any_batch()

    # -- onnxruntime's API ----------------------------------------------------------------------
    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    def get_overridable_initializers(self) -> list[NodeArg]:
        """Initializers the model also lists as inputs: ``run`` uses their stored value
        unless ``input_feed`` names them."""
        return list(self._overridable)

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
            run_options: Any = None) -> list[np.ndarray]:
        """The outputs named in ``output_names`` (all, in the model's order, when None), in that
        order, for ``input_feed`` (``{input name: array}``, optionally with overridable
        initializers, used for this call only)."""
        names = [a.name for a in self._inputs]
        unknown = sorted(set(input_feed) - set(names) - {a.name for a in self._overridable})
        missing = [n for n in names if n not in input_feed]
        if unknown or missing:
            raise ExecutionError(format_error(
                "InferenceSession.run", "input_feed does not match the model's inputs",
                names, sorted(input_feed),
                fix=f"Feed exactly {names}" + (f"; unknown: {unknown}" if unknown else "")))
        feed = {n: as_host_array(v, f"InferenceSession.run: input '{n}'")
                for n, v in input_feed.items()}
        module = self._fixed or self._for_feed({n: feed[n].shape for n in names})
        # every call passes each default it does not override: the module keeps a fed
        # param as its new value, and onnxruntime's next call uses the stored one again
        flat = module.run(**{**self._defaults, **feed})
        structure = structure_of(module.graph)
        known = list(module.output_names)
        if structure is not None:
            known = list(module.graph.attrs.get(NAMES_ATTR) or [a.name for a in self._outputs])
            flat = regroup(structure, flat)
        outs = dict(zip(known, flat))
        wanted = list(output_names) if output_names else known
        self._check_output_names(wanted, known, "InferenceSession.run")
        return [outs[n] for n in wanted]

    def _keep_defaults(self, module) -> None:
        """Remember the overridable initializers' values of a new module, before any run
        can rebind them (every module of a session holds the same ones)."""
        for arg in self._overridable:
            if arg.name not in self._defaults and arg.name in module.params:
                self._defaults[arg.name] = module.params[arg.name]

    @staticmethod
    def _check_output_names(wanted, known, where: str) -> None:
        bad = [n for n in wanted if n not in known]
        if bad:
            raise ExecutionError(format_error(where, f"unknown output name(s) {bad}",
                                              fix=f"Outputs: {list(known)}"))

    # -- IOBinding ------------------------------------------------------------------------------
    def io_binding(self) -> "IOBinding":
        """An onnxruntime-style binding: inputs bound once by reference, outputs written into
        buffers you own (``bind_output(name, buffer)``) or allocated once and reused."""
        return IOBinding(self)

    def run_with_iobinding(self, binding: "IOBinding", run_options: Any = None) -> None:
        """Run with ``binding``'s inputs; write every bound output into its buffer."""
        if binding._session is not self:
            raise ExecutionError(format_error(
                "InferenceSession.run_with_iobinding", "the binding belongs to another session",
                fix="Make it with this session's io_binding()"))
        wanted = list(binding._outputs) or [a.name for a in self._outputs]
        results = self.run(wanted, binding._inputs)
        for name, value in zip(wanted, results):
            if not isinstance(value, np.ndarray):
                raise ExecutionError(format_error(
                    f"IOBinding output '{name}'", "is not a tensor", "a tensor output",
                    type(value).__name__, fix="Get ZipMap / sequence outputs from run(); "
                                              "bind only the tensor outputs"))
            buf = binding._outputs.get(name)
            if buf is None or buf.shape != value.shape or buf.dtype != value.dtype:
                if name in binding._given:
                    raise ExecutionError(format_error(
                        f"IOBinding output '{name}'", "the bound buffer does not fit",
                        f"{value.shape} {value.dtype}",
                        None if buf is None else f"{buf.shape} {buf.dtype}",
                        fix="Bind a C-contiguous array of that shape and dtype, or bind "
                            "the output without a buffer"))
                buf = binding._outputs[name] = np.empty_like(value)
            np.copyto(buf, value, casting="no")

    # -- building and caching -------------------------------------------------------------------
    @property
    def builds(self) -> int:
        """How many modules this session has compiled or loaded (one per shape signature):
        a symbolic-batch model that splits its batch stays at one whatever the batch fed."""
        return len(self._modules)

    def _any_batch(self, shape: dict | None = None):
        """The batch-splitting module for the symbolic inputs, or None: compile per shape,
        or, when there are other symbolic dimensions too (``(batch, sequence)``), one
        batch-splitting module per value of those (``_for_feed``)."""
        from .compiler.batch_axis import BatchPlan
        from .compiler.symbolic_batch import concrete, plan_batch, split_names
        from .runtime.batching import BatchedModule

        if shape is None:
            shape = self._symbolic = {
                a.name: tuple(d if isinstance(d, int) else (d or f"?{a.name}.{k}")
                              for k, d in enumerate(a.shape)) for a in self._inputs}
            self._others = split_names(shape)[1]
            if self._others:
                return None
        name, plan = self._cached_plan(shape)
        if plan is None:
            name, plan = plan_batch(self._import, shape)
            self._store_plan(shape, name, plan)
        if not isinstance(plan, BatchPlan):
            logger.warning("InferenceSession: compiling once per input shape: %s", plan)
            return None
        module = self._module(concrete(shape, self._bucket))
        return BatchedModule(module, plan, self._bucket, name)

    def _for_feed(self, shapes: dict):
        """The module for a feed when no one module runs every shape: per value of the
        non-batch symbolic dimensions a batch-splitting module, else one per shape."""
        from .compiler.symbolic_batch import resolve, values_of

        if not getattr(self, "_others", None):
            return self._module(shapes)
        values = values_of(self._symbolic, shapes, self._others)
        key = tuple(sorted(values.items()))
        if key not in self._by_value:  # (two threads may both build it: the same module)
            self._by_value[key] = self._any_batch(resolve(self._symbolic, values)) or False
        return self._by_value[key] or self._module(shapes)

    def _plan_path(self, shape: dict) -> str | None:
        if self._cache is None:
            return None
        return os.path.join(self._cache, self._cache_key({"batch_plan": shape}) + ".plan.json")

    def _cached_plan(self, shape: dict):
        from .compiler.batch_axis import BatchPlan

        path = self._plan_path(shape)
        try:
            with open(path or "", encoding="utf-8") as f:
                data = json.load(f)
            if "reason" in data:
                return data["name"], str(data["reason"])
            return data["name"], BatchPlan({k: int(v) for k, v in data["inputs"].items()},
                                           tuple(data["outputs"]))
        except (OSError, ValueError, KeyError, TypeError):
            return "", None

    def _store_plan(self, shape: dict, name: str, plan) -> None:
        from .compiler.batch_axis import BatchPlan

        path = self._plan_path(shape)
        if path is None:
            return
        data = {"name": name, "inputs": plan.inputs, "outputs": list(plan.outputs)} \
            if isinstance(plan, BatchPlan) else {"name": name, "reason": plan}

        def write(tmp: str) -> None:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(data, f)
        self._write_atomic(path, write)

    def _write_atomic(self, path: str, write) -> None:
        """``write(tmp)`` then rename onto ``path``; a read-only cache only costs the next
        session the work again."""
        try:
            os.makedirs(self._cache, mode=0o700, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self._cache, suffix=".tmp")
            os.close(fd)
            write(tmp)
            os.replace(tmp, path)
        except OSError:
            pass

    def _module(self, shapes: Mapping[str, tuple]):
        key = tuple(sorted((k, tuple(int(d) for d in v)) for k, v in shapes.items()))
        with self._lock:
            if key not in self._modules:
                self._modules[key] = self._build_or_load(dict(key))
                self._keep_defaults(self._modules[key])
            return self._modules[key]

    def _cache_key(self, shapes: dict) -> str:
        from . import __version__

        h = hashlib.sha256(self._onnx)
        h.update(json.dumps({"target": self.target, "opt": self._opt_level, "nnvm": __version__,
                             "shapes": {k: v if isinstance(v, dict) else list(v)
                                        for k, v in sorted(shapes.items())},
                             "freeze": {k: [str(v.dtype), v.tolist()]
                                        for k, v in sorted(self._freeze.items())}},
                            sort_keys=True).encode())
        return h.hexdigest()

    def _build_or_load(self, shapes: dict):
        from .compiler import build
        from .runtime import load

        path = None
        if self._cache is not None:
            path = os.path.join(self._cache, self._cache_key(shapes) + ".nnvm")
            if os.path.exists(path):
                try:
                    return load(path)
                except NNVMError:  # stale or damaged entry: rebuild it below
                    pass
        shapes = {k: v for k, v in shapes.items() if k not in self._freeze}
        graph, params = self._import(shapes)
        module = build(persistable(graph), target=self.target, shape=shapes, params=params,
                       opt_level=self._opt_level)
        if path is not None:
            self._write_atomic(path, module.export)
        return module

    def _import(self, shapes: dict):
        from . import frontend, progress

        kw = {"freeze": self._freeze} if self._freeze else {}
        with progress.step(f"importing the ONNX model for {shapes}"):
            return frontend.from_onnx(self._onnx, shape=shapes, **kw)

    # -- model inspection -----------------------------------------------------------------------
    @staticmethod
    def _read(model) -> tuple[bytes, str | None]:
        if isinstance(model, (bytes, bytearray, memoryview)):
            return bytes(model), None
        path = os.fspath(model)
        try:
            with open(path, "rb") as f:
                return f.read(), path
        except OSError as exc:
            raise NNVMError(format_error(f"InferenceSession({path!r})", "cannot read the model",
                                         got=exc.strerror or str(exc),
                                         fix="Pass the path of a .onnx or .nnvm file, or its "
                                             "bytes")) from None

    @staticmethod
    def _load_artifact_bytes(data: bytes):
        from .runtime import load

        fd, tmp = tempfile.mkstemp(suffix=".nnvm")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            return load(tmp)
        finally:
            os.unlink(tmp)

    def _declared(self, data: bytes) -> tuple[list[NodeArg], list[NodeArg], list[NodeArg]]:
        """Inputs, outputs and overridable initializers as the ONNX graph declares them
        (frozen inputs left out; ``shape=`` fills symbolic dimensions)."""
        try:
            import onnx
        except ImportError:
            raise NNVMError("InferenceSession: an ONNX model needs the ONNX frontend: "
                            "pip install nnvm-frontend-onnx") from None
        try:
            graph = onnx.load_from_string(data).graph
        except Exception as exc:  # noqa: BLE001 - protobuf raises its own types
            raise NNVMError(format_error("InferenceSession", "the model is neither an ONNX "
                                         "model nor a .nnvm artifact",
                                         got=type(exc).__name__)) from None
        inits = {t.name for t in graph.initializer}

        def arg(v, given=None):
            if v.type.WhichOneof("value") != "tensor_type":  # ZipMap's dicts, sequences
                return NodeArg(v.name, (), _onnx_type(v.type, onnx), "object")
            tt = v.type.tensor_type
            dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                         for d in tt.shape.dim) if tt.HasField("shape") else ()
            dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type).name \
                if tt.elem_type else "float32"
            dtype = "string" if dtype == "object" else dtype
            return NodeArg(v.name, tuple(given) if given is not None else dims,
                           f"tensor({_ONNX_TYPES.get(dtype, dtype)})", dtype)
        ins = [arg(v, self._shape.get(v.name)) for v in graph.input
               if v.name not in inits and v.name not in self._freeze]
        overridable = [arg(v) for v in graph.input
                       if v.name in inits and v.name not in self._freeze]
        return ins, [arg(v) for v in graph.output], overridable

    @staticmethod
    def _args_of(module) -> tuple[list[NodeArg], list[NodeArg], list[NodeArg]]:
        def make(name, shape, dtype):
            dtype = dtype or "float32"
            return NodeArg(name, tuple(shape or ()), f"tensor({_ONNX_TYPES.get(dtype, dtype)})",
                           dtype)
        ins = [make(n, module.input_shapes.get(n), module.input_dtypes.get(n))
               for n in module.input_names]
        outs = [make(n, s, d) for n, s, d in zip(module.output_names, module.output_shapes,
                                                 module.output_dtypes)]
        structure = structure_of(module.graph)
        if structure is not None:  # the model's outputs, not their flattened tensors
            flat = {a.name: a for a in outs}
            outs = [flat[n] if st == "tensor" else
                    NodeArg(n, (), _structured_type(st, flat.get(f"{n}.0")), "object")
                    for n, st in zip(module.graph.attrs.get(NAMES_ATTR) or (), structure)]
        overridable = [make(n, np.shape(v), np.asarray(v).dtype.name) for n, v in (
            (n, module.params.get(n)) for n in module.graph.attrs.get("input_defaults") or ())
            if v is not None]
        return ins, outs, overridable


def _onnx_type(tp, onnx) -> str:
    """onnxruntime's spelling of an ONNX type: ``seq(map(int64,tensor(float)))``."""
    kind = tp.WhichOneof("value")
    if kind == "sequence_type":
        return f"seq({_onnx_type(tp.sequence_type.elem_type, onnx)})"
    if kind == "optional_type":
        return f"optional({_onnx_type(tp.optional_type.elem_type, onnx)})"
    if kind == "map_type":
        key = onnx.helper.tensor_dtype_to_np_dtype(tp.map_type.key_type).name
        key = "string" if key == "object" else key
        return f"map({key},{_onnx_type(tp.map_type.value_type, onnx)})"
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tp.tensor_type.elem_type).name \
        if tp.tensor_type.elem_type else "float32"
    dtype = "string" if dtype == "object" else dtype
    return f"tensor({_ONNX_TYPES.get(dtype, dtype)})"


def _structured_type(structure, first: NodeArg | None) -> str:
    """The onnxruntime type of a flattened output, from its structure record (a loaded
    ``.nnvm`` has no ONNX type protos): ZipMap maps, or a sequence of its first item's."""
    if structure[0] == "zipmap":
        key = "string" if any(isinstance(k, str) for k in structure[1]) else "int64"
        return f"seq(map({key},tensor(float)))"
    return f"seq({first.type if first is not None else 'tensor(float)'})"


def as_host_array(value: Any, where: str) -> np.ndarray:
    """``value`` as a NumPy array, without a copy where the producer allows it.

    NumPy arrays pass through; any object with ``__dlpack__`` on the CPU (PyTorch, JAX,
    CuPy-on-host, another NumPy) is wrapped with ``np.from_dlpack``, sharing its memory;
    everything else goes through ``np.asarray``. A device tensor (GPU) is refused with the
    fix, rather than copied behind the caller's back.
    """
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "__dlpack__"):
        try:
            return np.from_dlpack(value)
        except (TypeError, RuntimeError, BufferError, ValueError) as exc:
            raise ExecutionError(format_error(
                where, "cannot be read through DLPack", "a CPU tensor", str(exc)[:160],
                fix="Copy it to host memory first (e.g. tensor.cpu() in PyTorch)")) from None
    return np.asarray(value)


class IOBinding:
    """Inputs and output buffers bound to one ``InferenceSession`` (onnxruntime's
    ``IOBinding``): bind once, ``session.run_with_iobinding(binding)`` many times.

    Inputs are kept by reference (NumPy arrays or DLPack CPU tensors, shared, not copied), so
    refilling an input array in place and running again needs no new binding. Outputs bound
    with a buffer are written into it (one copy from the module's result; the buffer itself
    is reused, not reallocated); outputs bound without one get a buffer on the first run,
    reused afterwards. Not yet zero-copy: the module still returns fresh result arrays that
    are copied into the buffers. The outputs are NumPy
    arrays, which are DLPack producers themselves (``torch.from_dlpack(out)`` shares them).
    """

    def __init__(self, session: InferenceSession):
        self._session = session
        self._inputs: dict[str, np.ndarray] = {}
        self._outputs: dict[str, np.ndarray | None] = {}
        self._given: set[str] = set()

    def bind_input(self, name: str, value: Any) -> None:
        names = [a.name for a in self._session.get_inputs()
                 + self._session.get_overridable_initializers()]
        if name not in names:
            raise ExecutionError(format_error(f"IOBinding.bind_input('{name}')",
                                              "no such input", names, name))
        self._inputs[name] = as_host_array(value, f"IOBinding input '{name}'")

    bind_cpu_input = bind_input

    def bind_output(self, name: str, buffer: Any = None) -> None:
        names = [a.name for a in self._session.get_outputs()]
        if name not in names:
            raise ExecutionError(format_error(f"IOBinding.bind_output('{name}')",
                                              "no such output", names, name))
        if buffer is None:
            self._outputs[name] = None
            self._given.discard(name)
            return
        arr = as_host_array(buffer, f"IOBinding output '{name}'")
        if not arr.flags.c_contiguous or not arr.flags.writeable:
            raise ExecutionError(format_error(
                f"IOBinding output '{name}'", "the buffer must be writable and C-contiguous",
                fix="Pass np.empty(shape, dtype) or a contiguous tensor"))
        self._outputs[name] = arr
        self._given.add(name)

    def get_outputs(self) -> list[np.ndarray]:
        """The bound output buffers, in binding order (after a run)."""
        missing = [n for n, b in self._outputs.items() if b is None]
        if missing:
            raise ExecutionError(format_error("IOBinding.get_outputs", f"outputs {missing} "
                                              "have no buffer yet",
                                              fix="Call session.run_with_iobinding first"))
        return list(self._outputs.values())

    def copy_outputs_to_cpu(self) -> list[np.ndarray]:
        return [b.copy() for b in self.get_outputs()]

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()
        self._given.clear()
