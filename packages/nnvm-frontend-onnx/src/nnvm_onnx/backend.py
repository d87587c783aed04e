"""``onnx.backend`` adapter: run ONNX models (and the ONNX backend test suite) on NNVM.

``Backend.prepare(model)`` checks the model and reports every unsupported op up front;
``rep.run(inputs)`` imports it specialised to the concrete input
shapes, compiles for the target and caches the module per input signature. Inputs that the
importer needs as constants (a Reshape target fed as a graph input...) are frozen to their
values for that compilation, so the cache key then includes those values.

The target comes from ``target=`` or ``NNVM_TARGET``; default: the best available backend.
``prepare(model, shape={...}, dtype=...)`` compiles for those input shapes at once (as an
onnxruntime session does when it is created), so the first ``run`` with them does not pay the
build; other keyword arguments are build options (``opt_level``, ``num_threads``...).

A model whose inputs share one symbolic dimension (the batch; or ``shape={"x": ("N", 3, 224,
224)}`` at prepare) is compiled once, for ``batch_bucket`` samples (default 1), when its
samples are independent, and every batch size then runs without recompiling (see
``nnvm.compiler.symbolic_batch``); otherwise it falls back to one build per input signature.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Sequence

import numpy as np
from onnx.backend.base import Backend as _OnnxBackend
from onnx.backend.base import BackendRep

from nnvm.compiler.batch_axis import BatchPlan
from nnvm.compiler.symbolic_batch import concrete, is_symbolic, plan_batch, resolve, \
    split_names, values_of
from nnvm.errors import NNVMError, format_error
from nnvm.runtime.batching import BatchedModule
from nnvm.runtime.structured_outputs import regroup, structure_of

from .errors import NeedsConstantError

logger = logging.getLogger("nnvm.onnx")


def _default_target() -> str | None:
    return os.environ.get("NNVM_TARGET") or None


#: Keywords ``nnvm.compiler.build`` receives from the rep itself: passing one through
#: ``**options`` would give it twice (the TypeError of issue 17).
_BUILD_OWN = ("graph", "target", "shape", "dtype", "params", "opt_level", "log")


class NNVMBackendRep(BackendRep):
    """A prepared model: compiles lazily per input signature and runs on the target.

    ``shape``/``dtype`` name the input signature to compile for now (see the module
    docstring); ``options`` go to ``nnvm.compiler.build`` unchanged.
    """

    def __init__(self, model, target: str | None, opt_level: int = 2,
                 shape: dict | None = None, dtype: Any = None, **options: Any):
        clash = sorted(k for k in options if k in _BUILD_OWN)
        if clash:
            raise NNVMError(format_error(
                "onnx backend prepare", f"option(s) {', '.join(clash)} cannot be passed "
                "through to nnvm.compiler.build", fix="The backend derives them from the "
                "model and the run's inputs; give input shapes with shape={name: dims}, the "
                "target with target=..."))
        self.model = model
        self.target = target
        self.opt_level = opt_level
        self.bucket = int(options.pop("batch_bucket", 1))
        self.options = options
        inits = {t.name for t in model.graph.initializer}
        self.input_names = [i.name for i in model.graph.input if i.name not in inits]
        self._cache: dict[Any, tuple] = {}
        self._frozen: set[str] = set()
        #: batch-splitting modules per value of the other symbolic dims (False: not applicable)
        self._any_batch: dict[tuple, Any] = {}
        self.builds = 0
        if shape and is_symbolic(shape):
            self._batched(dict(shape), self._declared_dtypes(dtype))
        elif shape:
            self._compile(self._example_feed(shape, dtype))

    def _example_feed(self, shape: dict, dtype: Any) -> dict:
        """Zero arrays of the given shapes and the model's declared (or given) dtypes: the
        signature to compile for at prepare time. Every model input needs a shape."""
        from onnx import helper

        unknown = [k for k in shape if k not in self.input_names]
        missing = [k for k in self.input_names if k not in shape]
        if unknown or missing:
            raise NNVMError(format_error(
                "onnx backend prepare(shape=...)",
                f"names {', '.join(unknown)}, not "
                f"{'a model input' if len(unknown) == 1 else 'model inputs'}" if unknown else
                f"gives no shape for input(s) {', '.join(missing)}",
                fix=f"Give a shape for every model input: {', '.join(self.input_names)}"))
        declared = {i.name: i.type.tensor_type.elem_type for i in self.model.graph.input}
        feed = {}
        for name, dims in shape.items():
            want = dtype.get(name) if isinstance(dtype, dict) else dtype
            if want is None:
                if not declared.get(name):
                    raise NNVMError(format_error(
                        f"onnx backend prepare: input '{name}'", "declares no tensor type",
                        fix=f"Give it with dtype={{'{name}': 'float32'}}"))
                want = helper.tensor_dtype_to_np_dtype(declared[name])
            try:
                feed[name] = np.zeros(tuple(int(d) for d in dims), dtype=want)
            except (TypeError, ValueError) as exc:
                raise NNVMError(format_error(
                    f"onnx backend prepare: input '{name}'", "bad shape or dtype",
                    "a tuple of ints and a NumPy dtype", f"{dims!r}, {want!r}",
                    fix=str(exc))) from None
        return feed

    def _declared_dtypes(self, dtype: Any = None) -> dict:
        from onnx import helper

        out = {}
        for i in self.model.graph.input:
            if i.name in self.input_names:
                want = dtype.get(i.name) if isinstance(dtype, dict) else dtype
                elem = i.type.tensor_type.elem_type
                if want is None and elem:
                    want = helper.tensor_dtype_to_np_dtype(elem)
                if want is not None:
                    out[i.name] = np.dtype(want).name
        return out

    def _declared_shapes(self) -> dict | None:
        """The inputs' declared dims, symbolic ones as names (an unnamed one gets its own)."""
        shapes = {}
        for i in self.model.graph.input:
            if i.name not in self.input_names:
                continue
            tt = i.type.tensor_type
            if not i.type.HasField("tensor_type") or not tt.HasField("shape"):
                return None
            shapes[i.name] = tuple(d.dim_value if d.HasField("dim_value") else
                                   (d.dim_param or f"?{i.name}.{k}")
                                   for k, d in enumerate(tt.shape.dim))
        return shapes

    def _batched(self, shape: dict | None, dtypes: dict, fed: dict | None = None):
        """The module that runs every batch size of a model with a symbolic batch, built
        once (once per value of other symbolic dims, a sequence length, taken from ``fed``
        shapes); None when the model has none or its samples are not independent."""
        if not shape or not is_symbolic(shape):
            return None
        others = split_names(shape)[1]
        key: tuple = ()
        if others:
            if fed is None:
                return None
            values = values_of(shape, fed, others)
            shape, key = resolve(shape, values), tuple(sorted(values.items()))
        if key not in self._any_batch:
            self._any_batch[key] = False  # tried: a failure is not retried every run
            try:
                self._any_batch[key] = self._build_batched(shape, dtypes)
            except (NNVMError, NeedsConstantError) as exc:
                logger.warning("onnx backend: one build per input shape: %s",
                               str(exc).splitlines()[0])
        return self._any_batch[key] or None

    def _build_batched(self, shape: dict, dtypes: dict):
        import nnvm

        from .importer import import_model

        def import_at(shapes):
            return import_model(self.model, shape=shapes, dtype=dtypes, check=False,
                                static_shapes=True)
        name, plan = plan_batch(import_at, shape, dtypes)
        if not isinstance(plan, BatchPlan):
            logger.warning("onnx backend: one build per input shape: %s", plan)
            return False
        shapes = concrete(shape, self.bucket)
        graph, params = import_at(shapes)
        if structure_of(graph):
            raise NNVMError("onnx backend: sequence outputs are not split along a batch")
        self.builds += 1
        module = nnvm.compiler.build(graph, target=self.target, shape=shapes, dtype=dtypes,
                                     params=params, opt_level=self.opt_level, **self.options)
        return BatchedModule(module, plan, self.bucket, name)

    def run(self, inputs: Any, **kwargs: Any) -> tuple:
        if isinstance(inputs, dict):
            feed = {k: _feed_value(v) for k, v in inputs.items()}
        else:
            if isinstance(inputs, np.ndarray) or not isinstance(inputs, (list, tuple)):
                inputs = [inputs]
            feed = {n: _feed_value(v) for n, v in zip(self.input_names, inputs)}
        if all(isinstance(v, np.ndarray) for v in feed.values()) and \
                self._key(feed, self._frozen) not in self._cache:
            batched = self._batched(self._declared_shapes(),
                                    {k: v.dtype.name for k, v in feed.items()},
                                    {k: v.shape for k, v in feed.items()})
            if batched is not None and sorted(feed) == sorted(batched.input_names) and all(
                    batched._shape_fits(k, v.shape) for k, v in feed.items()):
                return tuple(batched.run(**feed))
        module, frozen, structure = self._compile(feed)
        flat = _flat_feed({k: v for k, v in feed.items() if k not in frozen})
        outs = module.run(**{k: v for k, v in flat.items() if k in module.input_names})
        return tuple(regroup(structure, outs) if structure else outs)

    def _key(self, feed: dict, frozen: set[str]):
        def key(k, v):
            if v is None:
                return (k, None)
            if isinstance(v, list):
                return (k, tuple(key(k, x) for x in v))
            return (k, v.shape, v.dtype.str, v.tobytes() if k in frozen else None)
        return tuple(key(k, v) for k, v in sorted(feed.items()))

    def _compile(self, feed: dict):
        import nnvm

        from .importer import import_model

        key = self._key(feed, self._frozen)
        if key in self._cache:
            return self._cache[key]
        frozen = set(self._frozen)
        for _ in range(len(feed) + 1):
            try:
                graph, params = import_model(
                    self.model, shape={k: _spec(v) for k, v in feed.items() if k not in frozen},
                    dtype={k: v.dtype.name for k, v in feed.items()
                           if k not in frozen and isinstance(v, np.ndarray)},
                    freeze={k: feed[k] for k in frozen}, check=False,
                    static_shapes=True)
                break
            except NeedsConstantError as exc:
                new = [n if n in feed else n.rpartition(".")[0] for n in exc.inputs]
                new = [n for n in dict.fromkeys(new) if n in feed and n not in frozen]
                if not new:
                    raise
                frozen.update(new)
        shapes = graph.attrs.get("shape_inputs", {})
        dtypes = graph.attrs.get("dtype_inputs", {})
        module = nnvm.compiler.build(graph, target=self.target, shape=shapes, dtype=dtypes,
                                     params=params, opt_level=self.opt_level, **self.options)
        self.builds += 1
        self._frozen |= frozen
        entry = (module, frozen, structure_of(graph))
        self._cache[self._key(feed, frozen)] = entry
        return entry


def _feed_value(v):
    """Inputs as the importer takes them: arrays, lists (sequences) or None (empty optional)."""
    if v is None:
        return None
    if isinstance(v, list):
        return [np.asarray(x) for x in v]
    return np.asarray(v)


def _spec(v):
    if v is None:
        return None
    if isinstance(v, list):
        return [x.shape for x in v]
    return v.shape


def _flat_feed(feed: dict) -> dict:
    """Sequence inputs are one graph variable per element, named ``input.k``."""
    flat = {}
    for k, v in feed.items():
        if isinstance(v, list):
            flat.update({f"{k}.{i}": x for i, x in enumerate(v)})
        elif v is not None:
            flat[k] = v
    return flat


class Backend(_OnnxBackend):
    """NNVM as an ``onnx.backend``: ``prepare``, ``run_model``, ``supports_device``."""

    @classmethod
    def is_compatible(cls, model, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def prepare(cls, model, device: str = "CPU", target: str | None = None, **kwargs: Any
                ) -> NNVMBackendRep:
        from .loader import load_model

        super().prepare(model, device, **kwargs)
        from .importer import OnnxImporter

        proto, _ = load_model(model, check=True)
        OnnxImporter(proto).report_unsupported(proto.graph)
        options = {k: v for k, v in kwargs.items() if k not in ("rtol", "atol")}
        return NNVMBackendRep(proto, target or _default_target(), **options)

    @classmethod
    def run_model(cls, model, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node, inputs: Sequence[Any], device: str = "CPU", outputs_info=None,
                 **kwargs: Any) -> tuple:
        from onnx import helper

        inputs = [np.asarray(i) for i in inputs]
        ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                             a.shape) for n, a in zip(node.input, inputs)]
        outs = [helper.make_tensor_value_info(n, 0, None) for n in node.output]
        graph = helper.make_graph([node], "run_node", ins, outs)
        model = helper.make_model(graph)
        return cls.run_model(model, inputs, device, **kwargs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return str(device).upper().startswith("CPU")


prepare = Backend.prepare
run_model = Backend.run_model
run_node = Backend.run_node
supports_device = Backend.supports_device
