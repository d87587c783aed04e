"""If / Loop / Scan: subgraphs run at run time in the reference interpreter (FReferenceNode),
and constant conditions are resolved at import time; checked against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import nnvm
from onnx_test_helpers import make_model, nnvm_run, ort_run, tensor

H = helper.make_node
F32 = TensorProto.FLOAT


def _ops(graph):
    return {n.op.name for n in graph.index.nodes if n.op is not None}


def loop_model(trip: int):
    """Loop with a static trip count: carried accumulator + per-iteration scan output that
    reads an outer-scope value (captured)."""
    body = helper.make_graph(
        [H("Identity", ["cond_in"], ["cond_out"]),
         H("Cast", ["i"], ["i_f"], to=F32),
         H("Mul", ["x", "i_f"], ["xi"]),
         H("Add", ["acc_in", "xi"], ["acc_out"]),
         H("Mul", ["acc_out", "scale"], ["scan_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", F32, [3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", F32, [3]),
         helper.make_tensor_value_info("scan_out", F32, [3])])
    return make_model(
        [H("Loop", ["M", "cond", "acc0"], ["acc", "scans"], body=body)],
        [helper.make_tensor_value_info("x", F32, [3]),
         helper.make_tensor_value_info("acc0", F32, [3])],
        [helper.make_tensor_value_info("acc", F32, [3]),
         helper.make_tensor_value_info("scans", F32, [trip, 3])],
        [tensor("M", np.array(trip, np.int64)), tensor("cond", np.array(True)),
         tensor("scale", np.array(0.5, np.float32))], opset=16)


def test_loop_static_trip_runs_at_run_time(rng):
    model = loop_model(4)
    feed = {"x": rng.standard_normal(3).astype(np.float32),
            "acc0": rng.standard_normal(3).astype(np.float32)}
    graph, _ = nnvm.frontend.from_onnx(model)
    assert "loop" in _ops(graph)
    got, want = nnvm_run(model, feed), ort_run(model, feed)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_loop_with_constant_inputs_folds():
    model = loop_model(3)
    graph, params = nnvm.frontend.from_onnx(model, freeze={"x": np.ones(3, np.float32),
                                                           "acc0": np.zeros(3, np.float32)})
    assert _ops(graph) == set()  # evaluated at import time
    assert params


def scan_model():
    """Cumulative sum over the sequence axis of (seq, batch, 2) plus a reversed pass."""
    body = helper.make_graph(
        [H("Add", ["s_in", "x_t"], ["s_out"]), H("Identity", ["s_out"], ["y_t"])], "body",
        [helper.make_tensor_value_info("s_in", F32, [2]),
         helper.make_tensor_value_info("x_t", F32, [2])],
        [helper.make_tensor_value_info("s_out", F32, [2]),
         helper.make_tensor_value_info("y_t", F32, [2])])
    return make_model(
        [H("Scan", ["s0", "xs"], ["s", "ys"], body=body, num_scan_inputs=1,
           scan_input_axes=[1], scan_input_directions=[1], scan_output_axes=[0])],
        [helper.make_tensor_value_info("s0", F32, [2]),
         helper.make_tensor_value_info("xs", F32, [2, 5])],
        [helper.make_tensor_value_info("s", F32, [2]),
         helper.make_tensor_value_info("ys", F32, [5, 2])], opset=16)


def test_scan_axes_and_directions(rng):
    model = scan_model()
    feed = {"s0": rng.standard_normal(2).astype(np.float32),
            "xs": rng.standard_normal((2, 5)).astype(np.float32)}
    for g, w in zip(nnvm_run(model, feed), ort_run(model, feed)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("flag", [True, False])
def test_if_with_constant_condition_is_inlined(flag):
    then_g = helper.make_graph([H("Relu", ["x"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", F32, [4])])
    else_g = helper.make_graph([H("Neg", ["x"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", F32, [4])])
    model = make_model([H("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
                       [helper.make_tensor_value_info("x", F32, [4])],
                       [helper.make_tensor_value_info("y", F32, [4])],
                       [tensor("c", np.array(flag))])
    graph, _ = nnvm.frontend.from_onnx(model)
    assert _ops(graph) == ({"relu"} if flag else {"negative"})
    x = np.array([-1, 2, -3, 4], np.float32)
    np.testing.assert_array_equal(nnvm_run(model, {"x": x})[0], ort_run(model, {"x": x})[0])
