"""The channel-blocked window kernel (``nnvm_llvm.compiler.window_blocked``) on the ONNX
path, checked against onnxruntime: depthwise Convs (with and without a bias, odd channel
counts, asymmetric padding, strides, dilation) and a ceil-mode MaxPool on small planes.

The kernel writes each output row back to NCHW (the epilogue fused) right after the row is
computed; the cases cover the rows that could go wrong there: channels past the last
whole vector (never written), several tiles per row, strided rows and pools.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
import nnvm  # noqa: E402
from nnvm_llvm.compiler.flat_window import FlatPlane  # noqa: E402
from nnvm_llvm.compiler.window_blocked import wants_blocked  # noqa: E402

CONVS = {
    # id: (input shape, kernel, strides, pads (top, left, bottom, right), dilation, bias)
    "k5_7x7_odd_channels": ((1, 45, 7, 7), 5, 1, (2, 2, 2, 2), 1, True),
    "k5_14x14_two_tiles": ((1, 48, 14, 14), 5, 1, (2, 2, 2, 2), 1, False),
    "k5_13x11_asym": ((2, 48, 13, 11), 5, 1, (2, 1, 2, 3), 1, True),
    "k3_s2_19x17": ((1, 48, 19, 17), 3, 2, (1, 1, 1, 1), 1, True),
    "k5_s2_14x14_odd_channels": ((1, 40, 14, 14), 5, 2, (2, 2, 2, 2), 1, True),
    "k5_dilated_16x16": ((1, 64, 16, 16), 5, 1, (4, 4, 4, 4), 2, True),
}


def _geometry(xs, k, s, pads, d, lanes=16) -> FlatPlane:
    pt, pl, pb, pr = pads
    oh = (xs[2] + pt + pb - (k - 1) * d - 1) // s + 1
    ow = (xs[3] + pl + pr - (k - 1) * d - 1) // s + 1
    return FlatPlane(k, k, s, s, d, d, pt, pl, xs[2], xs[3], oh, ow, lanes)


def _run_both(node, inits, xv, out_shape):
    """``(nnvm llvm output, onnxruntime output)`` of a one-node ONNX model on ``xv``."""
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [node], "blocked", [helper.make_tensor_value_info("x", TensorProto.FLOAT, xv.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": xv})[0]
    g, params = nnvm.frontend.from_onnx(model, shape={"x": xv.shape})
    lib = nnvm.compiler.build(g, target="llvm", shape={"x": xv.shape}, params=params)
    assert lib.stats()["schedule_fallbacks"] == []
    return lib.run(x=xv)[0], want


@pytest.mark.parametrize("case", sorted(CONVS))
def test_blocked_depthwise_matches_onnxruntime(case):
    xs, k, s, pads, d, bias = CONVS[case]
    g = _geometry(xs, k, s, pads, d)
    assert wants_blocked(g, xs[1]), "the case must take the kernel"
    from onnx import helper

    rng = np.random.default_rng(41)
    c = xs[1]
    inits = {"W": rng.standard_normal((c, 1, k, k)).astype(np.float32)}
    if bias:
        inits["B"] = rng.standard_normal(c).astype(np.float32)
    node = helper.make_node("Conv", ["x", *inits], ["y"], group=c, kernel_shape=[k, k],
                            pads=[pads[0], pads[1], pads[2], pads[3]], strides=[s, s],
                            dilations=[d, d])
    got, want = _run_both(node, inits, rng.standard_normal(xs).astype(np.float32),
                          [xs[0], c, g.oh, g.ow])
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("channels", [832, 45])
def test_blocked_ceil_mode_max_pool_matches_onnxruntime(channels):
    """GoogLeNet's 3 x 3 ceil-mode max pool over 7 x 7 planes (and an odd channel count)."""
    from onnx import helper

    xs = (1, channels, 7, 7)
    assert wants_blocked(_geometry(xs, 3, 1, (1, 1, 1, 1), 1), channels)
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                            ceil_mode=1)
    xv = (np.random.default_rng(43).standard_normal(xs) * 10).astype(np.float32)
    got, want = _run_both(node, {}, xv, list(xs))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_blocked_average_pool_matches_onnxruntime(count_include_pad):
    """A padded 3 x 3 average pool over 7 x 7 planes: the border holds zeros, the divisor
    counts them or not."""
    from onnx import helper

    xs = (1, 45, 7, 7)
    assert wants_blocked(_geometry(xs, 3, 1, (1, 1, 1, 1), 1), xs[1])
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3],
                            pads=[1, 1, 1, 1], count_include_pad=count_include_pad)
    xv = np.random.default_rng(47).standard_normal(xs).astype(np.float32)
    got, want = _run_both(node, {}, xv, list(xs))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
