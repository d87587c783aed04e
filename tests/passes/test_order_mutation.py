"""OrderMutation: control deps from variable versions; _assign; sequential semantics."""

from __future__ import annotations

import numpy as np
import pytest

from nnvm import sym
from nnvm.compiler import graph_util
from nnvm.errors import NNVMError
from nnvm.interpreter import run_graph
from nnvm.ir import Graph, NodeEntry, make_node


def _run_with_state(graph: Graph, feed: dict) -> list[np.ndarray]:
    """Execute in index order with real variable state: an op that mutates a variable
    (FMutateInputs) stores its result into it, and later reads see the new value."""
    idx = graph.index
    rptr = idx.entry_rptr
    state = {k: np.array(v) for k, v in feed.items()}
    vals: list = [None] * idx.num_node_entries
    for nid, node in enumerate(idx.nodes):
        if node.op is None:
            continue
        args = [state[idx.nodes[i].name].copy() if idx.nodes[i].op is None else vals[rptr[i] + k]
                for i, k, _ in idx.inputs[nid]]
        out = node.op.get_attr("FReference")(node.attrs, *args)
        vals[rptr[nid]] = out
        mutate = node.op.get_attr("FMutateInputs")
        for slot in (mutate(node.attrs) if mutate else []):
            state[node.inputs[slot].node.name] = np.array(out)
    return [vals[e] if idx.nodes[n].op is not None else state[idx.nodes[n].name]
            for e, (n, _, _) in zip(idx.output_entries, idx.outputs)]


def _program():
    """r1 = v * x; v := r1 + 1; r2 = exp(v); v := r2 * 2; r3 = v + x (composition order)."""
    v, x = sym.Variable("v"), sym.Variable("x")
    r1 = sym.elemwise_mul(v, x, name="r1")
    a1 = sym.assign(v, r1 + 1.0, name="a1")
    r2 = sym.exp(v, name="r2")
    a2 = sym.assign(v, r2 * 2.0, name="a2")
    r3 = sym.elemwise_add(v, x, name="r3")
    return sym.Group([a2, r3, a1, r1, r2])  # outputs listed out of program order on purpose


def _expected(v, x):
    r1 = v * x
    v1 = r1 + 1.0
    r2 = np.exp(v1)
    v2 = r2 * 2.0
    return [v2, v2 + x, v1, r1, r2]


def test_composition_versions_variables():
    s = _program()
    g = Graph(s.outputs)
    versions = {n.name: [e.version for e in n.inputs] for n in g.index.nodes}
    assert versions["r1"] == [0, 0] and versions["a1"][0] == 1
    assert versions["r2"] == [1] and versions["a2"][0] == 2 and versions["r3"] == [2, 0]


def test_control_deps_follow_the_versions(rng):
    before = Graph(_program().outputs)
    after = before.apply("OrderMutation")
    deps = {n.name: sorted(c.name for c in n.control_deps) for n in after.index.nodes}
    assert deps["a1"] == ["r1"]  # write-after-read
    assert deps["r2"] == ["a1"]  # read-after-write
    assert deps["a2"] == ["r2"]
    assert deps["r3"] == ["a2"]
    assert after.attrs["num_mutation_deps"] == 4
    order = [n.name for n in after.index.nodes if n.op is not None and n.name[0] in "ar"]
    assert order.index("r1") < order.index("a1") < order.index("r2") < order.index("a2") < \
        order.index("r3")
    feed = {"v": rng.standard_normal(4), "x": rng.standard_normal(4)}
    for got, want in zip(_run_with_state(after, feed), _expected(feed["v"], feed["x"])):
        np.testing.assert_allclose(got, want)
    # data flow alone is ambiguous: without the pass the stateful run reads stale values
    wrong = _run_with_state(before, feed)
    assert not all(np.allclose(a, b) for a, b in zip(wrong, _expected(feed["v"], feed["x"])))
    # the pure interpreter ignores state, so numbers are unchanged by the pass
    for a, b in zip(run_graph(before, feed), run_graph(after, feed)):
        np.testing.assert_array_equal(a, b)


def test_write_after_write_without_reads():
    v = sym.Variable("v")
    w1 = sym.assign(v, sym.Variable("p"), name="w1")
    w2 = sym.assign(v, sym.Variable("q"), name="w2")
    after = Graph(sym.Group([w2, w1]).outputs).apply("OrderMutation")
    deps = {n.name: [c.name for c in n.control_deps] for n in after.index.nodes}
    assert deps["w2"] == ["w1"] and deps["w1"] == []


def test_structure_against_expected():
    v, x = sym.Variable("v"), sym.Variable("x")
    r = sym.exp(v)
    w = sym.assign(v, x)
    after = Graph(sym.Group([w, r]).outputs).apply("OrderMutation")
    ve, xe = v.outputs[0], x.outputs[0]
    er = make_node("exp", [ve])
    ew = make_node("_assign", [ve._replace(version=1), xe], control_deps=[er])
    expected = Graph([NodeEntry(ew), NodeEntry(er)])
    graph_util.check_graph_equal(after, expected)
    assert [n.op.name for n in after.index.nodes if n.op] == ["exp", "_assign"]


def test_no_versions_is_a_no_op():
    x = sym.Variable("x")
    before = Graph((sym.exp(x) + x).outputs)
    after = before.apply("OrderMutation")
    assert after.outputs[0].node is before.outputs[0].node
    assert after.attrs["num_mutation_deps"] == 0


def test_assign_semantics_and_plan():
    v, x = sym.Variable("v"), sym.Variable("x")
    y = sym.assign(v, sym.tanh(x) * 2.0)
    feed = {"v": np.zeros(3, "float32"), "x": np.ones(3, "float32")}
    (out,) = run_graph(Graph(y.outputs), feed)
    np.testing.assert_allclose(out, np.tanh(1.0) * 2.0 * np.ones(3), rtol=1e-6)
    g = Graph(y.outputs).apply(["InferShape", "InferType", "PlanMemory"],
                               shape_inputs={"x": (3,), "v": (3,)},
                               dtype_inputs={"x": "float32", "v": "float32"})
    idx = g.index
    assign_out = idx.entry_id(y.outputs[0])
    assert g.attrs["storage_inplace_index"][assign_out] == 1  # computed in rhs's buffer


def test_two_writes_of_one_version_are_an_error():
    v, x = sym.Variable("v"), sym.Variable("x")
    ve = v.outputs[0]._replace(version=1)
    w1 = make_node("_assign", [ve, x.outputs[0]], name="w1")
    w2 = make_node("_assign", [ve, x.outputs[0]], name="w2")
    with pytest.raises(NNVMError, match="two nodes write version 1"):
        Graph([NodeEntry(w1), NodeEntry(w2)]).apply("OrderMutation")


def test_only_variables_can_be_assigned():
    x = sym.Variable("x")
    with pytest.raises(NNVMError, match="not a Variable"):
        sym.assign(sym.exp(x), x)
