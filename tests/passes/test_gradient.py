"""Gradient pass: structure of the gradient graph, finite-difference checks, error messages."""

from __future__ import annotations

import numpy as np
import pytest

from nnvm import sym
from nnvm.compiler import graph_util
from nnvm.errors import NNVMError
from nnvm.interpreter import run_graph
from nnvm.ir import Graph, NodeEntry, make_node
from nnvm_passes.gradient import GradientError


def _grad_graph(y, xs, **attrs) -> Graph:
    return Graph(y.outputs, {"grad_ys": y.outputs,
                             "grad_xs": [e for x in xs for e in x.outputs], **attrs}
                 ).apply("Gradient")


def _numeric_grad(y, feed: dict, name: str, eps: float = 1e-6) -> np.ndarray:
    """Central differences of sum(y) with respect to input ``name`` (float64)."""
    g = Graph(y.outputs)
    base = feed[name]
    out = np.zeros_like(base)
    for i in np.ndindex(base.shape):
        vals = []
        for sign in (1, -1):
            x = base.copy()
            x[i] += sign * eps
            vals.append(sum(float(np.sum(r)) for r in run_graph(g, {**feed, name: x})))
        out[i] = (vals[0] - vals[1]) / (2 * eps)
    return out


def _check_fd(y, feed: dict, wrt: list[str], rtol=1e-5, atol=1e-6):
    variables = {v.name: v for v in y.list_input_variables()}
    grads = graph_util.gradients(y, [variables[n] for n in wrt])
    got = run_graph(Graph([e for g in grads for e in g.outputs]), feed)
    for name, g in zip(wrt, got):
        np.testing.assert_allclose(g, _numeric_grad(y, feed, name), rtol=rtol, atol=atol,
                                   err_msg=f"d/d{name}")


def _composites():
    x, w, b = sym.Variable("x"), sym.Variable("w"), sym.Variable("b")
    return {
        "tanh_mul_square": (sym.tanh(x * w) + x * x, ["x", "w"]),
        "sigmoid_div_exp": (sym.sigmoid(x) / (sym.exp(w) + 1.0), ["x", "w"]),
        "broadcast_bias": (sym.relu(x * w + b) * 3.0 - sym.sqrt(x * x + 1.0), ["x", "w", "b"]),
        "reuse_four_times": (x * x * x + sym.log(x * x + 2.0), ["x"]),
        "pow_and_neg": ((-x) ** 2.0 + sym.abs(w) * x, ["x", "w"]),
    }


@pytest.mark.parametrize("case", sorted(_composites()))
def test_composite_gradients_match_finite_differences(case, rng):
    y, wrt = _composites()[case]
    feed = {"x": rng.uniform(0.5, 1.5, (3, 4)), "w": rng.uniform(-1, 1, (3, 4)),
            "b": rng.uniform(-1, 1, (4,))}
    feed = {k: v for k, v in feed.items() if k in y.list_input_names()}
    _check_fd(y, feed, wrt)


def test_dense_softmax_cross_entropy_matches_finite_differences(rng):
    x, label = sym.Variable("x"), sym.Variable("label")
    h = sym.relu(sym.dense(x, units=5, name="fc1"))
    logits = sym.dense(h, units=3, name="fc2")
    loss = sym.mean(sym.sum(label * sym.log_softmax(logits), axis=1)) * -1.0
    feed = {"x": rng.standard_normal((4, 6)), "label": np.eye(3)[[0, 2, 1, 2]],
            "fc1_weight": rng.standard_normal((5, 6)) * 0.5, "fc1_bias": rng.standard_normal(5),
            "fc2_weight": rng.standard_normal((3, 5)) * 0.5, "fc2_bias": rng.standard_normal(3)}
    _check_fd(loss, feed, ["fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias", "x"])


def test_gradient_graph_structure_matches_expected():
    x, w = sym.Variable("x"), sym.Variable("w")
    y = sym.elemwise_mul(x, w)
    got = _grad_graph(y, [x, w])
    xn, wn = x.outputs[0], w.outputs[0]
    y_e = NodeEntry(make_node("elemwise_mul", [xn, wn]))
    head = NodeEntry(make_node("ones_like", [y_e]))
    gx = NodeEntry(make_node("elemwise_mul", [head, wn]))
    gw = NodeEntry(make_node("elemwise_mul", [head, xn]))
    graph_util.check_graph_equal(got, Graph([gx, gw]))


def test_several_uses_aggregate_with_one_elemwise_sum():
    x = sym.Variable("x")
    y = sym.elemwise_add(sym.exp(x), sym.elemwise_add(sym.tanh(x), sym.relu(x)))
    g = _grad_graph(y, [x])
    (out,) = g.outputs
    assert out.node.op.name == "elemwise_sum"
    assert out.node.attrs["num_args"] == 3
    sums = [n for n in g.index.nodes if n.op is not None and n.op.name == "elemwise_sum"]
    assert len(sums) == 1


def test_head_gradient_is_used():
    x = sym.Variable("x")
    y = sym.exp(x)
    head = sym.Variable("head")
    (gx,) = graph_util.gradients(y, [x], grad_ys=[head])
    a, h = np.array([0.1, 0.5, 1.0]), np.array([2.0, -1.0, 0.5])
    (got,) = run_graph(Graph(gx.outputs), {"x": a, "head": h})
    np.testing.assert_allclose(got, np.exp(a) * h)


def test_blocked_path_gives_zeros_like():
    x, w = sym.Variable("x"), sym.Variable("w")
    y = sym.block_grad(x * w) + w
    gx, gw = graph_util.gradients(y, [x, w])
    assert gx.outputs[0].node.op.name == "zeros_like"
    a = np.ones((2, 2), dtype="float32")
    got = run_graph(Graph(gx.outputs + gw.outputs), {"x": a, "w": 2 * a})
    np.testing.assert_array_equal(got[0], np.zeros_like(a))
    np.testing.assert_array_equal(got[1], np.ones_like(a))


def test_x_equal_to_y_has_unit_gradient():
    x = sym.Variable("x")
    (g,) = graph_util.gradients(x, [x])
    (got,) = run_graph(Graph(g.outputs), {"x": np.arange(3.0)})
    np.testing.assert_array_equal(got, np.ones(3))


def test_inner_entry_as_x():
    x = sym.Variable("x")
    h = sym.tanh(x)
    y = sym.exp(h) * 2.0
    (gh,) = graph_util.gradients(y, [h])
    a = np.array([0.2, -0.4])
    (got,) = run_graph(Graph(gh.outputs), {"x": a})
    np.testing.assert_allclose(got, 2 * np.exp(np.tanh(a)))


def test_unreachable_x_is_an_error_naming_it():
    x, z = sym.Variable("x"), sym.Variable("z")
    with pytest.raises(GradientError, match=r"Cannot differentiate with respect to the 1-th "
                                            r"variable 'z'"):
        graph_util.gradients(sym.exp(x), [x, z])


def test_non_differentiable_op_on_path_is_an_error_naming_the_node():
    x, w = sym.Variable("x"), sym.Variable("w")
    bad = make_node("_relu_backward", [sym.exp(x).outputs[0], w.outputs[0]], name="no_grad_op")
    y = NodeEntry(make_node("elemwise_mul", [NodeEntry(bad), w.outputs[0]]))
    g = Graph([y], {"grad_ys": [y], "grad_xs": x.outputs})
    with pytest.raises(GradientError, match="no_grad_op.*not differentiable"):
        g.apply("Gradient")


def test_non_differentiable_op_off_the_path_is_fine():
    x, w = sym.Variable("x"), sym.Variable("w")
    off = make_node("_relu_backward", [w.outputs[0], w.outputs[0]], name="off_path")
    y = NodeEntry(make_node("elemwise_mul", [x.outputs[0], NodeEntry(off)]))
    g = Graph([y], {"grad_ys": [y], "grad_xs": x.outputs}).apply("Gradient")
    a = np.array([1.0, -2.0])
    (got,) = run_graph(g, {"x": a, "w": np.array([3.0, 4.0])})
    np.testing.assert_allclose(got, [3.0, 4.0])


def test_custom_aggregator_is_called():
    calls = []

    def agg(grads):
        calls.append(len(grads))
        out = grads[0]
        for g in grads[1:]:
            out = NodeEntry(make_node("elemwise_add", [out, g]))
        return out

    x = sym.Variable("x")
    y = sym.elemwise_add(sym.exp(x), sym.tanh(x))
    g = _grad_graph(y, [x], grad_aggregate=agg)
    assert calls == [2]
    a = np.array([0.3])
    np.testing.assert_allclose(run_graph(g, {"x": a})[0], np.exp(a) + 1 - np.tanh(a) ** 2)


def test_bad_options_are_nnvm_errors():
    x = sym.Variable("x")
    y = sym.exp(x)
    with pytest.raises(NNVMError, match="grad_mirror"):
        _grad_graph(y, [x], grad_mirror="sometimes")
    with pytest.raises(NNVMError, match="NodeEntry"):
        Graph(y.outputs, {"grad_ys": y.outputs, "grad_xs": ["x"]}).apply("Gradient")
    with pytest.raises(NNVMError, match="one head gradient per y"):
        Graph(y.outputs, {"grad_ys": y.outputs, "grad_xs": x.outputs,
                          "grad_ys_out_grad": []}).apply("Gradient")
