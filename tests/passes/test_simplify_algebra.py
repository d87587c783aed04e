"""SimplifyAlgebra: each identity of the rule table, structurally and numerically."""

import pytest

from _numerics import assert_same_numerics, op_names, setup
from nnvm import sym
from nnvm.compiler.graph_util import check_graph_equal
from nnvm.ir import Graph
from nnvm_passes.simplify_algebra import RULES

X = sym.Variable


CASES = {
    "no-op scalar arithmetic": (lambda: sym.relu(sym.copy(X("x")) * 1.0 / 1.0 + 0.0 - 0.0),
                                lambda: sym.relu(X("x")), (2, 3)),
    "double negation": (lambda: sym.exp(-(-X("x"))), lambda: sym.exp(X("x")), (4,)),
    "transposes cancel": (lambda: sym.relu(sym.transpose(sym.transpose(X("x"),
                                                                        axes=(1, 2, 0)),
                                                         axes=(2, 0, 1))),
                          lambda: sym.relu(X("x")), (2, 3, 4)),
    "transposes compose": (lambda: sym.transpose(sym.transpose(X("x"), axes=(1, 0, 2)),
                                                 axes=(0, 2, 1)),
                           lambda: sym.transpose(X("x"), axes=(1, 2, 0)), (2, 3, 4)),
    "reshapes merge": (lambda: sym.reshape(sym.reshape(X("x"), shape=(6, 4)), shape=(3, 8)),
                       lambda: sym.reshape(X("x"), shape=(3, 8)), (2, 3, 4)),
    "reshape to own shape": (lambda: sym.relu(sym.reshape(X("x"), shape=(2, -1))),
                             lambda: sym.relu(X("x")), (2, 3)),
    "lossless cast chain": (lambda: sym.cast(sym.cast(X("x"), dtype="float64"),
                                             dtype="float16"),
                            lambda: sym.cast(X("x"), dtype="float16"), (3,)),
    "cast to own dtype": (lambda: sym.relu(sym.cast(X("x"), dtype="float32")),
                          lambda: sym.relu(X("x")), (3,)),
    "split then concatenate": (lambda: sym.relu(sym.concatenate(
        *sym.split(X("x"), indices_or_sections=(1, 3), axis=1), axis=1)),
        lambda: sym.relu(X("x")), (2, 5)),
    "dropout": (lambda: sym.dropout(X("x")) + 1.0, lambda: X("x") + 1.0, (2,)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_rule(case):
    before, expected, shape = CASES[case]
    g, _, feed = setup(before(), {"x": shape})
    after = g.apply("SimplifyAlgebra")
    check_graph_equal(after, Graph(expected().outputs))
    assert_same_numerics(g, after, feed, rtol=1e-3 if "float16" in str(expected()) else 1e-6)


@pytest.mark.parametrize("before", [
    lambda: sym.cast(sym.cast(X("x"), dtype="int32"), dtype="float32"),  # lossy: must stay
    lambda: sym.concatenate(*sym.split(X("x"), indices_or_sections=2, axis=1), axis=0),
    lambda: X("x") * 2.0,
])
def test_non_identities_are_kept(before):
    g, _, feed = setup(before(), {"x": (2, 4)})
    after = g.apply("SimplifyAlgebra")
    assert op_names(after) == op_names(g)
    assert_same_numerics(g, after, feed)


def test_rules_are_a_table_of_named_rows():
    assert len(RULES) >= 10 and len({r.name for r in RULES}) == len(RULES)
