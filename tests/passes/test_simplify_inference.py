"""SimplifyInference: batch_norm -> scale and shift, dropout -> identity."""

import numpy as np

from _numerics import assert_same_numerics, op_names, setup
from nnvm import sym
from nnvm.compiler.graph_util import check_graph_equal
from nnvm.ir import Graph


def _bn_net(**bn_attrs):
    x = sym.Variable("x")
    y = sym.batch_norm(x, sym.Variable("gamma"), sym.Variable("b"), sym.Variable("m"),
                       sym.Variable("var"), name="bn", **bn_attrs)
    return sym.dropout(y, rate=0.3)


def _expected(eps=1e-5):
    x, g, b, m, v = (sym.Variable(n) for n in ("x", "gamma", "b", "m", "var"))
    scale = sym.elemwise_mul(sym.__rdiv_scalar__(sym.sqrt(sym.__add_scalar__(v, scalar=eps)),
                                                 scalar=1.0), g)
    shift = sym.elemwise_add(sym.elemwise_mul(sym.negative(m), scale), b)
    y = sym.broadcast_mul(x, sym.expand_dims(scale, axis=1, num_newaxis=2))
    return sym.broadcast_add(y, sym.expand_dims(shift, axis=1, num_newaxis=2))


def test_batch_norm_becomes_scale_and_shift_structurally():
    g, _, feed = setup(_bn_net(epsilon=1e-3), {"x": (2, 3, 4, 5)})
    after = g.apply("SimplifyInference")
    check_graph_equal(after, Graph(_expected(1e-3).outputs))
    assert_same_numerics(g, after, feed)


def test_channel_last_axis_and_no_center_no_scale():
    g, _, feed = setup(_bn_net(axis=-1, center=False, scale=False), {"x": (2, 4, 3)})
    after = g.apply("SimplifyInference")
    names = op_names(after)
    assert "batch_norm" not in names and "dropout" not in names
    assert "expand_dims" not in names  # channel is last: the vectors broadcast as they are
    assert "elemwise_add" not in names  # center=False: no beta
    assert_same_numerics(g, after, feed)


def test_batch_norm_with_used_statistics_is_kept():
    x = sym.Variable("x")
    bn = sym.batch_norm(x, name="bn")
    from nnvm.ir import NodeEntry
    node = bn.outputs[0].node
    g = Graph([NodeEntry(node, 0), NodeEntry(node, 1)])
    g, _, _ = setup(g, {"x": (1, 2, 3, 3)})
    assert "batch_norm" in op_names(g.apply("SimplifyInference"))


def test_runs_in_build_at_opt_level_0(rng):
    import nnvm

    net = _bn_net()
    g, params, feed = setup(net, {"x": (1, 3, 2, 2)})
    lib = nnvm.compiler.build(net, target="reference", shape={"x": (1, 3, 2, 2)},
                              params=params, opt_level=0)
    assert "batch_norm" not in op_names(lib.graph)
    np.testing.assert_allclose(lib.run(**feed)[0], _run_ref(g, feed), rtol=1e-5)


def _run_ref(g, feed):
    from _numerics import run

    return run(g, feed)[0]
