"""Convolution shapes the llvm templates once handled badly, checked against onnxruntime.

1-D convolutions import as ``conv2d`` over a height-1 image (so they get the blocked conv
template), output channel counts that no vector block divides are computed into zero-padded
blocks, and widths with no small divisor get an uneven register tile. Each case is an ONNX
Conv built with ``onnx.helper`` and compared on ``llvm`` and ``reference``.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("tvm")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import nnvm  # noqa: E402

CASES = {
    # id: (input shape, weight shape, strides, pads, dilations, group)
    "stft_prime_oc_prime_width": ((1, 1, 2000), (257, 1, 128), (20,), (0, 0), (1,), 1),
    "wav2vec_like": ((1, 1, 800), (32, 1, 10), (5,), (0, 0), (1,), 1),
    "vad_encoder_pad_asym": ((1, 129, 4), (128, 129, 3), (1,), (1, 0), (1,), 1),
    "odd_channels_dilated": ((2, 5, 37), (7, 5, 3), (2,), (2, 2), (2,), 1),
    "grouped_1d": ((1, 16, 50), (16, 4, 5), (1,), (2, 2), (1,), 4),
    "depthwise_1d": ((1, 12, 31), (12, 1, 3), (1,), (1, 1), (1,), 12),
    "prime_oc_2d": ((1, 3, 13, 11), (17, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    "three_classes_1x1": ((1, 8, 9, 9), (3, 8, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),
    "grouped_2d_blocked": ((1, 64, 10, 10), (64, 16, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 4),
    "grouped_2d_regnet": ((1, 48, 9, 9), (48, 8, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 6),
    "grouped_2d_odd": ((1, 12, 7, 7), (18, 4, 3, 3), (1, 1), (0, 1, 2, 1), (1, 1), 3),
    "column_image_jax_conv1d": ((1, 24, 40, 1), (32, 24, 5, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),
    "depthwise_multiplier": ((1, 8, 9, 9), (32, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 8),
}


def _model(xs, ws, strides, pads, dil, group, bias):
    rng = np.random.default_rng(sum(xs) + sum(ws))
    w = rng.standard_normal(ws).astype("float32")
    inits = [numpy_helper.from_array(w, "w")]
    ins = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(ws[0]).astype("float32"), "b"))
        ins.append("b")
    node = helper.make_node("Conv", ins, ["y"], strides=list(strides), pads=list(pads),
                            dilations=list(dil), group=group, kernel_shape=list(ws[2:]))
    nsp = len(xs) - 2
    out = [xs[0], ws[0]] + [
        (xs[2 + i] + pads[i] + pads[nsp + i] - dil[i] * (ws[2 + i] - 1) - 1) // strides[i] + 1
        for i in range(nsp)]
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, list(xs))], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, out)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_conv_matches_onnxruntime(case, bias):
    xs, ws, strides, pads, dil, group = CASES[case]
    model = _model(xs, ws, strides, pads, dil, group, bias)
    x = np.random.default_rng(1).standard_normal(xs).astype("float32")
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    graph, params = nnvm.frontend.from_onnx(model, shape={"x": xs})
    if len(xs) == 3:  # 1-D imports as conv2d on a height-1 image
        assert "conv2d" in {n.op.name for n in graph.index.nodes if n.op is not None}
    for target in ("llvm", "reference"):
        lib = nnvm.compiler.build(graph, target=target, shape={"x": xs}, params=params)
        got = lib.run(x=x)[0]
        assert got.shape == want.shape, target
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=target)
        assert lib.stats().get("num_fallback_kernels", 0) == 0


@pytest.mark.parametrize("tokens", [197, 33])
def test_attention_matmuls_with_prime_token_counts(tokens):
    """Q K^T (K transposed by its own node, kept materialised) and P V with a token count
    no tile divides (ViT: 196 patches + 1): uneven, predicated register tiles."""
    q = helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, 2, tokens, 16])
    k = helper.make_tensor_value_info("k", TensorProto.FLOAT, [1, 2, tokens, 16])
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "q"], ["o"])]
    graph = helper.make_graph(nodes, "attn", [q, k], [helper.make_tensor_value_info(
        "o", TensorProto.FLOAT, [1, 2, tokens, 16])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    rng = np.random.default_rng(tokens)
    feed = {n: rng.standard_normal((1, 2, tokens, 16)).astype("float32") for n in ("q", "k")}
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feed)[0]
    shapes = {n: v.shape for n, v in feed.items()}
    graph, params = nnvm.frontend.from_onnx(model, shape=shapes)
    lib = nnvm.compiler.build(graph, target="llvm", shape=shapes, params=params)
    np.testing.assert_allclose(lib.run(**feed)[0], want, rtol=1e-4, atol=1e-5)
