"""Unit-stride flat windows on ``llvm`` pad their plane by partitioned loops
(``nnvm_llvm.compiler.flat_window._partition_padding``): only the border rows and columns
are written with the pad value, the interior is a plain copy, no pad-value fill of the
whole plane first; strided depthwise planes likewise (padded whole, or ``sh`` rows at a
time over 16 KB, their columns split). Checked against onnxruntime for depthwise convs and
max/average pools (pad values 0 and the lowest float) with pads on one side, odd sizes
and batches.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")
import nnvm  # noqa: E402
from llvm_probe import skip_without_llvm  # noqa: E402
from test_llvm_depthwise_flat_half_vector_rows import assert_matches_onnxruntime  # noqa: E402

skip_without_llvm()

CASES = {
    # id: (op, input shape, kernel, pads (top, left, bottom, right), strides)
    "dw_odd_pads_one_side": ("Conv", (2, 3, 17, 23), (3, 3), (0, 2, 2, 0), (1, 1)),
    "dw_k5": ("Conv", (1, 4, 30, 41), (5, 5), (2, 1, 2, 3), (1, 1)),
    "max_odd": ("MaxPool", (2, 3, 19, 21), (3, 3), (1, 0, 1, 2), (1, 1)),
    "avg_pads_top_left": ("AveragePool", (1, 5, 33, 29), (3, 3), (2, 2, 0, 0), (1, 1)),
    "dw_s2_whole_plane": ("Conv", (2, 3, 21, 27), (3, 3), (0, 1, 1, 0), (2, 2)),
    "dw_s2_rows_odd": ("Conv", (1, 2, 75, 81), (3, 3), (1, 0, 0, 1), (2, 2)),
    "dw_s2_k5_rows": ("Conv", (2, 2, 67, 90), (5, 5), (2, 2, 1, 2), (2, 2)),
}


def _model(op, xs, kernel, pads, strides, rng):
    from onnx import TensorProto, helper, numpy_helper

    c = xs[1]
    attrs = {"kernel_shape": list(kernel), "pads": list(pads), "strides": list(strides)}
    inits, ins = [], ["x"]
    if op == "Conv":
        wt = rng.standard_normal((c, 1) + kernel).astype(np.float32)
        inits, ins, attrs["group"] = [numpy_helper.from_array(wt, "W")], ["x", "W"], c
    ys = [xs[0], c] + [(n + lo + hi - k) // s + 1
                       for n, lo, hi, k, s in zip(xs[2:], pads[:2], pads[2:], kernel, strides)]
    graph = helper.make_graph(
        [helper.make_node(op, ins, ["y"], **attrs)], "w",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(xs))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ys)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("case", sorted(CASES))
def test_partitioned_padding_matches_onnxruntime(case):
    op, xs, kernel, pads, strides = CASES[case]
    rng = np.random.default_rng(37)
    model = _model(op, xs, kernel, pads, strides, rng)
    xv = (rng.standard_normal(xs) * 3 - 1).astype(np.float32)  # negatives meet max's pad
    assert_matches_onnxruntime(model, xv, 1e-5)


def test_depthwise_plane_fills_only_its_border():
    """The scheduled kernel (16 lanes) partitions the pad block and has no whole-plane fill."""
    import nnvm.symbol as sym
    from nnvm_llvm.compiler.codegen import kernel_lowerings
    from nnvm_llvm.compiler.schedules import ScheduleInfo, schedule

    xs = (1, 4, 40, 76)
    y = sym.conv2d(sym.Variable("x"), sym.Variable("w"), channels=4, kernel_size=(3, 3),
                   padding=(1, 1), groups=4, use_bias=False)
    graph, opt = nnvm.compiler.optimize(y, shape={"x": xs},
                                        params={"w": np.ones((4, 1, 3, 3), np.float32)})
    (gl,) = [g for g in kernel_lowerings(graph, opt, 16) if g.kind == "depthwise"]
    info = ScheduleInfo("depthwise", 16)
    text = str(schedule(gl.primfunc(16), info).script())
    assert info.applied
    assert "_partition" in text and "pad_const" not in text
