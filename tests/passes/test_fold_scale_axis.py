"""FoldScaleAxis: per-channel scales folded into conv2d / dense weights, both directions."""

import numpy as np

from _numerics import assert_same_numerics, op_names, setup
from nnvm import sym
from nnvm.compiler.graph_util import check_graph_equal
from nnvm.ir import Graph

V = sym.Variable


def _fold(g):
    return g.apply(["FoldScaleAxis", "PrecomputePrune", "InferShape", "InferType"])


def test_backward_scale_after_conv_and_bias_add():
    x = V("x")
    y = sym.conv2d(x, channels=4, kernel_size=(3, 3), padding=(1, 1), name="c")
    y = sym.broadcast_add(y, V("shift", shape=(4, 1, 1)))
    y = sym.relu(sym.broadcast_mul(y, V("scale", shape=(4, 1, 1))))
    g, _, feed = setup(y, {"x": (1, 3, 6, 6)})
    after = _fold(g)
    expected = sym.relu(sym.broadcast_add(
        sym.conv2d(V("x"), V("w2"), V("b2"), channels=4, kernel_size=(3, 3), padding=(1, 1)),
        V("shift2")))
    check_graph_equal(after, Graph(expected.outputs))
    assert_same_numerics(g, after, feed)


def test_forward_scale_before_conv_and_depthwise():
    x = V("x")
    s = V("scale", shape=(3, 1, 1))
    y = sym.conv2d(sym.broadcast_mul(x, s), channels=5, kernel_size=(3, 3), padding=(1, 1),
                   use_bias=False, name="c")
    z = sym.conv2d(sym.broadcast_mul(sym.relu(x), s), channels=3, groups=3,
                   kernel_size=(3, 3), padding=(1, 1), name="dw")
    g, _, feed = setup(sym.Group([y, z]), {"x": (2, 3, 5, 5)})
    after = _fold(g)
    assert "broadcast_mul" not in op_names(after)
    assert_same_numerics(g, after, feed)


def test_dense_backward_and_forward():
    x = V("x")
    y = sym.dense(x, units=6, name="fc1") * V("s1", shape=(6,))
    y = sym.dense(sym.broadcast_mul(sym.relu(y), V("s2", shape=(1, 6))), units=2, name="fc2")
    g, _, feed = setup(y, {"x": (3, 4)})
    after = _fold(g)
    assert op_names(after) == ["dense", "relu", "dense"]
    assert_same_numerics(g, after, feed)


def test_non_constant_or_shared_scales_are_kept():
    x = V("x")
    c = sym.conv2d(x, channels=2, kernel_size=(1, 1), name="c")
    act = sym.relu(x)  # an activation, not a param: cannot go into the weight
    y1 = sym.broadcast_mul(c, sym.mean(act, axis=(0, 2, 3), keepdims=True))
    c2 = sym.conv2d(x, channels=2, kernel_size=(1, 1), name="c2")
    y2 = sym.broadcast_mul(c2, V("s", shape=(2, 1, 1))) + c2  # conv output read twice
    g, _, feed = setup(sym.Group([y1, y2]), {"x": (1, 2, 3, 3)})
    after = _fold(g)
    assert op_names(after).count("broadcast_mul") == 2
    assert_same_numerics(g, after, feed)


def test_conv_bn_relu_model_folds_at_level_3():
    import nnvm
    from nnvm.testing.models import small_cnn

    net, params, shapes = small_cnn()
    rng = np.random.default_rng(0)
    feed = {"data": rng.standard_normal(shapes["data"]).astype("float32")}
    l2 = nnvm.compiler.build(net, target="reference", shape=shapes, params=params, opt_level=2)
    l3 = nnvm.compiler.build(net, target="reference", shape=shapes, params=params, opt_level=3)
    assert op_names(l3.graph).count("broadcast_mul") == 0 < op_names(l2.graph).count(
        "broadcast_mul")
    np.testing.assert_allclose(l3.run(**feed)[0], l2.run(**feed)[0], rtol=1e-4, atol=1e-5)
