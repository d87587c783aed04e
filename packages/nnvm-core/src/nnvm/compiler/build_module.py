"""``nnvm.compiler.build``: graph or symbol -> optimised graph -> backend -> runtime module.

Steps: normalise shapes/dtypes/params -> the ``default`` pass pipeline filtered by
``opt_level`` (core has InferShape/InferType; nnvm-passes adds folding, fusion, memory
planning...) -> check every shape is known -> the target's backend builds the module.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .. import progress
from ..backend import BuildConfig, Target, check_target, get_backend, parse_target
from ..dtypes import name_of
from ..errors import NNVMError, ShapeError, TypeInferenceError, format_error
from ..ir import Graph
from ..pass_manager import apply_passes, opt_level_passes
from ..passes.infer_engine import first_unknown
from ..symbol import Symbol
from .dynamic_region import RUNS_DYNAMIC_SHAPES, build_with_host_tail, has_dynamic_op, \
    is_dynamic_op
from .symbolic_batch import build_any_batch, is_symbolic

_config: contextvars.ContextVar[BuildConfig | None] = contextvars.ContextVar(
    "nnvm_build_config", default=None)


@contextlib.contextmanager
def build_config(opt_level: int = 2, add_pass: Sequence[str] = (),
                 disabled_pass: Sequence[str] = (), **extra: Any):
    """Nestable build options, as in NNVM: ``with build_config(opt_level=3): build(...)``."""
    token = _config.set(BuildConfig(opt_level, tuple(add_pass), tuple(disabled_pass), extra))
    try:
        yield _config.get()
    finally:
        _config.reset(token)


def _to_graph(graph: Graph | Symbol) -> Graph:
    if isinstance(graph, Symbol):
        return Graph(graph.outputs)
    if isinstance(graph, Graph):
        return graph
    raise NNVMError(f"build: expected an nnvm Graph or Symbol; got {type(graph).__name__}. "
                    f"Use nnvm.frontend.from_onnx(...) to import a model first")


def _normalize_inputs(graph: Graph, shape, dtype, params) -> tuple[dict, dict, dict]:
    idx = graph.index
    inputs = set(idx.input_names)
    params = {k: np.asarray(v) for k, v in (params or {}).items()}
    for nid in idx.input_nodes:  # Variable(init=...) values materialise as params
        node = idx.nodes[nid]
        if node.name not in params and "init" in node.info:
            params[node.name] = node.info["init"]
    params = {k: v for k, v in params.items() if k in inputs}  # unreferenced params dropped
    shapes: dict[str, tuple] = {}
    for k, v in (shape or {}).items():
        if k not in inputs:
            raise ShapeError(format_error(f"build: shape for '{k}'", "names no graph input",
                                          fix=f"Graph inputs: {', '.join(idx.input_names)}"))
        try:
            shapes[k] = tuple(int(d) for d in v)
        except (TypeError, ValueError):
            raise ShapeError(f"build: shape for '{k}' must be a tuple of ints; got {v!r}"
                             ) from None
    dtypes: dict[str, str] = {}
    if isinstance(dtype, Mapping):
        for k, v in dtype.items():
            if k not in inputs:
                raise TypeInferenceError(format_error(
                    f"build: dtype for '{k}'", "names no graph input",
                    fix=f"Graph inputs: {', '.join(idx.input_names)}"))
            dtypes[k] = np.dtype(v).name if not isinstance(v, str) else v
    for k, v in params.items():
        if k in shapes and shapes[k] != v.shape:
            raise ShapeError(format_error(f"build: input '{k}'", "shape contradicts its param",
                                          v.shape, shapes[k]))
        shapes[k] = v.shape
        dtypes[k] = name_of(v.dtype)
    if isinstance(dtype, (str, np.dtype, type)) and dtype is not None:
        name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
        for nid in idx.input_nodes:
            node = idx.nodes[nid]
            if node.name not in dtypes and "dtype" not in node.attrs:
                dtypes[node.name] = name
    return shapes, dtypes, params


def _only_dynamic_unknown(graph: Graph) -> bool:
    """True when every unknown shape is downstream of an op whose output size depends on
    data (``TDynamicShape``, e.g. non_zero, non_max_suppression): such graphs are fine for
    targets that allocate at run time (``reference``; compiled targets run that part as a
    host tail, ``nnvm.compiler.dynamic_region``), and marked ``dynamic_shape``."""
    idx = graph.index
    rptr = idx.entry_rptr
    shapes = graph.attrs["shape"]
    dynamic = [False] * idx.num_nodes
    for nid, node in enumerate(idx.nodes):
        dynamic[nid] = is_dynamic_op(node) or any(dynamic[i] for i, _, _ in idx.inputs[nid])
        if not dynamic[nid] and any(shapes[e] is None for e in range(rptr[nid], rptr[nid + 1])):
            return False
    graph.attrs["dynamic_shape"] = any(dynamic)
    return True


def optimize(graph: Graph | Symbol, shape: Mapping | None = None, dtype: Any = "float32",
             params: Mapping | None = None, opt_level: int | None = None,
             log: Callable[[str], None] | None = None,
             layout: Any = None) -> tuple[Graph, dict]:
    """Run the optimisation pipeline only; returns ``(graph, params)``.

    ``layout`` (``{input: layout}`` or one layout for every input) is the graph attribute
    ``layout_inputs`` that CorrectLayout reads, so it is set before the pipeline runs."""
    cfg = _config.get() or BuildConfig()
    level = cfg.opt_level if opt_level is None else opt_level
    g = _to_graph(graph)
    shapes, dtypes, params = _normalize_inputs(g, shape, dtype, params)
    g = g.with_attrs(shape_inputs=shapes, dtype_inputs=dtypes, params=params, opt_level=level)
    if layout is not None:
        g = g.with_attrs(layout_inputs=layout)
    names = opt_level_passes(level, cfg.add_pass, cfg.disabled_pass)
    for required in ("InferShape", "InferType"):
        if required not in names:
            names.append(required)
    g = apply_passes(g, names, log=log)
    params = g.attrs.get("params", params)
    if g.attrs.get("shape_num_unknown_nodes") and not _only_dynamic_unknown(g):
        where = first_unknown(g, "shape")
        missing = [n for n in g.index.input_names if n not in shapes and n not in params]
        raise ShapeError(format_error(
            where or "graph", "shape could not be inferred",
            fix="Give input shapes to build(shape={...})" + (
                f"; inputs without a shape: {', '.join(missing)}" if missing else "")))
    if g.attrs.get("dtype_num_unknown_nodes"):
        raise TypeInferenceError(format_error(first_unknown(g, "dtype") or "graph",
                                              "dtype could not be inferred",
                                              fix="Give input dtypes to build(dtype=...)"))
    return g, params


def build(graph: Graph | Symbol, target: str | Target | None = None,
          shape: Mapping | None = None, dtype: Any = "float32", params: Mapping | None = None,
          opt_level: int | None = None, target_host: str | None = None,
          layout: Any = None, log: Callable[[str], None] | None = None, **options: Any):
    """Compile a graph for a target and return its runtime module.

    Args:
        graph: a Graph or Symbol.
        target: ``"reference"``, ``"llvm"``, ``"opencl"``, ``"cuda"`` with options in TVM
            style (``"llvm -mcpu=native"``); None picks the best available target.
        shape: ``{input: shape}``; params' shapes are added automatically. A name in place
            of a dimension (``("N", 3, 224, 224)``) leaves the batch free: the module then runs
            any batch size, built once when the samples are independent (see
            ``nnvm.compiler.symbolic_batch``), else once per batch size.
        dtype: one dtype name for all inputs, or ``{input: dtype}``.
        params: ``{name: array}`` constant inputs (weights).
        opt_level: 0-3 (default 2, or the enclosing ``build_config``'s).
        target_host: accepted for NNVM compatibility.
        layout: the inputs' data layout, ``{input: "NHWC"}`` or one layout for all inputs;
            CorrectLayout (nnvm-passes) inserts the transforms to the layouts ops expect.
        log: receives one progress line per step.
        **options: backend-specific build options (e.g. ``num_threads``);
            ``batch_bucket`` (default 1) is the batch a symbolic-batch module is compiled for.

    Returns:
        A ``nnvm.runtime.Module``: ``run``, ``set_input``/``get_output``, ``stats``, ``export``.
    """
    cfg = _config.get() or BuildConfig()
    level = cfg.opt_level if opt_level is None else opt_level
    if not 0 <= level <= 3:
        raise NNVMError(f"build: opt_level must be 0..3; got {level}")
    tgt = parse_target(target)
    backend = get_backend(tgt.kind)
    with progress.step(f"checking target {tgt}"):  # llvm: loads TVM, seconds on a cold start
        check_target(backend, tgt)  # option values (-mcpu=...) before any work
    bucket = options.pop("batch_bucket", 1)
    if is_symbolic(shape):
        def build_at(g, p, shapes):
            return build(g, tgt, shapes, dtype, p, level, target_host, layout, log, **options)
        whole = _to_graph(graph)
        return build_any_batch(lambda shapes: (whole, dict(params or {})), build_at, shape, target=str(tgt),
                               bucket=bucket, dtype=dtype)
    # Overridable defaults (graph attr input_defaults, e.g. ONNX initializers listed as graph
    # inputs) compile as inputs, so no pass folds them; the module holds them as params,
    # which a fed value rebinds.
    names = set(getattr(graph, "attrs", {}).get("input_defaults") or ())
    defaults = {k: v for k, v in (params or {}).items() if k in names}
    params = {k: v for k, v in (params or {}).items() if k not in names}
    if tgt.kind not in RUNS_DYNAMIC_SHAPES and has_dynamic_op(_to_graph(graph)):
        module = _build_host_tail(_to_graph(graph), tgt, shape, dtype, params, level, layout,
                                  log, options)
    else:
        g, params = optimize(graph, shape, dtype, params, level, log, layout)
        config = BuildConfig(level, cfg.add_pass, cfg.disabled_pass, {**cfg.extra, **options})
        if log:
            log(f"lowering for target {tgt}")
        module = backend.build(g, params, tgt, config)
    module.params.update({k: np.asarray(v) for k, v in defaults.items()})
    module.input_names = [n for n in module.input_names if n not in defaults]
    return module


def _build_host_tail(graph: Graph, tgt: Target, shape, dtype, params, level, layout, log,
                     options):
    """A graph with data-dependent shapes for a compiled target: the static part compiled,
    the tail on the host (``nnvm.compiler.dynamic_region``)."""
    shapes, dtypes, params = _normalize_inputs(graph, shape, dtype, params)

    def build_part(part, target, part_shape, part_dtype, part_params):
        if log:
            log(f"building the {'host tail' if target == 'reference' else 'static part'} "
                f"for target {target}")
        part_layout = {k: v for k, v in layout.items() if k in part_shape} \
            if isinstance(layout, Mapping) else layout
        return build(part, target, part_shape, part_dtype, part_params, level,
                     layout=part_layout if target != "reference" else None, log=log,
                     **(options if target != "reference" else {}))

    return build_with_host_tail(graph, shapes, dtypes, params, build_part, str(tgt))
