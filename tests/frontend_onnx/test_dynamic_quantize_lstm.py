"""``com.microsoft.DynamicQuantizeLSTM`` (onnxruntime's dynamically quantised LSTM, as shipped
in ddddocr's ``common_old.onnx``) against onnxruntime: every direction, signed and unsigned
weights, per-tensor and per-column scales, with and without initial states."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import nnvm  # noqa: E402
from nnvm.backend import get_backend  # noqa: E402

LLVM_REASON = get_backend("llvm", require_available=False).compiler_available()
TARGETS = ["reference", pytest.param("llvm", marks=pytest.mark.skipif(
    LLVM_REASON is not None, reason=str(LLVM_REASON)))]
SEQ, BATCH, INPUT, HIDDEN = 5, 2, 6, 4


def _model(rng, direction, per_column=False, signed=True, states=True, **attrs):
    dirs = 2 if direction == "bidirectional" else 1
    qtype, lo, hi = (np.int8, -100, 100) if signed else (np.uint8, 0, 255)
    w = rng.integers(lo, hi, (dirs, INPUT, 4 * HIDDEN)).astype(qtype)
    r = rng.integers(lo, hi, (dirs, HIDDEN, 4 * HIDDEN)).astype(qtype)
    b = (rng.standard_normal((dirs, 8 * HIDDEN)) * 0.1).astype(np.float32)
    sshape = (dirs, 4 * HIDDEN) if per_column else (dirs,)
    scales = [rng.uniform(0.005, 0.02, sshape).astype(np.float32) for _ in range(2)]
    zp = np.zeros(sshape, qtype) if signed else np.full(sshape, 128, qtype)
    consts = {"W": w, "R": r, "B": b, "ws": scales[0], "wz": zp, "rs": scales[1], "rz": zp}
    names = ["X", "W", "R", "B", "", "h0" if states else "", "c0" if states else "", "",
             "ws", "wz", "rs", "rz"]
    node = helper.make_node("DynamicQuantizeLSTM", names, ["Y", "Y_h", "Y_c"],
                            domain="com.microsoft", hidden_size=HIDDEN, direction=direction,
                            **attrs)
    state = [dirs, BATCH, HIDDEN]
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, [SEQ, BATCH, INPUT])]
    if states:
        inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, state)
                   for n in ("h0", "c0")]
    graph = helper.make_graph(
        [node], "g", inputs,
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [SEQ, dirs, BATCH, HIDDEN]),
         helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, state),
         helper.make_tensor_value_info("Y_c", TensorProto.FLOAT, state)],
        initializer=[numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    feed = {"X": rng.standard_normal((SEQ, BATCH, INPUT)).astype(np.float32)}
    if states:
        feed.update(h0=(rng.standard_normal(state) * 0.5).astype(np.float32),
                    c0=(rng.standard_normal(state) * 0.5).astype(np.float32))
    return model, feed


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("direction,per_column,signed,states", [
    ("forward", False, True, True), ("reverse", False, True, True),
    ("bidirectional", False, True, True), ("bidirectional", True, False, False)])
def test_matches_onnxruntime(rng, target, direction, per_column, signed, states):
    model, feed = _model(rng, direction, per_column, signed, states)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feed)
    shapes = {k: v.shape for k, v in feed.items()}
    graph, params = nnvm.frontend.from_onnx(model, shape=shapes)
    lib = nnvm.compiler.build(graph, target=target, shape=shapes, params=params)
    for got, ref in zip(lib.run(**feed), want):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_unsupported_attribute_is_an_nnvm_error(rng):
    model, feed = _model(rng, "forward", clip=3.0)
    with pytest.raises(nnvm.NNVMError, match="DynamicQuantizeLSTM with clip"):
        nnvm.frontend.from_onnx(model, shape={k: v.shape for k, v in feed.items()})


@pytest.mark.parametrize("target", TARGETS)
def test_dynamic_quantize_linear_is_bit_exact_with_onnxruntime(target):
    """Scale, zero point and codes equal onnxruntime's bit for bit: float32 arithmetic (float64
    moved the scale by an ulp for ~1 in 6 inputs), scale 1 for an all-zero input."""
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    outs = [helper.make_tensor_value_info(n, t, shape) for n, t, shape in
            (("y", TensorProto.UINT8, [64]), ("s", TensorProto.FLOAT, []),
             ("z", TensorProto.UINT8, []))]
    graph = helper.make_graph([node], "dql", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [64])], outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    sess = ort.InferenceSession(model.SerializeToString())
    graph, params = nnvm.frontend.from_onnx(model, shape={"x": (64,)})
    lib = nnvm.compiler.build(graph, target, shape={"x": (64,)}, params=params)
    rng = np.random.default_rng(7)
    feeds = [np.zeros(64, np.float32), np.abs(rng.standard_normal(64)).astype(np.float32),
             -np.abs(rng.standard_normal(64)).astype(np.float32)]
    feeds += [(rng.standard_normal(64) * rng.uniform(0.01, 100)).astype(np.float32)
              for _ in range(40)]
    for x in feeds:
        for got, want in zip(lib.run(x=x), sess.run(None, {"x": x})):
            np.testing.assert_array_equal(got, want)
