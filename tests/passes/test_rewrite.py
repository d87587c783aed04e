"""nnvm.rewrite: pattern matching, fixed-point rewriting, substitution, attribute hygiene."""

import pytest

from _numerics import setup
from nnvm import sym
from nnvm.compiler.graph_util import check_graph_equal
from nnvm.errors import PassError
from nnvm.ir import Graph
from nnvm.ops.common import op
from nnvm.rewrite import P, Rule, X, match, rewrite, substitute, with_outputs


def test_match_binds_and_requires_consistent_bindings():
    x = sym.Variable("x")
    same = Graph((x + x).outputs).outputs[0]
    other = Graph((x + sym.Variable("y")).outputs).outputs[0]
    pat = P("broadcast_add", X("a"), X("a"))
    out = {}
    assert match(pat, same, out, {}) and out["a"].node.name == "x"
    assert not match(pat, other, {}, {})
    assert not match(P("no_such_op_anywhere"), same, {}, {})


def test_rules_apply_bottom_up_to_a_fixed_point():
    rules = [Rule("exp(log(x)) -> x", P("exp", P("log", X("x"))), lambda m: m["x"])]
    x = sym.Variable("x")
    g = Graph(sym.relu(sym.exp(sym.log(sym.exp(sym.log(x))))).outputs)
    check_graph_equal(rewrite(g, rules), Graph(sym.relu(sym.Variable("x")).outputs))


def test_rules_that_undo_each_other_are_stopped():
    rules = [Rule("a", P("relu", X("x")), lambda m: op("tanh", m["x"])),
             Rule("b", P("tanh", X("x")), lambda m: op("relu", m["x"]))]
    with pytest.raises(PassError, match="keeps firing"):
        rewrite(Graph(sym.relu(sym.Variable("x")).outputs), rules, max_steps=50)


def test_substitute_and_with_outputs_prune_stale_attrs():
    g, _, _ = setup(sym.relu(sym.Variable("x")) + sym.Variable("w", shape=(2,)), {"x": (2,)})
    idx = g.index
    add = idx.outputs[0][0]
    relu = idx.node_id(next(n for n in idx.nodes if n.op is not None and n.op.name == "relu"))
    new = with_outputs(g, substitute(g, {(add, 0): (relu, 0)}))
    assert [n.op.name for n in new.index.nodes if n.op] == ["relu"]
    assert "shape" not in new.attrs and set(new.attrs["params"]) == set()
    assert set(new.attrs["shape_inputs"]) == {"x"}
