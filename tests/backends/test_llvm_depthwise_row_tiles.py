"""Depthwise convolutions on ``llvm`` tiled across output rows
(``nnvm_llvm.compiler.flat_window.row_tiled_width``), checked against the ``reference``
target and onnxruntime.

A row-tiled window computes its rows rounded up to whole vectors, reading past each row's
end into the next row of the phase planes, and rows rounded up to whole tiles; when that is
exactly the output it writes the output with no crop. The cases cover those edges: rows of
whole vectors (no crop, with and without an epilogue), odd widths, strides 2 and 3,
dilation, asymmetric padding, a row count no tile divides, batches, and the tuner's knobs.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")
import nnvm  # noqa: E402
import nnvm.symbol as sym  # noqa: E402

CASES = {
    # id: (input shape, kernel, strides, padding (top, left, bottom, right), dilation)
    "whole_vectors_no_crop": ((1, 3, 10, 32), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    "rows_38_k5": ((1, 4, 13, 38), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),
    "rows_prime_count": ((2, 3, 11, 47), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    "stride2_wide": ((1, 3, 9, 200), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    "stride3_asym": ((1, 2, 14, 301), (3, 3), (3, 3), (0, 1, 2, 0), (1, 1)),
    "dilated_k5": ((1, 3, 12, 60), (5, 5), (1, 1), (4, 4, 4, 4), (2, 2)),
    "no_pad_k3": ((1, 5, 8, 66), (3, 3), (1, 1), (0, 0, 0, 0), (1, 1)),
}


def _model(xs, kernel, strides, padding, dilation, epilogue, rng):
    c = xs[1]
    x, w = sym.Variable("x"), sym.Variable("w")
    ins = (x, w, sym.Variable("b")) if epilogue != "none" else (x, w)
    y = sym.conv2d(*ins, channels=c, kernel_size=kernel, strides=strides, padding=padding,
                   dilation=dilation, groups=c, use_bias=epilogue != "none")
    if epilogue == "relu6":
        y = sym.clip(y, a_min=0.0, a_max=6.0)
    elif epilogue == "silu":
        y = y * sym.sigmoid(y)
    params = {"w": (rng.standard_normal((c, 1) + kernel) * 0.5).astype("float32")}
    if epilogue != "none":
        params["b"] = rng.standard_normal(c).astype("float32")
    return y, params


def _depthwise_kernel(y, xs, params, knobs=None):
    """The scheduled depthwise kernel's TIR text and whether the template applied."""
    from nnvm_llvm.compiler.codegen import kernel_lowerings
    from nnvm_llvm.compiler.schedules import ScheduleInfo, schedule

    graph, opt = nnvm.compiler.optimize(y, shape={"x": xs}, params=params)
    (gl,) = [g for g in kernel_lowerings(graph, opt, 16) if g.kind == "depthwise"]
    info = ScheduleInfo("depthwise", 16, knobs=knobs or {})
    return str(schedule(gl.primfunc(16), info).script()), info.applied


@pytest.mark.parametrize("epilogue", ["none", "bias", "relu6", "silu"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_row_tiled_depthwise_matches_reference(case, epilogue):
    xs, kernel, strides, padding, dilation = CASES[case]
    rng = np.random.default_rng(17)
    y, params = _model(xs, kernel, strides, padding, dilation, epilogue, rng)
    text, applied = _depthwise_kernel(y, xs, params)
    assert applied
    assert "rh in T.unroll" in text  # row-tiled: every tap unrolled under the row tile
    xv = (rng.standard_normal(xs) * 3).astype("float32")
    got, want = [nnvm.compiler.build(y, target=t, shape={"x": xs}, params=params).run(x=xv)[0]
                 for t in ("llvm", "reference")]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_whole_vector_rows_write_the_output_with_no_crop():
    """32-wide rows, 10 of them: the window is exactly the output, so no ``_rows`` copy."""
    rng = np.random.default_rng(19)
    xs, kernel, strides, padding, dilation = CASES["whole_vectors_no_crop"]
    y, params = _model(xs, kernel, strides, padding, dilation, "none", rng)
    text, applied = _depthwise_kernel(y, xs, params)
    assert applied and "anchor_depthwise_rows" not in text


def test_every_tuning_knob_of_a_row_tiled_kernel_schedules():
    """``rt`` counts rows per tile here; every knob combination must apply."""
    import itertools

    from nnvm_llvm.compiler.codegen import kernel_lowerings
    from nnvm_llvm.compiler.schedules import ScheduleInfo, knob_space, schedule

    rng = np.random.default_rng(23)
    xs = (1, 4, 20, 38)
    y, params = _model(xs, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), "relu6", rng)
    graph, opt = nnvm.compiler.optimize(y, shape={"x": xs}, params=params)
    (gl,) = [g for g in kernel_lowerings(graph, opt, 16) if g.kind == "depthwise"]
    space = knob_space(gl.primfunc(16), ScheduleInfo("depthwise", 16))
    assert len(space["rt"]) > 1, space
    for combo in itertools.product(*space.values()):
        info = ScheduleInfo("depthwise", 16, knobs=dict(zip(space, combo)))
        schedule(gl.primfunc(16), info)
        assert info.applied, combo


def test_row_tiled_depthwise_matches_onnxruntime():
    """The ONNX path (a MobileNet-like 3 x 3 over a 40 x 76 plane with bias) against
    onnxruntime."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(29)
    c, h, w = 6, 40, 76
    wt = rng.standard_normal((c, 1, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32)
    node = helper.make_node("Conv", ["x", "W", "B"], ["y"], group=c, kernel_shape=[3, 3],
                            pads=[1, 1, 1, 1])
    graph = helper.make_graph(
        [node], "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, h, w])],
        [numpy_helper.from_array(wt, "W"), numpy_helper.from_array(bias, "B")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    xv = rng.standard_normal((1, c, h, w)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": xv})[0]
    g, params = nnvm.frontend.from_onnx(model, shape={"x": xv.shape})
    got = nnvm.compiler.build(g, target="llvm", shape={"x": xv.shape},
                              params=params).run(x=xv)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
