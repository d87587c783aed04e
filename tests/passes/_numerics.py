"""Shared by the pass tests: run a graph before and after passes on random inputs."""

from __future__ import annotations

import numpy as np

from nnvm.compiler.graph_util import infer_shape
from nnvm.interpreter import Interpreter
from nnvm.ir import Graph


def setup(net, shapes: dict, seed: int = 0, positive: tuple[str, ...] = ("var", "gamma")):
    """``(graph with shape/dtype/params attrs, params, feed)`` for a symbol and input shapes;
    every other input becomes a random param (those named like ``positive`` are > 0)."""
    rng = np.random.default_rng(seed)
    g = Graph(net.outputs) if not isinstance(net, Graph) else net
    in_shapes, _ = infer_shape(g, **shapes)
    params, feed = {}, {}
    for name, shape in zip(g.index.input_names, in_shapes):
        if name in shapes:
            feed[name] = rng.standard_normal(shape).astype("float32")
        elif any(p in name for p in positive):
            params[name] = rng.uniform(0.5, 1.5, shape).astype("float32")
        else:
            params[name] = rng.standard_normal(shape).astype("float32")
    all_shapes = {**shapes, **{k: v.shape for k, v in params.items()}}
    g = g.with_attrs(shape_inputs=all_shapes, dtype_inputs={k: "float32" for k in all_shapes},
                     params=params)
    return g.apply(["InferShape", "InferType"]), params, feed


def run(graph: Graph, feed: dict) -> list[np.ndarray]:
    params = graph.attrs.get("params") or {}
    names = set(graph.index.input_names)
    return Interpreter(graph).run({k: v for k, v in {**params, **feed}.items() if k in names})


def assert_same_numerics(before: Graph, after: Graph, feed: dict, rtol: float = 1e-5) -> None:
    for a, b in zip(run(before, feed), run(after, feed), strict=True):
        np.testing.assert_allclose(b, a, rtol=rtol, equal_nan=False,
                                   atol=rtol * max(1.0, float(np.abs(a).max())))


def op_names(graph: Graph) -> list[str]:
    return [n.op.name for n in graph.index.nodes if n.op is not None]
