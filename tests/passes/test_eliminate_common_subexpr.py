"""EliminateCommonSubexpr: identical computations merge into one node."""

from _numerics import assert_same_numerics, op_names, setup
from nnvm import sym
from nnvm.compiler.graph_util import check_graph_equal
from nnvm.ir import Graph


def test_duplicates_merge_transitively():
    x = sym.Variable("x")
    a = sym.exp(sym.relu(x))
    b = sym.exp(sym.relu(x))
    g, _, feed = setup(a + b, {"x": (2, 3)})
    after = g.apply("EliminateCommonSubexpr")
    y = sym.exp(sym.relu(sym.Variable("x")))
    check_graph_equal(after, Graph((y + y).outputs))
    assert_same_numerics(g, after, feed)


def test_different_attributes_are_kept_apart():
    x = sym.Variable("x")
    g, _, _ = setup(x * 2.0 + x * 3.0, {"x": (2,)})
    assert op_names(g.apply("EliminateCommonSubexpr")).count("__mul_scalar__") == 2


def test_nothing_to_merge_returns_the_same_graph():
    g, _, _ = setup(sym.relu(sym.Variable("x")), {"x": (2,)})
    assert g.apply("EliminateCommonSubexpr") is g
