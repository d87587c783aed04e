"""TinyFlow optimisers (graph rewrites: gradients + grouped assigns) and shape inference."""

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


@pytest.fixture(autouse=True)
def fresh_graph():
    tf.reset_default_graph()


def _regression(rng):
    xs = rng.normal(size=(64, 3)).astype(np.float32)
    true_w = np.array([[1.5], [-2.0], [0.5]], dtype=np.float32)
    ys = xs @ true_w + 0.3 + 0.01 * rng.normal(size=(64, 1)).astype(np.float32)
    return xs, ys


def test_minimize_is_a_group_of_assigns_over_the_variables():
    x = tf.placeholder(tf.float32)
    w = tf.Variable(tf.zeros([3, 1]), name="gw")
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w)))
    step = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    assert isinstance(step, tf.Operation)
    assert [e.node.op.name for e in step.outputs] == ["_assign"]
    assert step.outputs[0].node.inputs[0].node.name == "gw"
    assert [v.name for v in tf.trainable_variables(loss)] == ["gw"]  # placeholder excluded


def test_gradient_descent_step_matches_numpy():
    rng = np.random.default_rng(0)
    xs, ys = _regression(rng)
    x, y = tf.placeholder(tf.float32), tf.placeholder(tf.float32)
    w = tf.Variable(tf.normal([3, 1], 0.1), name="sgd_w")
    b = tf.Variable(tf.zeros([1]), name="sgd_b")
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
    step = tf.train.GradientDescentOptimizer(0.2).minimize(loss)
    sess = tf.Session()
    sess.run(tf.initialize_all_variables())
    w0, b0 = sess.variables["sgd_w"].copy(), sess.variables["sgd_b"].copy()
    sess.run(step, {x: xs, y: ys})
    r = xs @ w0 + b0 - ys
    np.testing.assert_allclose(sess.variables["sgd_w"], w0 - 0.2 * 2 * xs.T @ r / len(xs),
                               rtol=1e-5)
    np.testing.assert_allclose(sess.variables["sgd_b"], b0 - 0.2 * 2 * r.mean(0), rtol=1e-5)


def test_gradient_descent_converges_to_least_squares():
    rng = np.random.default_rng(1)
    xs, ys = _regression(rng)
    x, y = tf.placeholder(tf.float32), tf.placeholder(tf.float32)
    w = tf.Variable(tf.zeros([3, 1]), name="ls_w")
    b = tf.Variable(tf.zeros([1]), name="ls_b")
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
    step = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    sess = tf.Session()
    sess.run(tf.initialize_all_variables())
    for _ in range(300):
        sess.run(step, {x: xs, y: ys})
    sol = np.linalg.lstsq(np.hstack([xs, np.ones((64, 1))]), ys, rcond=None)[0]
    np.testing.assert_allclose(sess.variables["ls_w"], sol[:3], atol=1e-3)
    np.testing.assert_allclose(sess.variables["ls_b"], sol[3], atol=1e-3)
    assert sess.num_builds == 2  # the initialiser and the step, each planned once


def test_adam_matches_a_numpy_adam():
    rng = np.random.default_rng(2)
    xs, ys = _regression(rng)
    x, y = tf.placeholder(tf.float32), tf.placeholder(tf.float32)
    w = tf.Variable(tf.normal([3, 1], 0.5), name="adam_w")
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
    lr, b1, b2, eps = 0.05, 0.9, 0.999, 1e-8
    step = tf.train.AdamOptimizer(lr, b1, b2, eps).minimize(loss)
    sess = tf.Session()
    sess.run(tf.initialize_all_variables())
    assert {"Adam_t", "Adam_m_adam_w", "Adam_v_adam_w"} <= set(sess.variables)
    wn = sess.variables["adam_w"].astype(np.float64)
    m = np.zeros_like(wn)
    v = np.zeros_like(wn)
    for t in range(1, 6):
        sess.run(step, {x: xs, y: ys})
        g = 2 * xs.T @ (xs @ wn - ys) / len(xs)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        wn = wn - lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t) * m / (np.sqrt(v) + eps)
        np.testing.assert_allclose(sess.variables["adam_w"], wn, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(sess.variables["Adam_t"], [5.0])


def test_sublinear_memory_training_follows_the_same_trajectory():
    rng = np.random.default_rng(3)
    xs = rng.normal(size=(16, 8)).astype(np.float32)
    labels = rng.integers(0, 4, 16)
    runs = []
    for sublinear in (False, True):
        tf.reset_default_graph()
        tf.set_random_seed(5)
        x, lab = tf.placeholder(tf.float32, name="x"), tf.placeholder(tf.int64, name="lab")
        net = x
        for i in range(6):
            net = tf.tanh(tf.nn.linear(net, num_hidden=8, name=f"d{i}"))
        loss = tf.nn.mean_sparse_softmax_cross_entropy_with_logits(
            tf.nn.linear(net, num_hidden=4, name="head"), lab)
        step = tf.train.GradientDescentOptimizer(0.5, sublinear_memory=sublinear)\
            .minimize(loss)
        sess = tf.Session()
        sess.run([tf.assign(v, tf.normal(s, 0.5)) for v, _, s in
                  tf.infer_variable_shapes(loss, {x: xs.shape})])
        runs.append([float(sess.run([loss, step], {x: xs, lab: labels})[0])
                     for _ in range(4)])
    np.testing.assert_allclose(runs[0], runs[1], rtol=1e-5)
    assert runs[0][-1] < runs[0][0]


def test_infer_variable_shapes_from_the_data_shape():
    x = tf.placeholder(tf.float32, name="img")
    net = tf.nn.conv2d(x, num_filter=6, ksize=[1, 5, 5, 1], padding="VALID", no_bias=False,
                       name="c1")
    net = tf.nn.max_pool(tf.nn.relu(net), ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1])
    net = tf.nn.batch_normalization(net, name="bn")
    net = tf.nn.linear(tf.nn.flatten_layer(net), num_hidden=10, name="fc")
    shapes = {name: shape for _, name, shape in tf.infer_variable_shapes(net, {x: (7, 3, 12, 12)})}
    assert shapes == {"c1_weight": (6, 3, 5, 5), "c1_bias": (6,), "bn_gamma": (6,),
                      "bn_beta": (6,), "fc_weight": (10, 96), "fc_bias": (10,)}
    assert "img" not in shapes  # placeholders are fed, not inferred


def test_infer_variable_shapes_names_what_it_cannot_infer():
    x = tf.placeholder(tf.float32, name="px")
    free = tf.Variable(name="free_var")
    with pytest.raises(tf.TinyFlowError, match="free_var"):
        list(tf.infer_variable_shapes(tf.nn.linear(x, 3) + free * 2.0, {x: (2, 4)}))
