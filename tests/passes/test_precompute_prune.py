"""PrecomputePrune: param-only subgraphs are computed at build time and become params."""

import numpy as np

from _numerics import assert_same_numerics, op_names, setup
from nnvm import sym
from nnvm.compiler.graph_util import check_graph_equal
from nnvm.ir import Graph


def test_param_only_subgraph_becomes_one_param():
    x, w = sym.Variable("x"), sym.Variable("w")
    before = sym.dense(x, sym.exp(w * 2.0), use_bias=False, units=3, name="fc")
    g, params, feed = setup(before, {"x": (2, 4)})
    after = g.apply("PrecomputePrune")
    expected = sym.dense(sym.Variable("x"), sym.Variable("fc_weight_folded"), use_bias=False,
                         units=3, name="fc")
    check_graph_equal(after, Graph(expected.outputs))
    new = after.attrs["params"]
    assert set(new) == {"fc_weight_folded"}  # w is no longer referenced: dropped
    np.testing.assert_allclose(new["fc_weight_folded"], np.exp(params["w"] * 2.0), rtol=1e-6)
    assert after.attrs["shape_inputs"]["fc_weight_folded"] == (3, 4)
    assert_same_numerics(g, after, feed)


def test_input_free_constants_fold_and_inputs_stay():
    x = sym.Variable("x")
    y = x + sym.full(shape=(2, 3), fill_value=2.5) * sym.ones(shape=(2, 3))
    g, _, feed = setup(y, {"x": (2, 3)})
    after = g.apply("PrecomputePrune")
    assert op_names(after) == ["broadcast_add"]
    assert_same_numerics(g, after, feed)


def test_nothing_to_fold_returns_the_same_graph():
    g, _, _ = setup(sym.relu(sym.Variable("x")), {"x": (2,)})
    assert g.apply("PrecomputePrune") is g


def test_build_at_level_2_shrinks_params_and_keeps_results():
    import nnvm

    x, w = sym.Variable("x"), sym.Variable("w", shape=(3, 3))
    net = sym.relu(x * sym.sqrt(w + 1.0))
    g, params, feed = setup(net, {"x": (3, 3)}, positive=("w",))
    outs = []
    for level in (0, 2):
        lib = nnvm.compiler.build(net, target="reference", shape={"x": (3, 3)}, params=params,
                                  opt_level=level)
        outs.append(lib.run(**feed)[0])
        nodes = lib.stats()["num_nodes"]
    assert nodes == 2  # broadcast_mul + relu; sqrt(w + 1) is a param now
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-6)
