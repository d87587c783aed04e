"""EliminateDeadCode: unused outputs, ignored inputs and unused params."""

from _numerics import assert_same_numerics, op_names, setup
from nnvm import sym
from nnvm.compiler.graph_util import check_graph_equal
from nnvm.ir import Graph


def test_split_with_one_used_output_becomes_a_slice():
    x = sym.Variable("x")
    parts = sym.split(x, indices_or_sections=3, axis=1)
    g, _, feed = setup(sym.relu(parts[1]), {"x": (2, 6)})
    after = g.apply("EliminateDeadCode")
    expected = sym.relu(sym.strided_slice(sym.Variable("x"), begin=(0, 2), end=(2, 4)))
    check_graph_equal(after, Graph(expected.outputs))
    assert_same_numerics(g, after, feed)


def test_ignored_input_no_longer_computed():
    x = sym.Variable("x")
    y = sym.zeros_like(sym.exp(sym.tanh(x))) + x
    g, _, feed = setup(y, {"x": (2, 3)})
    after = g.apply("EliminateDeadCode")
    assert "exp" not in op_names(after) and "tanh" not in op_names(after)
    assert op_names(after) == ["full", "broadcast_add"]
    assert_same_numerics(g, after, feed)


def test_unused_params_and_input_attrs_are_dropped():
    g, params, _ = setup(sym.relu(sym.Variable("x")) + sym.Variable("w", shape=(2,)), {"x": (2,)})
    g = g.with_attrs(params={**params, "stale": params["w"]},
                     shape_inputs={**g.attrs["shape_inputs"], "stale": (2,)})
    after = g.apply("EliminateDeadCode")
    assert set(after.attrs["params"]) == {"w"}
    assert "stale" not in after.attrs["shape_inputs"]
