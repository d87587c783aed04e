"""PlaceDevice: group annotations, fallback for unsupported ops, copy insertion."""

from __future__ import annotations

import numpy as np
import pytest

from nnvm import sym
from nnvm.attribute import AttrScope
from nnvm.compiler import graph_util
from nnvm.errors import NNVMError
from nnvm.interpreter import run_graph
from nnvm.ir import Graph, NodeEntry, make_node
from nnvm_passes.plan_memory import check_memory_plan


def _same_numbers(before: Graph, after: Graph, feed: dict) -> None:
    for a, b in zip(run_graph(before, feed), run_graph(after, feed)):
        np.testing.assert_array_equal(a, b)


def _devices(g: Graph) -> dict[str, object]:
    return {n.name: d for n, d in zip(g.index.nodes, g.attrs["device"])}


def test_group_annotations_insert_copies_at_boundaries(rng):
    x = sym.Variable("x")
    with AttrScope(__ctx_group__="dev1"):
        a = sym.exp(x, name="a")
    with AttrScope(__ctx_group__="dev2"):
        b = sym.tanh(a, name="b")
    c = sym.elemwise_add(b, a, name="c")  # inherits dev2 from its first input
    before = Graph(c.outputs)
    after = before.apply("PlaceDevice", device_assign_map={"dev1": "cpu", "dev2": "gpu"})
    assert after.attrs["num_device_copies"] == 1  # a is copied once, read twice on gpu
    dev = _devices(after)
    assert dev["a"] == dev["x"] == "cpu" and dev["b"] == dev["c"] == "gpu"
    assert dev["a_0_copy_gpu"] == "gpu"
    xe = x.outputs[0]
    ea = NodeEntry(make_node("exp", [xe], {"__ctx_group__": "dev1"}))
    copy = NodeEntry(make_node("device_copy", [ea], {"dst_device": "gpu"}))
    eb = NodeEntry(make_node("tanh", [copy], {"__ctx_group__": "dev2"}))
    expected = Graph([NodeEntry(make_node("elemwise_add", [eb, copy]))])
    graph_util.check_graph_equal(after, expected)
    _same_numbers(before, after, {"x": rng.standard_normal((3, 2))})


def test_unsupported_op_falls_back_and_the_rest_stays(rng):
    x = sym.Variable("x")
    a = sym.exp(x, name="a")
    s = sym.sign(a, name="s")
    y = sym.tanh(s, name="t") + a
    before = Graph(y.outputs)
    after = before.apply("PlaceDevice", device_default="opencl", fallback_device="reference",
                         device_unsupported_ops=["sign"])
    dev = _devices(after)
    assert dev["s"] == "reference"
    assert dev["a"] == dev["t"] == dev["x"] == "opencl"
    assert after.attrs["num_device_copies"] == 2  # into sign, and back out of it
    _same_numbers(before, after, {"x": rng.standard_normal((4,))})


def test_predicate_picks_the_fallback_ops():
    x = sym.Variable("x")
    y = sym.relu(sym.sigmoid(sym.exp(x)))
    after = Graph(y.outputs).apply(
        "PlaceDevice", device_default="opencl", fallback_device="reference",
        device_supports=lambda node: node.op.name != "sigmoid")
    placed = {n.op.name: d for n, d in zip(after.index.nodes, after.attrs["device"])
              if n.op is not None and n.op.name != "device_copy"}
    assert placed == {"exp": "opencl", "sigmoid": "reference", "relu": "opencl"}


def test_one_device_changes_nothing():
    x = sym.Variable("x")
    y = sym.exp(x) * 2.0
    before = Graph(y.outputs)
    after = before.apply("PlaceDevice")
    assert after.outputs[0].node is before.outputs[0].node
    assert after.attrs["num_device_copies"] == 0
    assert after.attrs["device"] == [0, 0, 0]


def test_plan_after_placement_pools_per_device(rng):
    x = sym.Variable("x")
    y = x
    for i in range(6):
        y = sym.sign(y) if i % 3 == 1 else sym.tanh(y)
    g = Graph(y.outputs).apply(
        ["InferShape", "InferType", "PlaceDevice", "PlanMemory"], shape_inputs={"x": (5, 5)},
        dtype_inputs={"x": "float32"}, device_default="opencl", fallback_device="reference",
        device_unsupported_ops=["sign"])
    assert g.attrs["num_device_copies"] == 4
    assert len(g.attrs["shape"]) == g.index.num_node_entries
    check_memory_plan(g)  # also checks that no buffer is shared across devices
    feed = {"x": rng.standard_normal((5, 5)).astype("float32")}
    _same_numbers(Graph(y.outputs), g, feed)


def test_gradient_passes_through_device_copy():
    x = sym.Variable("x")
    y = sym.device_copy(x, dst_device="gpu") * 3.0
    (gx,) = graph_util.gradients(y, [x])
    (got,) = run_graph(Graph(gx.outputs), {"x": np.ones(2)})
    np.testing.assert_array_equal(got, [3.0, 3.0])


def test_unknown_group_is_an_error_listing_known_ones():
    x = sym.Variable("x")
    with AttrScope(__ctx_group__="stage9"):
        y = sym.exp(x, name="e")
    with pytest.raises(NNVMError, match="stage9.*Known groups: stage1"):
        Graph(y.outputs).apply("PlaceDevice", device_assign_map={"stage1": 1})


def test_mutated_variable_may_not_cross_devices():
    v, x = sym.Variable("v", __ctx_group__="g1"), sym.Variable("x")
    with AttrScope(__ctx_group__="g1"):
        r = sym.exp(v, name="r")
    with AttrScope(__ctx_group__="g2"):
        w = sym.assign(v, x, name="w")
    with pytest.raises(NNVMError, match="mutates input 0"):
        Graph(sym.Group([r, w]).outputs).apply(
            "PlaceDevice", device_assign_map={"g1": "cpu", "g2": "gpu"})
