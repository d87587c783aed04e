"""Building a model whose inputs have a symbolic batch (``shape={"x": ("N", 3, 224, 224)}``).

One build, at ``bucket`` samples, when ``nnvm.compiler.batch_axis`` proves the samples
independent (see there for why this design rather than symbolic shapes in the generated
code); otherwise one build per batch size, said once in the ``nnvm.compiler`` log. With
several symbolic dimensions, the one most inputs share is the batch and the others (a
sequence length) are compiled once per value, each of those builds splitting the batch. Used by
``nnvm.compiler.build``, ``nnvm.InferenceSession`` and the ``onnx.backend`` adapter, which
differ only in how they get a graph for a given concrete shape (``import_at``): the same
graph re-inferred, or the ONNX model re-imported, which folds its shape subgraphs.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping

from ..errors import NNVMError, ShapeError, format_error
from ..ir import Graph
from .batch_axis import BatchPlan, batch_plan

logger = logging.getLogger("nnvm.compiler")

#: The two batch sizes the graph is shape-inferred at to find each tensor's batch axis
#: (not 1: a batch of 1 broadcasts like any size-1 dimension and would hide the batch).
PROBES = (2, 3)

ImportAt = Callable[[dict], "tuple[Graph, dict]"]
BuildAt = Callable[[Graph, dict, dict], Any]


def is_symbolic(shape: Mapping | None) -> bool:
    """Whether any dimension in ``shape`` (``{input: dims}``) is a name rather than an int."""
    return any(not _is_int(d) for dims in (shape or {}).values() if dims is not None
               for d in dims)


def _is_int(d) -> bool:
    try:
        return int(d) == d and not isinstance(d, str)
    except (TypeError, ValueError):
        return False


def batch_dimension(shape: Mapping) -> tuple[str, dict[str, int]] | str:
    """``(name, {input: axis})`` when every symbolic dimension is one name, once per input;
    else why the batch cannot be found."""
    axes: dict[str, int] = {}
    names = set()
    for inp, dims in shape.items():
        free = [(k, d) for k, d in enumerate(dims) if not _is_int(d)]
        if len(free) > 1:
            return f"input '{inp}' has several symbolic dimensions {[d for _, d in free]}"
        if free:
            axes[inp] = free[0][0]
            names.add(str(free[0][1]))
    if len(names) != 1:
        return f"the inputs use several symbolic dimensions {sorted(names)}"
    return names.pop(), axes


def split_names(shape: Mapping) -> tuple[str | None, list[str]]:
    """``(batch, others)``: the symbolic dimension used by the most inputs (the first seen on
    a tie) is the batch; the others (a sequence length...) are compiled once per value.
    E.g. a VAD's ``input: (batch, sequence)`` and ``state: (2, batch, 128)``."""
    counts: dict[str, int] = {}
    for dims in shape.values():
        for name in dict.fromkeys(str(d) for d in dims if not _is_int(d)):
            counts[name] = counts.get(name, 0) + 1
    if not counts:
        return None, []
    batch = max(counts, key=lambda n: counts[n])  # max keeps the first of equal counts
    return batch, [n for n in counts if n != batch]


def resolve(shape: Mapping, values: Mapping[str, int]) -> dict[str, tuple]:
    """``shape`` with the symbolic dimensions named in ``values`` set to those values."""
    return {k: tuple(values.get(str(d), d) if not _is_int(d) else int(d) for d in dims)
            for k, dims in shape.items()}


def values_of(shape: Mapping, fed: Mapping[str, tuple], names) -> dict[str, int]:
    """The value each symbolic dimension in ``names`` takes in the ``fed`` input shapes."""
    from ..errors import ExecutionError

    values: dict[str, int] = {}
    for k, dims in shape.items():
        if k not in fed:
            continue
        for axis, d in enumerate(dims):
            if str(d) in names and not _is_int(d) and axis < len(fed[k]):
                got = int(fed[k][axis])
                if values.setdefault(str(d), got) != got:
                    raise ExecutionError(format_error(
                        "run", f"symbolic dimension '{d}' has two values in one feed",
                        values[str(d)], got, fix=f"Feed the same '{d}' to every input"))
    return values


def concrete(shape: Mapping, n: int) -> dict[str, tuple]:
    """``shape`` with every symbolic dimension set to ``n``."""
    return {k: tuple(int(d) if _is_int(d) else n for d in dims) for k, dims in shape.items()}


def infer(graph: Graph, shapes: Mapping, params: Mapping, dtype: Any = None) -> Graph:
    """``graph`` with its ``shape`` (and ``dtype``) attributes inferred, nothing else run."""
    from ..pass_manager import apply_passes
    from .build_module import _normalize_inputs, _to_graph

    g = _to_graph(graph)
    s, d, p = _normalize_inputs(g, shapes, dtype, params)
    g = g.with_attrs(shape_inputs=s, dtype_inputs=d, params=p)
    g = apply_passes(g, ["InferShape", "InferType"])
    if g.attrs.get("shape_num_unknown_nodes"):
        raise ShapeError("some shapes cannot be inferred")
    return g


def plan_batch(import_at: ImportAt, shape: Mapping, dtype: Any = None
               ) -> tuple[str, BatchPlan | str]:
    """``(batch name, plan)``, or ``(name, reason)`` when the batch cannot be split."""
    found = batch_dimension(shape)
    if isinstance(found, str):
        return "", found
    name, axes = found
    graphs = []
    for b in PROBES:
        shapes = concrete(shape, b)
        try:
            g, params = import_at(shapes)
            graphs.append(infer(g, {k: v for k, v in shapes.items()
                                    if k in g.index.input_names}, params, dtype))
        except NNVMError as exc:
            return name, f"the graph does not take batch {b}: {str(exc).splitlines()[0]}"
    return name, batch_plan(graphs[0], graphs[1], axes, *PROBES)


def build_any_batch(import_at: ImportAt, build_at: BuildAt, shape: Mapping, *,
                    target: str, bucket: int = 1, dtype: Any = None, where: str = "build"):
    """A module that runs every value of the symbolic batch in ``shape``.

    ``import_at(shapes) -> (graph, params)`` gives the graph for concrete input shapes;
    ``build_at(graph, params, shapes)`` compiles it. Returns a ``BatchedModule`` (one build,
    at ``bucket`` samples) or, when the samples are not independent, a ``PerShapeModule``
    (one build per batch size; the reason is logged once at WARNING).
    """
    from ..runtime.batching import BatchedModule

    if int(bucket) < 1:
        raise NNVMError(format_error(where, "batch_bucket must be at least 1", ">= 1", bucket))
    batch, others = split_names(shape)
    if others:  # one batch-splitting module per value of the other symbolic dimensions
        logger.info("%s: symbolic %s compiled once per value; batch '%s' split at run time",
                    where, others, batch)

        def build_per_value(fed: dict):
            return build_any_batch(import_at, build_at, resolve(shape, values_of(
                shape, fed, others)), target=target, bucket=bucket, dtype=dtype, where=where)
        return _per_shape(import_at, shape, dtype, target, build_per_value,
                          key_of=lambda fed: tuple(sorted(values_of(shape, fed, others).items())))
    name, plan = plan_batch(import_at, shape, dtype)
    if isinstance(plan, BatchPlan):
        shapes = concrete(shape, int(bucket))
        graph, params = import_at(shapes)
        module = build_at(graph, params, shapes)
        logger.info("%s: batch '%s' on axes %s, compiled once for %d sample(s), split at run "
                    "time", where, name, plan.inputs, int(bucket))
        return BatchedModule(module, plan, int(bucket), name or "N")
    logger.warning("%s: the symbolic batch cannot be split (%s); building once per batch size",
                   where, plan)

    def build_for(shapes: dict):
        graph, params = import_at(shapes)
        return build_at(graph, params, shapes)
    return _per_shape(import_at, shape, dtype, target, build_for)


def _per_shape(import_at: ImportAt, shape: Mapping, dtype: Any, target: str,
               build_for: Callable[[dict], Any], key_of: Callable | None = None):
    """A ``PerShapeModule`` described by the graph at the first probe size."""
    from ..runtime.batching import PerShapeModule

    probe = concrete(shape, PROBES[0])
    graph, params = import_at(probe)
    graph = infer(graph, {k: v for k, v in probe.items() if k in graph.index.input_names},
                  params, dtype)
    return PerShapeModule(graph, params, target, build_for,
                          {k: tuple(v) for k, v in shape.items()}, key_of=key_of)

