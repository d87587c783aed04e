"""Strided depthwise Convs over large planes on ``llvm``, computed in strips of output rows
(``nnvm_llvm.compiler.depthwise_strided``), checked against onnxruntime.

The path is taken by windows strided along the rows (taps on more than one column phase)
over input planes of at least ``STRIP_MIN_PLANE_BYTES`` (256 KB), or 48 KB where a strip
copies few rows twice (3 x 3 s2). The cases cover what the
strips could get wrong: the first strip (its top row reads padding), a last strip partly
past the output (odd output heights), odd input widths (the last phase column part
padding), pads on one side, a 5 x 5 window, stride 3, unit stride down the columns, a
dilation down the columns, a batch of two, and the epilogues fused into the strips'
output rows. The schedule is checked at 16 lanes whatever this
machine's vectors (the outputs are checked on this machine's own build).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")
import nnvm  # noqa: E402
import nnvm.symbol as sym  # noqa: E402
from llvm_probe import build_onnx, ort_outputs, skip_without_llvm  # noqa: E402

skip_without_llvm()

CASES = {
    # id: (input shape, kernel, strides, pads (top, left, bottom, right), dilations)
    "k3_s2_rows_152": ((1, 2, 400, 304), 3, (2, 2), (1, 1, 1, 1), (1, 1)),
    "k3_s2_odd_sizes_batch2": ((2, 2, 333, 257), 3, (2, 2), (1, 1, 1, 1), (1, 1)),
    "k3_s2_pads_one_side": ((1, 2, 300, 250), 3, (2, 2), (0, 0, 1, 1), (1, 1)),
    "k5_s2": ((1, 2, 301, 260), 5, (2, 2), (2, 2, 2, 2), (1, 1)),
    "k3_s3": ((1, 2, 310, 290), 3, (3, 3), (1, 1, 1, 1), (1, 1)),
    # rows at unit stride, or dilated: the strip's rows are not split by row phase
    "k3_s1x2": ((1, 2, 210, 320), 3, (1, 2), (1, 1, 1, 1), (1, 1)),
    "k3_s2_row_dilation2": ((1, 2, 320, 300), 3, (2, 2), (2, 1, 2, 1), (2, 1)),
}


def _onnx(xs, k, s, pads, d, epilogue, rng):
    from onnx import TensorProto, helper, numpy_helper

    c = xs[1]
    inits = [numpy_helper.from_array(
        (rng.standard_normal((c, 1, k, k)) * 0.5).astype(np.float32), "W")]
    ins = ["x", "W"]
    if epilogue != "none":
        inits.append(numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "B"))
        ins.append("B")
    nodes = [helper.make_node("Conv", ins, ["y" if epilogue in ("none", "bias") else "z"],
                              group=c, kernel_shape=[k, k], pads=list(pads), strides=list(s),
                              dilations=list(d))]
    if epilogue == "relu6":
        nodes.append(helper.make_node("Clip", ["z", "lo", "hi"], ["y"]))
        inits += [numpy_helper.from_array(np.array(0, np.float32), "lo"),
                  numpy_helper.from_array(np.array(6, np.float32), "hi")]
    oh = (xs[2] + pads[0] + pads[2] - (k - 1) * d[0] - 1) // s[0] + 1
    ow = (xs[3] + pads[1] + pads[3] - (k - 1) * d[1] - 1) // s[1] + 1
    graph = helper.make_graph(
        nodes, "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(xs))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [xs[0], c, oh, ow])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _schedule_text(xs, k, s, pads, d=(1, 1)):
    """The depthwise kernel scheduled at 16 lanes: its TIR text, whether it applied, and
    its lowering."""
    from nnvm_llvm.compiler.codegen import kernel_lowerings
    from nnvm_llvm.compiler.schedules import ScheduleInfo, schedule

    c = xs[1]
    pt, pl, pb, pr = pads
    assert (pt, pl) == (pb, pr), "nnvm.symbol pads symmetrically"
    y = sym.conv2d(sym.Variable("x"), sym.Variable("w"), channels=c, kernel_size=(k, k),
                   strides=s if isinstance(s, tuple) else (s, s), padding=(pt, pl),
                   dilation=d, groups=c, use_bias=False)
    graph, opt = nnvm.compiler.optimize(
        y, shape={"x": xs}, params={"w": np.ones((c, 1, k, k), np.float32)})
    (gl,) = [g for g in kernel_lowerings(graph, opt, 16) if g.kind == "depthwise"]
    info = ScheduleInfo("depthwise", 16)
    return str(schedule(gl.primfunc(16), info).script()), info.applied, gl


@pytest.mark.parametrize("epilogue", ["none", "bias", "relu6"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_strips_match_onnxruntime(case, epilogue):
    from nnvm_llvm.compiler.depthwise_strided import wants_strips
    from nnvm_llvm.compiler.flat_window import FlatPlane

    xs, k, s, pads, d = CASES[case]
    oh = (xs[2] + pads[0] + pads[2] - (k - 1) * d[0] - 1) // s[0] + 1
    ow = (xs[3] + pads[1] + pads[3] - (k - 1) * d[1] - 1) // s[1] + 1
    assert wants_strips(FlatPlane(k, k, *s, *d, pads[0], pads[1], xs[2], xs[3], oh, ow, 16))
    rng = np.random.default_rng(16)
    model = _onnx(xs, k, s, pads, d, epilogue, rng)
    xv = (rng.standard_normal(xs) * 3).astype(np.float32)
    want = ort_outputs(model, {"x": xv})[0]
    lib = build_onnx(model, {"x": xv})
    assert lib.stats()["schedule_fallbacks"] == []
    got = lib.run(x=xv)[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_the_strips_are_computed_per_plane_and_strip_with_only_border_columns_checked():
    """3 x 3 s2 over 400 x 304: 100 strips of 2 output rows per plane, each copying its
    5 input rows (not split by row phase) into 2 column phases of 161 columns (152 output
    columns rounded up to 160, plus the taps' reach), then the taps, then the strip's 2
    output rows; the copy's interior phase columns (1 to 151: input columns 1 to 303)
    carry no padding check."""
    from nnvm_llvm.compiler.depthwise_strided import STRIP_ROWS

    text, applied, _ = _schedule_text((1, 2, 400, 304), 3, 2, (1, 1, 1, 1))
    assert applied and STRIP_ROWS == 2
    assert "pad_strips_" in text and "pad_phases" not in text  # not the whole-plane copy
    assert "T.sblock_alloc_buffer((1, 2, 100, 2, 5, 161))" in text
    # the strip loop under the plane loop, the strip's copy and taps under it
    strip = text.index("in range(100)")
    assert strip < text.index('T.sblock("pad_strips_') < text.index("anchor_depthwise_update")
    assert "in range(1, 152)" in text and "_partition" in text
    assert "rh in T.unroll" in text and "T.vectorized(16)" in text
    # the strip's output rows: 2 rows under the strip loop, not a whole-plane crop
    assert "T.grid(2, 19)" in text


@pytest.mark.parametrize("case", ["k3_s1x2", "k3_s2_rows_152", "k3_s3", "k5_s2",
                                  "k3_s2_row_dilation2"])
def test_the_cases_take_the_strip_schedule(case):
    xs, k, s, pads, d = CASES[case]
    text, applied, _ = _schedule_text(xs, k, s, pads, d)
    assert applied and "pad_strips_" in text and "anchor_depthwise_update" in text


@pytest.mark.parametrize("xs, k, s", [
    ((1, 2, 100, 100), 3, 2),  # 3 x 3 s2 over a plane under 48 KB
    ((1, 2, 200, 152), 5, 2),  # 5 x 5 s2 (7 rows copied per 4) over a plane under 256 KB
    ((1, 2, 64, 64), 3, 1)])  # unit stride under UNIT_STRIP_MIN_PLANE_BYTES
def test_small_strided_and_unit_stride_planes_keep_the_flat_kernel(xs, k, s):
    text, applied, _ = _schedule_text(xs, k, s, ((k - 1) // 2,) * 4)
    assert applied and "pad_strips_" not in text and "pad_phases" in text


@pytest.mark.parametrize("xs", [(1, 2, 200, 152), (1, 2, 112, 112)])
def test_mid_planes_of_a_3x3_s2_window_take_strips(xs):
    """48 KB to 256 KB: a 3 x 3 s2 strip copies 5 input rows per 4 new ones."""
    text, applied, _ = _schedule_text(xs, 3, 2, (1, 1, 1, 1))
    assert applied and "pad_strips_" in text


def test_every_tuning_knob_of_a_strip_kernel_schedules():
    import itertools

    from nnvm_llvm.compiler.schedules import ScheduleInfo, knob_space, schedule

    _, _, gl = _schedule_text((1, 2, 400, 304), 3, 2, (1, 1, 1, 1))
    space = knob_space(gl.primfunc(16), ScheduleInfo("depthwise", 16))
    assert space["rt"] == [2, 1], space
    for combo in itertools.product(*space.values()):
        info = ScheduleInfo("depthwise", 16, knobs=dict(zip(space, combo)))
        schedule(gl.primfunc(16), info)
        assert info.applied, combo
