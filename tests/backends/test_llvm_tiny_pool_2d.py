"""Strided 2-D pools of the row kernel (``pool_rows``) on llvm against onnxruntime: tiny
pools, whose plane loop it unrolls (``TINY_POOL_OUTPUTS``), padded pools whose output row is
one vector, and pools whose padded plane fits in L1 (``PLANE_PAD_MAX_BYTES``: padded whole
once per task, not the rows each output row reads), with padding, ceil mode,
count_include_pad, odd pads and -inf inputs, and larger pools that keep the plain loops.

Why: unrolled, every plane's window is its own straight-line code; padded whole, the window
reads a plane padded before its row loop; a plane, row or column that is off (the ceil-mode
edge window, a one-sided pad, a padded tap counted or not, the next channel's plane) shows up
as a wrong value against the oracle. Planes past L1 and tiny pools measured slower padded
whole, so they must keep the per-row padding."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import nnvm  # noqa: E402
from llvm_probe import build_onnx, ort_outputs  # noqa: E402
from onnx import TensorProto, helper, shape_inference  # noqa: E402

# id: (op, input shape, attributes)
CASES = {
    "avg_2x3x6x6_k2s2": ("AveragePool", (2, 3, 6, 6), dict(kernel_shape=[2, 2],
                                                           strides=[2, 2])),
    "avg_1x64x4x4_k2s2": ("AveragePool", (1, 64, 4, 4), dict(kernel_shape=[2, 2],
                                                             strides=[2, 2])),
    "avg_ceil_include_pad": ("AveragePool", (2, 3, 9, 9), dict(
        kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, count_include_pad=1)),
    "avg_padded_exclude_pad": ("AveragePool", (2, 3, 9, 9), dict(
        kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    "avg_odd_pads_ceil": ("AveragePool", (1, 5, 7, 5), dict(
        kernel_shape=[2, 3], strides=[2, 2], pads=[0, 1, 1, 0], ceil_mode=1)),
    "max_2x3x6x6_k2s2": ("MaxPool", (2, 3, 6, 6), dict(kernel_shape=[2, 2],
                                                       strides=[2, 2])),
    "max_ceil_k3s2": ("MaxPool", (1, 5, 7, 7), dict(kernel_shape=[3, 3], strides=[2, 2],
                                                    ceil_mode=1)),
    "max_padded_k3s2": ("MaxPool", (1, 3, 5, 5), dict(kernel_shape=[3, 3], strides=[2, 2],
                                                      pads=[1, 1, 1, 1])),
    "avg_padded_include_pad": ("AveragePool", (1, 8, 13, 13), dict(
        kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1)),
    "max_padded_rows_of_7": ("MaxPool", (1, 16, 14, 14), dict(
        kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    "avg_not_tiny": ("AveragePool", (4, 8, 16, 16), dict(kernel_shape=[2, 2],
                                                         strides=[2, 2])),
    # one-column planes (PyTorch's AvgPool1d/MaxPool1d exported as 2-D pools)
    "avg_column_k2s2": ("AveragePool", (2, 3, 6, 1), dict(kernel_shape=[2, 1],
                                                          strides=[2, 1])),
    "avg_column_padded_ceil": ("AveragePool", (2, 3, 7, 1), dict(
        kernel_shape=[3, 1], strides=[2, 1], pads=[1, 0, 1, 0], ceil_mode=1)),
    "avg_column_include_pad": ("AveragePool", (1, 4, 9, 1), dict(
        kernel_shape=[3, 1], strides=[2, 1], pads=[1, 0, 0, 0], count_include_pad=1)),
    "max_column_k2s2": ("MaxPool", (2, 3, 6, 1), dict(kernel_shape=[2, 1], strides=[2, 1])),
    # padded planes of at most PLANE_PAD_MAX_BYTES, padded whole
    "avg_plane_pad1_40": ("AveragePool", (1, 8, 40, 40), dict(
        kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    "max_plane_ceil_56": ("MaxPool", (1, 4, 56, 56), dict(
        kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    "avg_plane_ceil_odd": ("AveragePool", (2, 3, 44, 38), dict(
        kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    "avg_plane_include_pad_odd": ("AveragePool", (2, 3, 43, 37), dict(
        kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 0, 1], count_include_pad=1)),
    "avg_plane_odd_pads": ("AveragePool", (1, 6, 33, 47), dict(
        kernel_shape=[2, 3], strides=[2, 2], pads=[0, 1, 1, 0])),
    "max_plane_pad2_k5s3": ("MaxPool", (1, 5, 50, 50), dict(
        kernel_shape=[5, 5], strides=[3, 3], pads=[2, 2, 2, 2])),
    "max_past_l1_80": ("MaxPool", (1, 2, 80, 80), dict(
        kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    # unit stride: the flat window kernel (``flat_window``)
    "max_flat_k3_pad1": ("MaxPool", (1, 3, 8, 8), dict(kernel_shape=[3, 3],
                                                       pads=[1, 1, 1, 1])),
    "avg_flat_k2": ("AveragePool", (2, 4, 9, 9), dict(kernel_shape=[2, 2])),
}


def _model(op, shape, attrs):
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    graph = helper.make_graph(
        [node], "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    return shape_inference.infer_shapes(model, strict_mode=True)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_tiny_pool_matches_onnxruntime(rng, case, threads):
    op, shape, attrs = CASES[case]
    x = rng.standard_normal(shape).astype("float32")
    if op == "MaxPool":
        x.reshape(-1)[::5] = -np.inf
    model = _model(op, list(shape), attrs)
    lib = build_onnx(model, {"x": x}, opt_level=3)
    lib.set_num_threads(threads)
    got = np.asarray(lib.run(x=x)[0])
    want = ort_outputs(model, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case, unrolled", [("avg_2x3x6x6_k2s2", True),
                                            ("max_ceil_k3s2", True),
                                            ("avg_not_tiny", False)])
def test_tiny_pool_unrolls_its_planes(case, unrolled):
    """The row kernel unrolls the plane loop of a tiny pool only (LLVM vectorised it into
    gathers and scatters); a larger pool keeps the loop."""
    text = _scheduled(case, 16)
    assert ("T.unroll(" in text) == unrolled, text


@pytest.mark.parametrize("case, lanes, vector", [("max_padded_rows_of_7", 16, True),
                                                 ("max_padded_rows_of_7", 8, True),
                                                 ("avg_padded_include_pad", 4, False),
                                                 ("max_2x3x6x6_k2s2", 16, False)])
def test_padded_row_of_at_most_a_vector_is_one_vector(case, lanes, vector):
    """A padded pool's output row of at most a vector (the target's lanes) is computed as
    one vector; rows longer than a vector and unpadded rows stay plain loops."""
    assert ("T.vectorized(" in _scheduled(case, lanes)) == vector


@pytest.mark.parametrize("case", ["avg_column_k2s2", "max_ceil_k3s2", "avg_not_tiny",
                                  "max_padded_rows_of_7", "max_flat_k3_pad1", "avg_flat_k2"])
def test_pool_accumulator_is_no_local_buffer(case):
    """The window accumulator is a "global" buffer (a stack array on the CPU), not a
    "local" one, which TVM lowers to a workspace allocation and release on every call (the
    whole time of a 36-element pool, twice a one-element kernel's)."""
    text = _scheduled(case, 16)
    assert "anchor_pool_global" in text and 'scope="local"' not in text, text


@pytest.mark.parametrize("case, whole", [
    ("avg_plane_pad1_40", True), ("max_plane_ceil_56", True), ("avg_plane_ceil_odd", True),
    ("avg_plane_include_pad_odd", True), ("avg_plane_odd_pads", True),
    ("max_plane_pad2_k5s3", True), ("max_past_l1_80", False),
    ("max_padded_rows_of_7", False)])
def test_padding_is_per_plane_only_where_it_fits(case, whole):
    """The pad block sits under the plane loop (outside the output-row loop) for planes up
    to ``PLANE_PAD_MAX_BYTES`` of pools that are not tiny, under the output-row loop for
    larger planes and tiny pools."""
    from tvm import s_tir

    sch = s_tir.Schedule(_scheduled(case, 16, text=False))
    pad = next(b for b in sch.get_child_blocks(sch.get_sblock("root"))
               if sch.get(b).name_hint.startswith("pad_"))
    row = sch.get_loops(sch.get_sblock("anchor_pool_update"))[1]
    under_row = any(sch.get(lp).same_as(sch.get(row)) for lp in sch.get_loops(pad))
    assert under_row != whole, sch.mod.script()


def _scheduled(case, lanes, text=True):
    from nnvm_llvm.compiler.codegen import kernel_lowerings
    from nnvm_llvm.compiler.schedules import schedule

    op, shape, attrs = CASES[case]
    g, params = nnvm.frontend.from_onnx(_model(op, list(shape), attrs), shape={"x": shape})
    graph, params = nnvm.compiler.optimize(g, shape={"x": shape}, params=params)
    (gl,) = [gl for gl in kernel_lowerings(graph, params, lanes) if gl.kind == "pool"]
    info = gl.schedule_info(lanes)
    func = schedule(gl.primfunc(lanes), info)
    assert info.applied, func.script()
    return func.script() if text else func
