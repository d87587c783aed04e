"""Every tf.nn op's gradient (through NNVM's Gradient pass) against central differences.

Each check builds ``loss = sum(w * op(inputs))`` with a fixed random ``w`` in float64, takes
``tf.gradients(loss, inputs)`` and compares with central differences of the same Session on
a sample of coordinates. Also: the second-order rule of TinyFlow's fused cross-entropy
backward op, and the sublinear-memory option giving the same gradients.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

try:
    import tinyflow as tf
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples",
                                    "tinyflow", "src"))
    import tinyflow as tf

from nnvm import symbol as sym
from nnvm.errors import NNVMError

F64 = "float64"


@pytest.fixture(autouse=True)
def fresh_graph():
    tf.reset_default_graph()


def check_grad(build, shapes, dtypes=None, fixed=None, eps=1e-6, samples=24, rtol=1e-4,
               atol=1e-6, seed=0):
    """``build(*placeholders) -> Symbol``; differentiates w.r.t. the float inputs."""
    rng = np.random.default_rng(seed)
    dtypes = dtypes or [F64] * len(shapes)
    phs = [tf.placeholder(d, name=f"in{i}") for i, d in enumerate(dtypes)]
    values = [fixed[i] if fixed and i in fixed else rng.normal(size=s).astype(d)
              for i, (s, d) in enumerate(zip(shapes, dtypes))]
    out = build(*phs)
    sess = tf.Session()
    y = sess.run(out, feed_dict=dict(zip(phs, values)))
    w = tf.placeholder(F64, name="w")
    weights = rng.normal(size=np.shape(y))
    loss = tf.reduce_sum(out * w)
    wrt = [i for i, d in enumerate(dtypes) if d.startswith("float") and not (fixed and i in fixed)]
    grads = sess.run(tf.gradients(loss, [phs[i] for i in wrt]),
                     feed_dict={**dict(zip(phs, values)), w: weights})

    def f(vals):
        return float(sess.run(loss, feed_dict={**dict(zip(phs, vals)), w: weights}))

    for g, i in zip(grads, wrt):
        assert g.shape == values[i].shape
        flat = values[i].size
        for k in rng.choice(flat, size=min(samples, flat), replace=False):
            plus = [v.copy() for v in values]
            minus = [v.copy() for v in values]
            plus[i].reshape(-1)[k] += eps
            minus[i].reshape(-1)[k] -= eps
            numeric = (f(plus) - f(minus)) / (2 * eps)
            analytic = g.reshape(-1)[k]
            assert abs(numeric - analytic) <= atol + rtol * abs(numeric), \
                f"input {i}, coordinate {k}: numeric {numeric} vs analytic {analytic}"


@pytest.mark.parametrize("padding,strides,no_bias", [("SAME", 1, False), ("VALID", 2, True),
                                                      ("SAME", 2, False)])
def test_conv2d(padding, strides, no_bias):
    shapes = [(2, 3, 7, 7), (4, 3, 3, 3)] + ([] if no_bias else [(4,)])

    def build(x, w, *b):
        return tf.nn.conv2d(x, w, bias=b[0] if b else None, num_filter=4, ksize=[1, 3, 3, 1],
                            strides=[1, strides, strides, 1], padding=padding)
    check_grad(build, shapes)


@pytest.mark.parametrize("pool", ["max_pool", "avg_pool"])
@pytest.mark.parametrize("padding", ["VALID", "SAME"])
def test_pools(pool, padding):
    check_grad(lambda x: getattr(tf.nn, pool)(x, ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1],
                                              padding=padding), [(2, 2, 7, 7)])


@pytest.mark.parametrize("name", ["relu", "softmax", "log_softmax", "tanh", "sigmoid",
                                  "flatten_layer"])
def test_unary(name):
    fn = getattr(tf.nn, name)
    check_grad(lambda x: fn(x), [(3, 4, 5)] if name == "flatten_layer" else [(4, 6)])


def test_linear_with_and_without_bias():
    check_grad(lambda x, w, b: tf.nn.linear(x, 5, weight=w, bias=b), [(3, 4), (5, 4), (5,)])
    check_grad(lambda x, w: tf.nn.linear(x, 5, weight=w, no_bias=True), [(3, 4), (5, 4)])


def test_batch_normalization_with_batch_statistics():
    check_grad(lambda x, g, b: tf.nn.batch_normalization(x, scale=g, offset=b),
               [(4, 3, 2, 2), (3,), (3,)], rtol=1e-3, atol=1e-5)


def test_batch_normalization_with_given_statistics():
    var = np.abs(np.random.default_rng(1).normal(size=3)) + 0.5
    check_grad(lambda x, m, v, g, b: tf.nn.batch_normalization(x, m, v, b, g),
               [(4, 3), (3,), (3,), (3,), (3,)], fixed={2: var})


def test_softmax_cross_entropy_with_logits():
    labels = np.random.default_rng(2).dirichlet(np.ones(5), size=4)
    check_grad(lambda z, y: tf.nn.softmax_cross_entropy_with_logits(logits=z, labels=y),
               [(4, 5), (4, 5)], fixed={1: labels})


@pytest.mark.parametrize("label_dtype", ["int64", "int32", "float32"])
def test_sparse_softmax_cross_entropy_with_logits(label_dtype):
    labels = np.array([0, 4, 2, 2], dtype=label_dtype)
    check_grad(lambda z, y: tf.nn.sparse_softmax_cross_entropy_with_logits(logits=z, labels=y),
               [(4, 5), (4,)], dtypes=[F64, label_dtype], fixed={1: labels})
    check_grad(lambda z, y: tf.nn.mean_sparse_softmax_cross_entropy_with_logits(z, y),
               [(4, 5), (4,)], dtypes=[F64, label_dtype], fixed={1: labels})


def test_sparse_cross_entropy_matches_the_dense_form():
    z = np.random.default_rng(3).normal(size=(6, 4)).astype(np.float32)
    y = np.array([0, 1, 2, 3, 1, 0])
    logits, lab, onehot = (tf.placeholder(tf.float32), tf.placeholder(tf.int64),
                           tf.placeholder(tf.float32))
    sess = tf.Session()
    sparse, dense = sess.run([tf.nn.sparse_softmax_cross_entropy_with_logits(logits, lab),
                              tf.nn.softmax_cross_entropy_with_logits(logits, onehot)],
                             {logits: z, lab: y, onehot: np.eye(4)[y]})
    np.testing.assert_allclose(sparse, dense, rtol=1e-5)


def test_sparse_cross_entropy_rejects_out_of_range_labels():
    logits, lab = tf.placeholder(tf.float32), tf.placeholder(tf.int64)
    with pytest.raises(NNVMError, match="label 7 is out of range"):
        tf.Session().run(tf.nn.sparse_softmax_cross_entropy_with_logits(logits, lab),
                         {logits: np.zeros((2, 3)), lab: np.array([0, 7])})


def test_sparse_cross_entropy_backward_op_second_order():
    labels = np.array([1, 0, 3], dtype=np.int64)
    check_grad(lambda og, z, y: sym._tf_sparse_softmax_cross_entropy_backward(og, z, y),
               [(3,), (3, 4), (3,)], dtypes=[F64, F64, "int64"], fixed={2: labels})


def test_sublinear_memory_gives_the_same_gradients():
    x = tf.placeholder(tf.float32, name="sx")
    net = x
    for i in range(8):
        net = tf.tanh(tf.nn.linear(net, num_hidden=8, name=f"s{i}"))
    loss = tf.reduce_sum(net)
    variables = tf.trainable_variables(loss)
    plain = tf.gradients(loss, variables)
    mirrored = tf.gradients(loss, variables, mirror="sublinear")
    names = {n.name for g in mirrored for n in g._nodes()}
    assert any(n.endswith("_mirror") for n in names), "no forward node was recomputed"
    sess = tf.Session()
    sess.run([tf.assign(v, tf.normal(s, 0.4)) for v, _, s in
              tf.infer_variable_shapes(loss, {x: (4, 8)})])
    feed = {x: np.random.default_rng(0).normal(size=(4, 8))}
    for a, b in zip(sess.run(plain, feed), sess.run(mirrored, feed)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
