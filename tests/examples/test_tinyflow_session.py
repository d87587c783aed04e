"""TinyFlow sessions: feeds, variable state, assign write-back, executor caching, targets."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

try:
    import tinyflow as tf
except ImportError:  # not installed: use the source tree (its ops register by hand)
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples",
                                    "tinyflow", "src"))
    import tinyflow as tf

import nnvm
from nnvm.errors import NNVMError


@pytest.fixture(autouse=True)
def fresh_graph():
    tf.reset_default_graph()


def test_tinyflow_is_an_nnvm_plugin_with_its_ops():
    from nnvm.op import get_op

    assert "tinyflow" in {p.name for p in nnvm.plugins()}
    for name in ("tf_random_normal", "tf_sparse_softmax_cross_entropy"):
        op = get_op(name)
        assert op.provider == "tinyflow"
        assert op.get_attr("FInferShape") and op.get_attr("FReference") and \
            op.get_attr("FGradient")


def test_placeholders_are_fed_and_arithmetic_runs():
    a = tf.placeholder(tf.float32, name="a")
    b = tf.placeholder(tf.float32, name="b")
    out = tf.matmul(a, b) * 2.0 + 1.0
    sess = tf.Session()
    x, y = np.arange(6.0).reshape(2, 3), np.ones((3, 4))
    got = sess.run(out, feed_dict={a: x, b: y})
    np.testing.assert_allclose(got, x @ y * 2 + 1, rtol=1e-6)
    assert got.dtype == np.float32  # the placeholder's dtype, not the fed float64


def test_variables_are_session_state_updated_by_assign():
    v = tf.Variable(tf.ones([3]), name="counter_state")
    inc = tf.assign(v, v + 1.0)
    sess = tf.Session()
    sess.run(tf.group(tf.assign(v, tf.ones([3]))))
    assert sess.run(inc).tolist() == [2.0, 2.0, 2.0]
    assert sess.run(inc).tolist() == [3.0, 3.0, 3.0]
    np.testing.assert_array_equal(sess.variables["counter_state"], [3.0, 3.0, 3.0])
    assert sess.run(v).tolist() == [3.0, 3.0, 3.0]
    other = tf.Session()  # state is per session
    with pytest.raises(tf.TinyFlowError, match="un-initialized"):
        other.run(inc)


def test_initialize_all_variables_and_nested_assigns_are_written_back():
    w = tf.Variable(tf.normal([2, 3], stdev=0.5), name="nest_w")
    m = tf.Variable(tf.zeros_like(w), name="nest_m")  # initialised from w's inferred shape
    m_new = tf.assign(m, m + w)  # only used inside the next update, never fetched
    step = tf.group(tf.assign(w, w - m_new))
    sess = tf.Session()
    sess.run(tf.initialize_all_variables())
    w0 = sess.variables["nest_w"].copy()
    assert sess.variables["nest_m"].shape == (2, 3) and not sess.variables["nest_m"].any()
    assert sess.run(step) is None
    np.testing.assert_allclose(sess.variables["nest_m"], w0)
    np.testing.assert_allclose(sess.variables["nest_w"], 0.0, atol=1e-7)


def test_fetch_structure_lists_and_operations():
    a = tf.placeholder(tf.float32, name="fa")
    s1, s2 = a + 1.0, a * 3.0
    sess = tf.Session()
    r1, r2, none = sess.run([s1, s2, tf.group(s1)], feed_dict={a: np.ones(2)})
    assert r1.tolist() == [2, 2] and r2.tolist() == [3, 3] and none is None
    assert sess.run(a, feed_dict={"fa": np.zeros(1)}).tolist() == [0]


def test_executors_are_cached_and_replanned_only_when_shapes_change():
    a = tf.placeholder(tf.float32, name="ca")
    out = tf.reduce_sum(a * a)
    sess = tf.Session()
    sess.run(out, feed_dict={a: np.ones((2, 3))})
    sess.run(out, feed_dict={a: np.full((2, 3), 2.0)})
    assert sess.num_builds == 1
    assert float(sess.run(out, feed_dict={a: np.ones((5,))})) == 5.0
    assert sess.num_builds == 2
    sess.run(out, feed_dict={a: np.ones((2, 3))})  # the first plan is still cached
    assert sess.num_builds == 2


def test_memory_planning_reduces_activation_bytes():
    x = tf.placeholder(tf.float32, name="mx")
    net = x
    for i in range(6):
        net = tf.nn.relu(tf.nn.linear(net, num_hidden=32, name=f"mfc{i}"))
    loss = tf.reduce_mean(net)
    step = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    sess = tf.Session()
    sess.run([tf.assign(v, tf.normal(s, 0.1)) for v, _, s in
              tf.infer_variable_shapes(loss, {x: (16, 32)})])
    stats = sess.stats(step, {x: np.ones((16, 32))})
    assert stats["memory_planned"]
    assert stats["activation_bytes"] < stats["activation_bytes_naive"] / 2


def test_errors_name_the_problem():
    p = tf.placeholder(tf.float32, name="unfed")
    sess = tf.Session()
    with pytest.raises(tf.TinyFlowError, match="placeholder 'unfed'.*feed_dict"):
        sess.run(p + 1.0)
    with pytest.raises(tf.TinyFlowError, match="must be a Symbol"):
        sess.run(3)
    with pytest.raises(tf.TinyFlowError, match="not a Variable"):
        tf.assign(p, p)
    with pytest.raises(tf.TinyFlowError, match="init must be a Symbol"):
        tf.Variable(np.zeros(3))
    assert issubclass(tf.TinyFlowError, NNVMError)


def test_unknown_or_unavailable_target_raises_the_build_error():
    with pytest.raises(NNVMError, match="unknown target 'nosuch'"):
        tf.Session(target="nosuch")
    with pytest.raises(NNVMError, match="unknown option"):
        tf.Session(target="reference -bogus=1")


def test_random_normal_is_reproducible_with_the_right_moments():
    tf.set_random_seed(7)
    a = tf.normal([20000], stdev=2.0, mean=1.0)
    tf.set_random_seed(7)
    b = tf.normal([20000], stdev=2.0, mean=1.0)
    sess = tf.Session()
    va, vb = sess.run([a, b])
    np.testing.assert_array_equal(va, vb)
    assert va.dtype == np.float32
    assert abs(va.mean() - 1.0) < 0.05 and abs(va.std() - 2.0) < 0.05


def _llvm_reason():
    try:
        tf.Session(target="llvm")
    except NNVMError as exc:
        return str(exc)
    return None


@pytest.mark.skipif(_llvm_reason() is not None, reason=f"llvm target: {_llvm_reason()}")
def test_llvm_session_matches_reference():
    x = tf.placeholder(tf.float32, name="lx")
    label = tf.placeholder(tf.int64, name="llabel")
    logits = tf.nn.linear(tf.nn.relu(tf.nn.linear(x, num_hidden=16, name="lfc1")),
                          num_hidden=4, name="lfc2")
    loss = tf.nn.mean_sparse_softmax_cross_entropy_with_logits(logits, label)
    step = tf.train.AdamOptimizer(0.01).minimize(loss)
    rng = np.random.default_rng(0)
    xs, ys = rng.normal(size=(8, 5)).astype(np.float32), rng.integers(0, 4, 8)
    results = []
    for target in ("reference", "llvm"):
        sess = tf.Session(target=target)
        tf.set_random_seed(3)
        sess.run([tf.assign(v, tf.normal(s, 0.3)) for v, _, s in
                  tf.infer_variable_shapes(loss, {x: xs.shape})])
        sess.run(tf.initialize_all_variables())
        losses = [float(sess.run([loss, step], {x: xs, label: ys})[0]) for _ in range(5)]
        results.append((losses, sess.variables["lfc1_weight"].copy()))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-4)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-4, atol=1e-5)
