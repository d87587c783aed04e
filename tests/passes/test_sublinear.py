"""Sublinear-memory gradients (Chen et al. 2016): less planned memory, same numbers."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
from nnvm import sym
from nnvm.compiler import graph_util
from nnvm.interpreter import run_graph
from nnvm.ir import Graph
from nnvm_passes.plan_memory import check_memory_plan


def residual_mlp(depth: int, hidden: int):
    """sum((x + sum_k dense(relu(dense(h_k))))^2): a deep chain with skip connections."""
    h = sym.Variable("data")
    for i in range(depth):
        a = sym.relu(sym.dense(h, units=hidden, name=f"b{i}_fc1"))
        h = h + sym.dense(a, units=hidden, name=f"b{i}_fc2")
    return sym.sum(h * h) * (1.0 / (depth * hidden))


def planned_gradient(depth: int, mirror, batch: int, hidden: int) -> Graph:
    loss = residual_mlp(depth, hidden)
    weights = [v for v in loss.list_input_variables() if v.name != "data"]
    shapes = {"data": (batch, hidden)}
    g = Graph(loss.outputs, {"grad_ys": loss.outputs, "grad_mirror": mirror,
                             "grad_xs": [e for w in weights for e in w.outputs],
                             "shape_inputs": shapes}).apply("Gradient")
    return g.apply(["InferShape", "InferType", "PlanMemory"], shape_inputs=shapes,
                   dtype_inputs={"data": "float32"})


def _num_ops(g: Graph) -> int:
    return sum(n.op is not None for n in g.index.nodes)


def test_sublinear_cuts_planned_memory_with_bounded_recompute():
    base = planned_gradient(32, None, batch=256, hidden=16)
    lean = planned_gradient(32, "sublinear", batch=256, hidden=16)
    ratio = lean.attrs["storage_allocated_bytes"] / base.attrs["storage_allocated_bytes"]
    overhead = _num_ops(lean) / _num_ops(base) - 1
    print(f"depth 32: memory ratio {ratio:.3f}, op overhead {overhead:.1%}, "
          f"{len(lean.attrs['grad_checkpoints'])} checkpoints")
    assert ratio <= 0.4
    assert overhead <= 0.35
    assert 3 <= len(lean.attrs["grad_checkpoints"]) <= 16
    for g in (base, lean):
        check_memory_plan(g)


def test_memory_grows_sublinearly_with_depth():
    ratios = []
    for depth in (8, 32):
        base = planned_gradient(depth, None, batch=256, hidden=16)
        lean = planned_gradient(depth, "sublinear", batch=256, hidden=16)
        ratios.append(lean.attrs["storage_allocated_bytes"] /
                      base.attrs["storage_allocated_bytes"])
    assert ratios[1] < ratios[0]


@pytest.mark.parametrize("policy", ["sublinear", "all", lambda n: n.op.name == "relu"])
def test_mirrored_gradients_equal_plain_ones(policy, rng):
    depth, batch, hidden = 6, 4, 5
    loss = residual_mlp(depth, hidden)
    weights = [v for v in loss.list_input_variables() if v.name != "data"]
    xs = [e for w in weights for e in w.outputs]
    feed = {"data": rng.standard_normal((batch, hidden)).astype("float32")}
    for w in weights:
        n = w.name
        feed[n] = (rng.standard_normal((hidden, hidden)) * 0.3 if n.endswith("weight")
                   else rng.standard_normal(hidden) * 0.1).astype("float32")
    plain = Graph(loss.outputs, {"grad_ys": loss.outputs, "grad_xs": xs}).apply("Gradient")
    mirrored = Graph(loss.outputs, {"grad_ys": loss.outputs, "grad_xs": xs,
                                    "grad_mirror": policy}).apply("Gradient")
    assert mirrored.attrs["grad_num_mirrored"] > 0
    for a, b in zip(run_graph(plain, feed), run_graph(mirrored, feed)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_build_config_option_and_cse_keeps_the_mirrors():
    loss = residual_mlp(8, 4)
    weights = [v for v in loss.list_input_variables() if v.name != "data"]
    with nnvm.compiler.build_config(sublinear_memory=True):
        grads = graph_util.gradients(loss, weights)
    g = Graph(sym.Group(grads).outputs)
    assert any(n.name.endswith("_mirror") for n in g.index.nodes)
    after = g.apply("EliminateCommonSubexpr")
    assert sum(n.name.endswith("_mirror") for n in after.index.nodes) == \
        sum(n.name.endswith("_mirror") for n in g.index.nodes)
    lib = nnvm.compiler.build(g, target="reference", shape={"data": (3, 4)})
    assert lib.stats()["activation_bytes"] < lib.stats()["activation_bytes_naive"]


def test_forced_segment_count():
    searched = planned_gradient(16, "sublinear", batch=8, hidden=4)
    loss = residual_mlp(16, 4)
    weights = [v for v in loss.list_input_variables() if v.name != "data"]
    forced = Graph(loss.outputs, {"grad_ys": loss.outputs, "grad_mirror": "sublinear",
                                  "grad_mirror_segments": 2,
                                  "grad_xs": [e for w in weights for e in w.outputs]}
                   ).apply("Gradient")
    assert len(forced.attrs["grad_checkpoints"]) < len(searched.attrs["grad_checkpoints"])
