"""ONNX AveragePool with ``ceil_mode`` and ``count_include_pad``: a last window hanging past
the padded input is divided by its cells inside the padded input (onnxruntime, the ONNX
reference), not by the whole window as NNVM's own ``avg_pool2d`` does; the importer maps
these to the N-d ``avg_pool``. Checked on the reference runtime and on llvm against
onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402
from onnx_test_helpers import nnvm_run  # noqa: E402

CASES = {
    # id: (input shape, kernel, strides, pads (t, l, b, r), ceil_mode, count_include_pad)
    "ceil_no_pads": ((1, 1, 6, 6), (3, 3), (2, 2), (0, 0, 0, 0), 1, 1),
    "ceil_pads": ((1, 1, 6, 6), (3, 3), (2, 2), (1, 1, 1, 1), 1, 1),
    "ceil_one_sided": ((1, 2, 7, 5), (2, 3), (2, 2), (1, 0, 0, 1), 1, 1),
    "ceil_exact_fit": ((1, 2, 7, 7), (3, 3), (2, 2), (0, 0, 0, 0), 1, 1),
    "floor_counted": ((1, 1, 6, 6), (3, 3), (2, 2), (1, 1, 1, 1), 0, 1),
    "ceil_not_counted": ((1, 1, 6, 6), (3, 3), (2, 2), (1, 1, 1, 1), 1, 0),
}


def _model(case):
    shape, k, s, pads, ceil, count = CASES[case]
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=list(k),
                            strides=list(s), pads=list(pads), ceil_mode=ceil,
                            count_include_pad=count)
    graph = helper.make_graph([node], "avgpool", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


@pytest.mark.parametrize("target", ["reference", "llvm"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_onnxruntime(case, target):
    if target == "llvm":
        pytest.importorskip("tvm")
    model = _model(case)
    x = np.random.default_rng(2).standard_normal(CASES[case][0]).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = np.asarray(nnvm_run(model, {"x": x}, target=target)[0])
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
