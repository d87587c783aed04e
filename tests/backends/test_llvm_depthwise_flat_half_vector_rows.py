"""Large-plane depthwise convolutions on ``llvm`` row-tiled in half vectors over rows exactly
the output's width (``nnvm_llvm.compiler.flat_window.half_vector_rows``), so the register
tiles store the output with no crop; checked against onnxruntime.

The path is taken at 16 lanes (AVX-512) by unit-stride windows over planes of at least
64 KB whose rows 8 divide and 16 do not. The cases cover odd input widths and heights,
batches, pads on one side only, a 5 x 5 and a dilated window, and the epilogues; the
schedule is checked at 16 lanes whatever this machine's vectors (the outputs are checked
on this machine's own build). Strided windows and small planes keep the crop.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")
import nnvm  # noqa: E402
import nnvm.symbol as sym  # noqa: E402
from llvm_probe import skip_without_llvm  # noqa: E402

skip_without_llvm()

CASES = {
    # id: (input shape, kernel, padding (top, left, bottom, right), dilation): output rows
    # of 152 or 136 (8 divides them, 16 does not), planes of 64 KB or more
    "rows_152": ((1, 2, 120, 152), (3, 3), (1, 1, 1, 1), (1, 1)),
    "odd_sizes_batch2": ((2, 3, 115, 151), (3, 3), (1, 1, 1, 2), (1, 1)),
    "pads_one_side": ((1, 2, 128, 153), (3, 3), (0, 0, 2, 1), (1, 1)),
    "k5_rows_136": ((1, 2, 130, 136), (5, 5), (2, 2, 2, 2), (1, 1)),
    "dilated": ((1, 2, 126, 152), (3, 3), (2, 2, 2, 2), (2, 2)),
}


def _onnx(xs, kernel, padding, dilation, epilogue, rng, strides=(1, 1)):
    from onnx import TensorProto, helper, numpy_helper

    c = xs[1]
    wt = (rng.standard_normal((c, 1) + kernel) * 0.5).astype(np.float32)
    inits = [numpy_helper.from_array(wt, "W")]
    ins = ["x", "W"]
    if epilogue != "none":
        inits.append(numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "B"))
        ins.append("B")
    (pt, pl, pb, pr) = padding
    nodes = [helper.make_node("Conv", ins, ["y" if epilogue in ("none", "bias") else "z"],
                              group=c, kernel_shape=list(kernel), pads=[pt, pl, pb, pr],
                              dilations=list(dilation), strides=list(strides))]
    if epilogue == "relu6":
        nodes.append(helper.make_node("Clip", ["z", "lo", "hi"], ["y"]))
        inits += [numpy_helper.from_array(np.array(0, np.float32), "lo"),
                  numpy_helper.from_array(np.array(6, np.float32), "hi")]
    ys = [xs[0], c] + [(n + lo + hi - d * (k - 1) - 1) // s + 1 for n, lo, hi, d, k, s in
                       zip(xs[2:], padding[:2], padding[2:], dilation, kernel, strides)]
    graph = helper.make_graph(
        nodes, "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(xs))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ys)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def assert_matches_onnxruntime(model, xv, tol: float) -> None:
    """``model`` built for llvm from its ONNX import gives onnxruntime's output on ``xv``."""
    ort = pytest.importorskip("onnxruntime")
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": xv})[0]
    g, params = nnvm.frontend.from_onnx(model, shape={"x": xv.shape})
    got = nnvm.compiler.build(g, target="llvm", shape={"x": xv.shape},
                              params=params).run(x=xv)[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def _schedule_text(xs, kernel, padding, dilation, strides=(1, 1)):
    """The depthwise kernel scheduled at 16 lanes: its TIR text and whether it applied."""
    from nnvm_llvm.compiler.codegen import kernel_lowerings
    from nnvm_llvm.compiler.schedules import ScheduleInfo, schedule

    c = xs[1]
    y = sym.conv2d(sym.Variable("x"), sym.Variable("w"), channels=c, kernel_size=kernel,
                   strides=strides, padding=padding, dilation=dilation, groups=c,
                   use_bias=False)
    params = {"w": np.ones((c, 1) + kernel, np.float32)}
    graph, opt = nnvm.compiler.optimize(y, shape={"x": xs}, params=params)
    (gl,) = [g for g in kernel_lowerings(graph, opt, 16) if g.kind == "depthwise"]
    info = ScheduleInfo("depthwise", 16)
    return str(schedule(gl.primfunc(16), info).script()), info.applied, gl


@pytest.mark.parametrize("strips", [True, False])
@pytest.mark.parametrize("case", sorted(CASES))
def test_half_vector_rows_store_the_output_with_no_crop(case, strips, monkeypatch):
    """Both kernels: unit-stride strips (``depthwise_strided``, the default for these
    planes) and the whole-plane flat kernel (with the strips off)."""
    from nnvm_llvm.compiler import depthwise_strided

    monkeypatch.setattr(depthwise_strided, "UNIT_STRIDE_STRIPS", strips)
    xs, kernel, padding, dilation = CASES[case]
    text, applied, _ = _schedule_text(xs, kernel, padding, dilation)
    assert applied
    assert ("pad_strips_" in text) == strips
    assert "anchor_depthwise_rows" not in text  # no crop of rounded-up rows
    assert "T.vectorized(8)" in text and "rh in T.unroll" in text


@pytest.mark.parametrize("epilogue", ["none", "bias", "relu6"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_half_vector_rows_match_onnxruntime(case, epilogue):
    xs, kernel, padding, dilation = CASES[case]
    rng = np.random.default_rng(31)
    model = _onnx(xs, kernel, padding, dilation, epilogue, rng)
    assert_matches_onnxruntime(model, (rng.standard_normal(xs) * 3).astype(np.float32), 1e-4)


@pytest.mark.parametrize("xs, strides", [((1, 2, 240, 304), (2, 2)),  # strided: rows of 152
                                         ((1, 2, 20, 152), (1, 1))])  # plane under 64 KB
def test_strided_and_small_planes_keep_the_crop(xs, strides):
    text, applied, _ = _schedule_text(xs, (3, 3), (1, 1), (1, 1), strides)
    assert applied and "anchor_depthwise_rows" in text


def test_every_tuning_knob_of_a_half_vector_kernel_schedules(monkeypatch):
    """The tuner offers half vectors only and row tiles dividing the rows; all apply (the
    whole-plane kernel: these planes take unit-stride strips unless they are off)."""
    import itertools

    from nnvm_llvm.compiler import depthwise_strided
    from nnvm_llvm.compiler.schedules import ScheduleInfo, knob_space, schedule

    monkeypatch.setattr(depthwise_strided, "UNIT_STRIDE_STRIPS", False)

    _, _, gl = _schedule_text(*CASES["rows_152"])
    space = knob_space(gl.primfunc(16), ScheduleInfo("depthwise", 16))
    assert space["vw"] == [8] and len(space["rt"]) > 1, space
    for combo in itertools.product(*space.values()):
        info = ScheduleInfo("depthwise", 16, knobs=dict(zip(space, combo)))
        schedule(gl.primfunc(16), info)
        assert info.applied, combo
