"""Strided depthwise Convs through ``flat_window``'s kernel, checked against onnxruntime.

A strided window's stride phases are read straight from the input (no padded plane in
between), the phase columns split so only the border ones check for padding: the cases
cover what could go wrong there (the first and last phase rows, which read only padding;
odd heights and widths, whose last phase row or column is part padding; padding on one
side only; strides 2 and 3; dilation; a batch of two planes per channel; a small plane).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from nnvm_llvm.compiler.flat_window import FlatPlane  # noqa: E402
from nnvm_llvm.compiler.window_blocked import wants_blocked  # noqa: E402

import nnvm  # noqa: E402

#: (input shape, kernel, stride, pads (top, left, bottom, right), dilation, bias), by id
CASES = [
    pytest.param((1, 3, 81, 77), 3, 2, (1, 1, 1, 1), 1, True, id="k3_s2_odd_81x77"),
    pytest.param((2, 4, 70, 73), 3, 2, (0, 0, 1, 1), 1, False, id="k3_s2_one_side_batch2"),
    # (under 48 KB: larger 3 x 3 s2 planes take depthwise_strided's strips)
    pytest.param((1, 2, 88, 128), 3, 2, (1, 1, 1, 1), 1, True, id="k3_s2_rows_whole_vectors"),
    pytest.param((1, 5, 80, 69), 5, 2, (2, 2, 2, 2), 1, True, id="k5_s2_odd_80x69"),
    pytest.param((1, 3, 91, 100), 3, 3, (1, 2, 1, 0), 1, False, id="k3_s3_asym"),
    pytest.param((1, 2, 73, 75), 3, 2, (2, 2, 2, 2), 2, True, id="k3_s2_dilated"),
    pytest.param((1, 3, 41, 37), 3, 2, (1, 1, 1, 1), 1, True, id="k3_s2_small_plane_whole"),
]


def _lanes() -> int:
    from nnvm.backend import parse_target
    from nnvm_llvm.compiler.target import tvm_target, vector_lanes

    return vector_lanes(tvm_target(parse_target("llvm")))


def _geometry(xs, k, s, pads, d, lanes) -> FlatPlane:
    pt, pl, pb, pr = pads
    oh = (xs[2] + pt + pb - (k - 1) * d - 1) // s + 1
    ow = (xs[3] + pl + pr - (k - 1) * d - 1) // s + 1
    return FlatPlane(k, k, s, s, d, d, pt, pl, xs[2], xs[3], oh, ow, lanes)


def _model(xs, k, s, pads, d, bias, rng):
    """A one-node ONNX depthwise Conv (with or without a bias) on an ``xs`` input."""
    from onnx import TensorProto, helper, numpy_helper

    c, g = xs[1], _geometry(xs, k, s, pads, d, 16)
    inits = {"W": rng.standard_normal((c, 1, k, k)).astype(np.float32)}
    if bias:
        inits["B"] = rng.standard_normal(c).astype(np.float32)
    node = helper.make_node("Conv", ["x", *inits], ["y"], group=c, kernel_shape=[k, k],
                            pads=list(pads), strides=[s, s], dilations=[d, d])
    graph = helper.make_graph(
        [node], "flat_strided", [helper.make_tensor_value_info("x", TensorProto.FLOAT, xs)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [xs[0], c, g.oh, g.ow])],
        [numpy_helper.from_array(v, n) for n, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("xs,k,s,pads,d,bias", CASES)
def test_strided_flat_depthwise_matches_onnxruntime(xs, k, s, pads, d, bias):
    assert not wants_blocked(_geometry(xs, k, s, pads, d, _lanes()), xs[1]), \
        "the case must take the flat kernel"
    rng = np.random.default_rng(14)
    model = _model(xs, k, s, pads, d, bias, rng)
    xv = rng.standard_normal(xs).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": xv})[0]
    g, params = nnvm.frontend.from_onnx(model, shape={"x": xs})
    lib = nnvm.compiler.build(g, target="llvm", shape={"x": xs}, params=params)
    assert lib.stats()["schedule_fallbacks"] == []
    got = lib.run(x=xv)[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_phases_read_the_input_with_only_border_columns_checked():
    """No padded plane between the input and the phases; the phase column loop is split
    into the border and interior columns (the interior: phase column 1 to 38 of 40)."""
    import nnvm.symbol as sym
    from nnvm_llvm.compiler.codegen import kernel_lowerings
    from nnvm_llvm.compiler.schedules import ScheduleInfo, schedule

    xs, c = (1, 3, 81, 77), 3
    y = sym.conv2d(sym.Variable("x"), sym.Variable("w"), channels=c, kernel_size=(3, 3),
                   strides=(2, 2), padding=(1, 1), groups=c, use_bias=False)
    graph, params = nnvm.compiler.optimize(
        y, shape={"x": xs}, params={"w": np.ones((c, 1, 3, 3), np.float32)})
    (gl,) = [g for g in kernel_lowerings(graph, params, 16) if g.kind == "depthwise"]
    info = ScheduleInfo("depthwise", 16)
    text = str(schedule(gl.primfunc(16), info).script())
    assert info.applied
    assert "pad_conv2d" not in text and "pad_phases" in text  # no padded plane
    # 77 columns padded 1 + 1: phase columns t read input columns 2t - 1 and 2t, both
    # inside for t in [1, 38]; t = 0 and t >= 39 keep the check
    assert "in range(1, 39)" in text and "_partition" in text
