"""N-d (1-D, 3-D) MaxPool on llvm against onnxruntime, values and argmax indices, on the
shapes the row template's twin-output path takes (``rows_schedule._schedule_twins``): the
window max and its indices computed in one pass, each output element right after its
window, short rows fused into one loop, long rows (and 3-D pools) kept as vectorisable rows.

Why: the path merges the loops of two outputs and moves the window under them; a wrong
merge or a row boundary that is off shows up as a wrong value or index against the oracle.
Ties (the first maximum's index wins), -inf, padding, dilation and ceil mode are included."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")
pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import nnvm  # noqa: E402
from onnx import TensorProto, helper, shape_inference  # noqa: E402

# id: (input shape, MaxPool attributes)
CASES = {
    "1d_row_of_one": ((2, 10, 4), dict(kernel_shape=[4], strides=[4])),
    "1d_short_rows": ((3, 5, 12), dict(kernel_shape=[2], strides=[2])),
    "1d_padded_odd": ((3, 5, 11), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    "1d_long_rows": ((2, 8, 400), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    "1d_parallel_rows": ((1, 64, 4001), dict(kernel_shape=[4], strides=[4])),
    "1d_dilated_ceil": ((2, 3, 17), dict(kernel_shape=[3], strides=[2], dilations=[2],
                                         ceil_mode=1)),
    "3d": ((2, 3, 5, 5, 5), dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2])),
    "3d_padded": ((1, 3, 7, 7, 7), dict(kernel_shape=[3, 3, 3], strides=[2, 2, 2],
                                        pads=[1, 1, 1, 1, 1, 1])),
}


def _model(shape, attrs, indices: bool):
    outs = ["y", "i"] if indices else ["y"]
    node = helper.make_node("MaxPool", ["x"], outs, **attrs)
    graph = helper.make_graph(
        [node], "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
        + ([helper.make_tensor_value_info("i", TensorProto.INT64, None)] if indices else []))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    model.ir_version = 8
    return shape_inference.infer_shapes(model, strict_mode=True)  # typed outputs


def _both(shape, attrs, x, indices: bool):
    model = _model(list(shape), attrs, indices)
    g, params = nnvm.frontend.from_onnx(model, shape={"x": x.shape})
    lib = nnvm.compiler.build(g, target="llvm", opt_level=3, shape={"x": x.shape},
                              params=params)
    got = [np.asarray(o) for o in lib.run(x=x)]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return got, sess.run(None, {"x": x})


@pytest.mark.parametrize("indices", [False, True], ids=["values", "with_indices"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_max_pool_matches_onnxruntime(rng, case, indices):
    shape, attrs = CASES[case]
    # integers make ties common: the first maximum's index must win, as in onnxruntime
    x = rng.integers(-3, 4, size=shape).astype("float32")
    x.reshape(-1)[::7] = -np.inf
    got, want = _both(shape, attrs, x, indices)
    assert len(got) == len(want)
    np.testing.assert_array_equal(got[0], want[0])
    if indices:
        np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("case", sorted(CASES))
def test_max_pool_kernel_takes_the_row_template(case):
    """The window max and its indices are scheduled by the row template (``applied``), not
    left to the fallback's three scalar passes."""
    from nnvm_llvm.compiler.codegen import kernel_lowerings
    from nnvm_llvm.compiler.schedules import schedule

    shape, attrs = CASES[case]
    g, params = nnvm.frontend.from_onnx(_model(list(shape), attrs, True), shape={"x": shape})
    graph, params = nnvm.compiler.optimize(g, shape={"x": shape}, params=params)
    pools = [gl for gl in kernel_lowerings(graph, params, 16) if gl.kind == "reduce"]
    assert pools
    for gl in pools:
        info = gl.schedule_info(16)
        text = schedule(gl.primfunc(16), info).script()
        assert info.applied, text


@pytest.mark.parametrize("case, unrolled", [("1d_row_of_one", True), ("3d", True),
                                            ("1d_padded_odd", False),
                                            ("1d_parallel_rows", False)])
def test_max_pool_unrolls_a_few_rows(case, unrolled):
    """A pool of at most ``UNROLLED_POOL_ROWS`` rows has its row loop unrolled (LLVM
    vectorised it into gathers and scatters); more rows keep the loop."""
    from nnvm_llvm.compiler.codegen import kernel_lowerings
    from nnvm_llvm.compiler.schedules import schedule

    shape, attrs = CASES[case]
    g, params = nnvm.frontend.from_onnx(_model(list(shape), attrs, False), shape={"x": shape})
    graph, params = nnvm.compiler.optimize(g, shape={"x": shape}, params=params)
    (gl,) = [gl for gl in kernel_lowerings(graph, params, 16) if gl.kind == "reduce"]
    text = schedule(gl.primfunc(16), gl.schedule_info(16)).script()
    assert ("T.unroll(" in text) == unrolled, text
