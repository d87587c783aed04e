"""Graph, IndexedGraph and traversal: deterministic order, dense ids, no recursion limits."""

import sys

import numpy as np

import nnvm
from nnvm import sym
from nnvm.ir import Graph, node_map


def test_indexed_graph_matches_nnvm_post_order():
    x, w = sym.Variable("x"), sym.Variable("w")
    a = sym.elemwise_mul(x, w, name="a")
    b = sym.exp(a, name="b")
    c = sym.elemwise_add(b, x, name="c")
    idx = nnvm.graph.create(c).index
    assert [n.name for n in idx.nodes] == ["x", "w", "a", "b", "c"]
    assert idx.input_nodes == [0, 1]
    assert idx.entry_rptr == [0, 1, 2, 3, 4, 5]
    assert idx.inputs[4] == [(3, 0, 0), (0, 0, 0)]
    assert idx.entry_id(4, 0) == 4 and idx.node_id("b") == 3


def test_ten_thousand_node_chain_without_recursion():
    limit = sys.getrecursionlimit()
    x = sym.Variable("x")
    y = x
    for _ in range(10_000):
        y = sym.__add_scalar__(y, scalar=1.0)
    g = nnvm.graph.create(y).apply("InferShape", shape_inputs={"x": (2,)})
    assert g.attrs["shape"][-1] == (2,)
    g2 = nnvm.graph.load_json(g.json())
    assert g2.index.num_nodes == 10_001
    assert sys.getrecursionlimit() == limit
    out = nnvm.compiler.build(y, "reference", shape={"x": (2,)}).run(x=np.zeros(2, "float32"))
    np.testing.assert_array_equal(out[0], [10_000, 10_000])


def test_node_map_shares_unchanged_nodes_and_replaces():
    x = sym.Variable("x")
    y = sym.exp(sym.relu(x, name="r"), name="e")
    g = nnvm.graph.create(y)

    def swap(node, inputs):
        if node.op is not None and node.op.name == "relu":
            return nnvm.ir.make_node("tanh", inputs, name="t")
        return None

    new = Graph(node_map(g, swap))
    assert [n.name for n in new.index.nodes] == ["x", "t", "e"]
    assert new.index.nodes[0] is g.index.nodes[0]
    assert g.index.nodes[1].op.name == "relu"  # the input graph is untouched


def test_control_deps_are_ordered_and_kept():
    x = sym.Variable("x")
    a = sym.exp(x, name="a")
    b = sym.log(x, name="b")
    b._add_control_deps(a)
    g = nnvm.graph.create(b)
    assert [n.name for n in g.index.nodes] == ["x", "a", "b"]
    g2 = nnvm.graph.load_json(g.json())
    assert g2.index.control_deps[2] == [1]
