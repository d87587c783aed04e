"""The N-d ``max_pool`` rule (dilated windows, the ``Indices`` output, ``storage_order``) on
``llvm`` against onnxruntime, on the 2-D windows large enough to be taken by rows and then
over the rows' maxima (``lowering_nn._separable_max``).

What the two passes could get wrong: the rows a strided, dilated window reads (only rows
``r0 + gcd(stride, dilation) * q`` are reduced), padding on any side (the padded value must
never win), ``ceil_mode`` windows hanging past the input, and the index of the maximum:
ties must resolve to the first position in the window as the one-pass reducer (and
onnxruntime) pick, in row- or column-major order.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import nnvm  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

from nnvm_llvm.compiler.lowering import lowering_nn  # noqa: E402 (after its importer)

CASES = {
    # id: (input shape, kernel, strides, pads (t, l, b, r), dilations, ceil_mode)
    "dilated_strided_padded": ((1, 2, 61, 57), (6, 8), (3, 3), (3, 4, 3, 4), (3, 3), 0),
    "gcd_row_phase": ((2, 3, 40, 33), (4, 5), (4, 2), (1, 0, 2, 1), (2, 3), 0),
    "dense_5x5_indices": ((1, 4, 13, 11), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), 0),
    "ceil_odd": ((1, 3, 23, 19), (4, 4), (3, 2), (0, 1, 0, 0), (2, 1), 1),
    # window rows longer than MAX_PIECE, reduced in pieces and over the pieces: a tail
    # piece (11 = 8 + 3, 21 = 2 * 8 + 5) whose missing taps must never win
    "row_pieces_with_tail": ((1, 2, 30, 47), (3, 11), (2, 3), (1, 5, 0, 5), (2, 2), 0),
    "wide_row_ceil": ((1, 1, 9, 91), (2, 21), (1, 4), (0, 3, 0, 3), (1, 3), 1),
    # as many rows in pieces (11 = 8 + 3) over the rows' maxima
    "tall_window_pieces": ((1, 2, 45, 13), (11, 2), (3, 1), (2, 0, 2, 1), (2, 1), 0),
}


def _model(case, storage_order, with_indices):
    shape, k, s, pads, d, ceil = CASES[case]
    node = helper.make_node("MaxPool", ["x"], ["y", "i"] if with_indices else ["y"],
                            kernel_shape=list(k), strides=list(s), pads=list(pads),
                            dilations=list(d), ceil_mode=ceil, storage_order=storage_order)
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if with_indices:
        outs.append(helper.make_tensor_value_info("i", TensorProto.INT64, None))
    graph = helper.make_graph([node], "maxpool", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))], outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _run(model, x):
    graph, params = nnvm.frontend.from_onnx(model, shape={"x": x.shape})
    lib = nnvm.compiler.build(graph, target="llvm", opt_level=3, shape={"x": x.shape},
                              params=params)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [np.asarray(v) for v in lib.run(x=x)], sess.run(None, {"x": x})


@pytest.mark.parametrize("case", sorted(CASES))
def test_cases_take_the_separable_rule(case):
    _, k, *_ = CASES[case]
    assert k[0] * k[1] >= lowering_nn.SEPARABLE_MIN_TAPS


@pytest.mark.parametrize("axis", [0, 1])
def test_some_cases_reduce_in_pieces_with_a_tail(axis):
    assert any(k[axis] > lowering_nn.MAX_PIECE and k[axis] % lowering_nn.MAX_PIECE
               for _, k, *_ in CASES.values())


@pytest.mark.parametrize("storage_order", [0, 1])
@pytest.mark.parametrize("case", sorted(CASES))
def test_values_and_indices_match_onnxruntime(case, storage_order):
    x = np.random.default_rng(5).standard_normal(CASES[case][0]).astype(np.float32)
    got, want = _run(_model(case, storage_order, True), x)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("case", ["dilated_strided_padded", "dense_5x5_indices",
                                  "row_pieces_with_tail", "tall_window_pieces"])
def test_ties_take_the_first_position(case):
    """Few distinct values: most windows hold their maximum more than once."""
    rng = np.random.default_rng(9)
    x = rng.integers(0, 3, CASES[case][0]).astype(np.float32)
    got, want = _run(_model(case, 0, True), x)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("case", sorted(CASES))
def test_values_only(case):
    """A one-output MaxPool is imported with ``with_indices=False`` and lowered to the
    window max alone (``_max_pool_values``): its rows then windows, padding never winning,
    -inf inputs kept."""
    x = np.random.default_rng(3).standard_normal(CASES[case][0]).astype(np.float32)
    x[..., ::7, ::5] = -np.inf
    got, want = _run(_model(case, 0, False), x)
    np.testing.assert_array_equal(got[0], want[0])


# one-pass windows (too few taps to go by rows): (input shape, kernel, strides, pads,
# dilations, ceil_mode)
WINDOWS = {
    "1d_k4_s4": ((2, 10, 4), (4,), (4,), (0, 0), (1,), 0),
    "1d_dilated_ceil": ((1, 3, 17), (3,), (2,), (1, 0), (2,), 1),
    "3d_k2_s2": ((2, 3, 5, 5, 5), (2, 2, 2), (2, 2, 2), (0,) * 6, (1, 1, 1), 0),
    "3d_padded_ceil": ((1, 3, 7, 7, 7), (3, 3, 3), (2, 2, 2), (1,) * 6, (1, 1, 1), 1),
    "2d_small_dilated": ((1, 2, 9, 8), (2, 3), (1, 2), (1, 1, 0, 1), (2, 1), 0),
}


@pytest.mark.parametrize("case", sorted(WINDOWS))
def test_values_only_windows(case):
    shape, k, s, pads, d, ceil = WINDOWS[case]
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=list(k), strides=list(s),
                            pads=list(pads), dilations=list(d), ceil_mode=ceil)
    graph = helper.make_graph([node], "maxpool", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    x.reshape(-1)[::11] = -np.inf
    got, want = _run(model, x)
    np.testing.assert_array_equal(got[0], want[0])


def test_one_output_maxpool_skips_the_argmax():
    """The importer marks a one-output MaxPool ``with_indices=False`` (a two-output one
    True), and the llvm rule then reduces plain values: its window max is a reduction of
    one value, not the (position, value) pair."""
    from types import SimpleNamespace

    from tvm import te

    shape = CASES["dilated_strided_padded"][0]
    for with_indices in (False, True):
        model = _model("dilated_strided_padded", 0, with_indices)
        graph, _ = nnvm.frontend.from_onnx(model, shape={"x": shape})
        pools = [n for n in graph.index.nodes if n.op is not None and n.op.name == "max_pool"]
        assert [n.attrs["with_indices"] for n in pools] == [with_indices]
        out = tuple(d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim)
        ins = [te.placeholder(shape, name="x")]
        y, _ = lowering_nn._max_pool(pools[0].attrs, ins, [(out, "float32"), (out, "int64")],
                                     SimpleNamespace(name="pool"))
        anchor = y.op.input_tensors[0].op
        assert anchor.name == "anchor_maxpool"
        assert anchor.num_outputs == (2 if with_indices else 1)
