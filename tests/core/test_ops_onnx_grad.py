"""Gradients of the ONNX-semantics ops against central finite differences, and graph-level
checks (InferShape/InferType + interpreter with check=True) for the op records."""

from __future__ import annotations

import numpy as np
import pytest

from nnvm.errors import NNVMError
from nnvm.interpreter import Interpreter
from nnvm.testing.check_computation import (build_op_graph, check_function, check_gradient,
                                            infer_graph)

R = np.random.default_rng(0)


def _x(*shape, lo=-2.0, hi=2.0):
    return R.uniform(lo, hi, shape).astype(np.float64)


def _away(x, points, gap=0.05):
    """Move values at least ``gap`` away from kinks."""
    for p in points:
        close = np.abs(x - p) < gap
        x[close] = p + gap * np.sign(x[close] - p + 1e-12)
    return x


UNARY = ["erf", "sin", "cos", "tan", "atan", "sinh", "cosh", "asinh", "softplus", "softsign",
         "mish", "gelu", "swish", "celu", "elu", "selu", "hard_swish", "hard_sigmoid",
         "thresholded_relu", "shrink"]


@pytest.mark.parametrize("name", UNARY)
def test_unary_gradient(name):
    x = _away(_x(3, 4, lo=-1.2, hi=1.2), [-3, -2.5, -1, -0.5, 0, 0.5, 1, 2.5, 3])
    check_gradient(name, [x], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name, lo, hi", [("asin", -0.9, 0.9), ("acos", -0.9, 0.9),
                                          ("atanh", -0.9, 0.9), ("acosh", 1.2, 3.0),
                                          ("reciprocal", 0.5, 2.0)])
def test_unary_gradient_on_domain(name, lo, hi):
    check_gradient(name, [_x(2, 5, lo=lo, hi=hi)], rtol=1e-4, atol=1e-6)


def test_gelu_tanh_gradient():
    check_gradient("gelu", [_x(2, 6)], {"approximate": "tanh"}, rtol=1e-4)


@pytest.mark.parametrize("axis, slope_shape", [(None, (3, 1, 1)), (None, (1,)), (1, (3,))])
def test_prelu_gradient(axis, slope_shape):
    x = _away(_x(2, 3, 2, 2), [0.0])
    check_gradient("prelu", [x, _x(*slope_shape, lo=0.1, hi=0.5)], {"axis": axis}, rtol=1e-4)


def test_mod_gradient():
    a, b = _x(3, 4, lo=0.3, hi=5), np.full((4,), 1.7)
    a = _away(a, [1.7, 3.4])
    check_gradient("broadcast_mod", [a, b], rtol=1e-4)
    check_gradient("broadcast_fmod", [-a, b], rtol=1e-4)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_gradient(axis):
    idx = np.array([[0, 2], [-1, 0]], dtype=np.int64)  # repeats accumulate
    check_gradient("gather", [_x(3, 4, 3), idx], {"axis": axis})


def test_gather_elements_topk_cumsum_tile_expand_gradients():
    idx = np.array([[0, 1, 1], [2, 0, 0]], dtype=np.int64)
    check_gradient("gather_elements", [_x(3, 3), idx], {"axis": 0})
    x = _x(3, 5)
    check_gradient("topk", [x], {"k": 2, "axis": 1})
    check_gradient("cumsum", [_x(2, 4)], {"axis": 1, "exclusive": True, "reverse": True})
    check_gradient("tile", [_x(2, 3)], {"reps": (2, 3)})
    check_gradient("expand", [_x(3, 1)], {"shape": (2, 1, 4)})
    check_gradient("trilu", [_x(4, 4)], {"upper": False, "k": 1})


@pytest.mark.parametrize("use_bias, axis", [(True, -1), (False, 1)])
def test_layer_norm_gradient(use_bias, axis):
    ins = [_x(2, 3, 4), _x(*((3, 4) if axis == 1 else (4,)))]
    if use_bias:
        ins.append(_x(*ins[1].shape))
    check_gradient("layer_norm", ins, {"axis": axis, "use_bias": use_bias}, rtol=1e-4,
                   atol=1e-6)


@pytest.mark.parametrize("shape, kernel, attrs", [
    ((2, 4, 7), (6, 2, 3), {"strides": (2,), "pads": (1, 2), "groups": 2}),
    ((1, 2, 5, 6), (3, 2, 3, 2), {"dilations": (2, 1), "pads": (1, 0, 1, 1)}),
    ((1, 2, 4, 3, 3), (2, 1, 2, 2, 2), {"groups": 2, "strides": (1, 2, 1)}),
])
def test_conv_nd_gradient(shape, kernel, attrs):
    ins = [_x(*shape), _x(*kernel), _x(kernel[0])]
    check_gradient("conv", ins, {**attrs, "use_bias": True}, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name, attrs", [
    ("max_pool", {"kernel_shape": (2, 2), "strides": (1, 2), "pads": (1, 0, 0, 1)}),
    ("max_pool", {"kernel_shape": (3,), "ceil_mode": True, "strides": (2,)}),
    # a forward node that skips its indices still has the argmax's gradient
    ("max_pool", {"kernel_shape": (2, 2), "strides": (2, 1), "with_indices": False}),
    ("avg_pool", {"kernel_shape": (2, 3), "pads": (1, 1, 1, 1), "count_include_pad": True}),
    ("avg_pool", {"kernel_shape": (2, 2), "strides": (2, 2), "ceil_mode": True}),
])
def test_pool_gradient(name, attrs):
    nsp = len(attrs["kernel_shape"])
    x = R.permutation(np.arange(2 * 3 * 5 ** nsp, dtype=np.float64)).reshape(
        (2, 3) + (5,) * nsp) / 10.0  # distinct values: no max ties
    check_gradient(name, [x], attrs, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("attrs", [
    {"mode": "nearest", "scales": (1.0, 1.0, 2.0, 1.5)},
    {"mode": "linear", "sizes": (3, 5), "axes": (2, 3)},
    {"mode": "linear", "scales": (0.6, 0.5), "axes": (2, 3), "antialias": True},
    {"mode": "cubic", "sizes": (1, 2, 6, 4), "coordinate_transformation_mode": "align_corners"},
])
def test_resize_gradient(attrs):
    check_gradient("resize", [_x(1, 2, 4, 4)], attrs, rtol=1e-4, atol=1e-6)


def test_depth_space_gradients():
    check_gradient("depth_to_space", [_x(1, 8, 2, 3)], {"blocksize": 2, "mode": "CRD"})
    check_gradient("space_to_depth", [_x(1, 2, 4, 6)], {"blocksize": 2})


# -- graph-level checks of the rules --------------------------------------------------------

def test_layer_norm_hidden_outputs_through_passes():
    x = _x(2, 3, 4).astype(np.float32)
    s, b = np.ones(4, np.float32), np.zeros(4, np.float32)
    outs = check_function("layer_norm", [x, s, b], {"axis": -1})
    mu = x.mean(-1, keepdims=True)
    np.testing.assert_allclose(outs[0], (x - mu) / np.sqrt(x.var(-1, keepdims=True) + 1e-5),
                               rtol=1e-5, atol=1e-5)
    g = infer_graph(build_op_graph("layer_norm", {"axis": 1}), {"data": (2, 3, 4)},
                    {"data": "float32"})
    shapes = g.attrs["shape"]
    assert [shapes[e] for e in g.index.output_entries] == [(2, 3, 4), (2, 1, 1), (2, 1, 1)]
    idx = g.index
    scale = next(n for n in idx.input_nodes if idx.nodes[n].name == "scale")
    assert shapes[idx.entry_rptr[scale]] == (3, 4)  # filled backward from data and axis


def test_conv_shape_rule_fills_weightless_bias_and_checks_groups():
    g = infer_graph(build_op_graph("conv", {"use_bias": True, "pads": (1, 1), "strides": (2,)}),
                    {"data": (1, 4, 9), "weight": (6, 4, 3)}, {"data": "float32",
                                                               "weight": "float32",
                                                               "bias": "float32"})
    assert [g.attrs["shape"][e] for e in g.index.output_entries] == [(1, 6, 5)]
    with pytest.raises(NNVMError, match="groups"):
        infer_graph(build_op_graph("conv", {"groups": 3}), {"data": (1, 4, 9),
                                                             "weight": (6, 4, 3)},
                    {"data": "float32", "weight": "float32"})


def test_conv_matches_independent_loop():
    x, w = _x(1, 2, 5, 5).astype(np.float32), _x(3, 2, 3, 3).astype(np.float32)

    def loop(x, w):
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        out = np.zeros((1, 3, 3, 3), np.float32)
        for o in range(3):
            for i in range(3):
                for j in range(3):
                    out[0, o, i, j] = np.sum(xp[0, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3] * w[o])
        return out
    check_function("conv", [x, w], {"strides": (2, 2), "pads": (1, 1, 1, 1)}, reference=loop,
                   rtol=1e-5, atol=1e-5)


def test_dynamic_shape_ops_run_in_interpreter():
    g = build_op_graph("non_zero")
    g = infer_graph(g, {"data": (2, 3)}, {"data": "float32"}, require_known=False)
    assert g.attrs["shape"][g.index.output_entries[0]] is None
    x = np.array([[1, 0, 2], [0, 0, 3]], np.float32)
    (out,) = Interpreter(g, check=True).run({"data": x})
    np.testing.assert_array_equal(out, np.array(np.nonzero(x)))
    g = infer_graph(build_op_graph("non_max_suppression", {
        "max_output_boxes_per_class": 2, "iou_threshold": 0.5}),
        {"boxes": (1, 3, 4), "scores": (1, 1, 3)}, {"boxes": "float32", "scores": "float32"},
        require_known=False)
    boxes = np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 5, 1, 6]]], np.float32)
    (sel,) = Interpreter(g, check=True).run({"boxes": boxes,
                                             "scores": np.array([[[0.9, 0.8, 0.7]]], np.float32)})
    np.testing.assert_array_equal(sel, [[0, 0, 0], [0, 0, 2]])


def test_dtype_rules():
    g = infer_graph(build_op_graph("topk", {"k": 2}), {"data": (3, 4)}, {"data": "float16"})
    assert [g.attrs["dtype"][e] for e in g.index.output_entries] == ["float16", "int64"]
    g = infer_graph(build_op_graph("isinf"), {"data": (3,)}, {"data": "float64"})
    assert g.attrs["dtype"][g.index.output_entries[0]] == "bool"
    g = infer_graph(build_op_graph("quantize_linear"), {"data": (4,), "scale": (),
                                                         "zero_point": ()},
                    {"data": "float32", "scale": "float32", "zero_point": "int8"})
    assert g.attrs["dtype"][g.index.output_entries[0]] == "int8"
    with pytest.raises(NNVMError, match="bool"):
        infer_graph(build_op_graph("logical_and"), {"lhs": (2,), "rhs": (2,)},
                    {"lhs": "float32", "rhs": "float32"})


def test_lstm_matches_independent_numpy():
    seq, batch, inp, hid = 3, 2, 4, 5
    x, w, r = _x(seq, batch, inp), _x(1, 4 * hid, inp), _x(1, 4 * hid, hid)

    def ref(x, w, r):
        sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
        h, c, ys = np.zeros((batch, hid)), np.zeros((batch, hid)), []
        for t in range(seq):
            gi, go, gf, gc = np.split(x[t] @ w[0].T + h @ r[0].T, 4, axis=-1)
            c = sig(gf) * c + sig(gi) * np.tanh(gc)
            h = sig(go) * np.tanh(c)
            ys.append(h)
        return np.stack(ys)[:, None], h[None], c[None]
    check_function("lstm", [x, w, r], {"hidden_size": hid}, reference=ref, rtol=1e-6)
