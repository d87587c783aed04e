"""Small models with a symbolic batch ``N``, exported the way PyTorch exports them: the
flatten / head-split reshapes take their target shape from a ``Shape -> Gather -> Concat``
subgraph, so the batch flows through shape computation, not only through data."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from onnx_test_helpers import make_model, tensor


def _batch_shape(src: str, tail: list[int], prefix: str) -> list:
    """Nodes computing ``concat(shape(src)[0:1], tail)``, PyTorch's ``x.view(x.size(0), ...)``."""
    return [
        helper.make_node("Shape", [src], [f"{prefix}_shape"]),
        helper.make_node("Gather", [f"{prefix}_shape", f"{prefix}_zero"], [f"{prefix}_n"],
                         axis=0),
        helper.make_node("Unsqueeze", [f"{prefix}_n", f"{prefix}_axes"], [f"{prefix}_n1"]),
        helper.make_node("Concat", [f"{prefix}_n1", f"{prefix}_tail"], [f"{prefix}_target"],
                         axis=0),
    ], [tensor(f"{prefix}_zero", np.array(0, "int64")),
        tensor(f"{prefix}_axes", np.array([0], "int64")),
        tensor(f"{prefix}_tail", np.array(tail, "int64"))]


def small_cnn(seed: int = 0):
    """Conv -> BatchNorm -> Relu -> MaxPool -> view(N, -1) -> Gemm -> Softmax, input
    ``x: (N, 3, 8, 8)``."""
    rng = np.random.default_rng(seed)
    f32 = lambda *s: rng.standard_normal(s).astype("float32") * 0.5  # noqa: E731
    shape_nodes, shape_inits = _batch_shape("pool", [-1], "flat")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["conv"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["conv", "g", "beta", "mu", "var"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["relu"]),
        helper.make_node("MaxPool", ["relu"], ["pool"], kernel_shape=[2, 2], strides=[2, 2]),
        *shape_nodes,
        helper.make_node("Reshape", ["pool", "flat_target"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    inits = [tensor("w", f32(4, 3, 3, 3)), tensor("b", f32(4)), tensor("g", 1 + f32(4)),
             tensor("beta", f32(4)), tensor("mu", f32(4)), tensor("var", 1 + abs(f32(4))),
             tensor("fc_w", f32(5, 4 * 4 * 4)), tensor("fc_b", f32(5)), *shape_inits]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])
    out = helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", 5])
    return make_model(nodes, [x], [out], inits, name="small_cnn")


def tiny_transformer(seed: int = 0, tokens: int = 6, dim: int = 8, heads: int = 2):
    """Embedding -> LayerNorm -> one self-attention block (heads split by a Shape-computed
    Reshape, Transpose, MatMul, Softmax) -> residual -> mean over tokens -> classifier, input
    ``ids: (N, tokens)`` int64, outputs the logits and the attention weights."""
    rng = np.random.default_rng(seed)
    f32 = lambda *s: rng.standard_normal(s).astype("float32") * 0.3  # noqa: E731
    dh = dim // heads
    split_nodes, split_inits = _batch_shape("ln", [tokens, heads, dh], "split")
    merge_nodes, merge_inits = _batch_shape("ln", [tokens, dim], "merge")
    nodes = [
        helper.make_node("Gather", ["emb", "ids"], ["h"], axis=0),
        helper.make_node("LayerNormalization", ["h", "ln_g", "ln_b"], ["ln"], axis=-1),
        *split_nodes, *merge_nodes,
    ]
    for name in "qkv":
        nodes += [helper.make_node("MatMul", ["ln", f"w{name}"], [f"{name}_flat"]),
                  helper.make_node("Reshape", [f"{name}_flat", "split_target"], [f"{name}_4d"]),
                  helper.make_node("Transpose", [f"{name}_4d"], [name],
                                   perm=[0, 2, 3, 1] if name == "k" else [0, 2, 1, 3])]
    nodes += [
        helper.make_node("MatMul", ["q", "k"], ["scores_raw"]),
        helper.make_node("Mul", ["scores_raw", "scale"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["attn"], axis=-1),
        helper.make_node("MatMul", ["attn", "v"], ["ctx_4d"]),
        helper.make_node("Transpose", ["ctx_4d"], ["ctx_t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ctx_t", "merge_target"], ["ctx"]),
        helper.make_node("Add", ["ctx", "h"], ["res"]),
        helper.make_node("ReduceMean", ["res"], ["pooled"], axes=[1], keepdims=0),
        helper.make_node("Gemm", ["pooled", "cls_w", "cls_b"], ["logits"]),
    ]
    inits = [tensor("emb", f32(11, dim)), tensor("ln_g", 1 + f32(dim)), tensor("ln_b", f32(dim)),
             *[tensor(f"w{n}", f32(dim, dim)) for n in "qkv"],
             tensor("scale", np.array(1 / np.sqrt(dh), "float32")),
             tensor("cls_w", f32(dim, 3)), tensor("cls_b", f32(3)),
             *split_inits, *merge_inits]
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", tokens])
    outs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3]),
            helper.make_tensor_value_info("attn", TensorProto.FLOAT, ["N", heads, tokens, tokens])]
    return make_model(nodes, [ids], outs, inits, name="tiny_transformer")


def tiny_lstm(seed: int = 0, steps: int = 5, features: int = 3, hidden: int = 4):
    """A sequence-first LSTM (ONNX ``layout=0``): ``X: (steps, N, features)``, so the batch is
    axis 1 of the input and axis 2 of ``Y``; ``Y_h`` is ``(1, N, hidden)``."""
    rng = np.random.default_rng(seed)
    f32 = lambda *s: rng.standard_normal(s).astype("float32") * 0.4  # noqa: E731
    nodes = [helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y", "Y_h"], hidden_size=hidden)]
    inits = [tensor("W", f32(1, 4 * hidden, features)), tensor("R", f32(1, 4 * hidden, hidden)),
             tensor("B", f32(1, 8 * hidden))]
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [steps, "N", features])
    outs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [steps, 1, "N", hidden]),
            helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, [1, "N", hidden])]
    return make_model(nodes, [x], outs, inits, name="tiny_lstm")


def scaler_linear(features: int = 4):
    """An ONNX-ML pipeline as sklearn-onnx writes one: Scaler -> LinearRegressor on
    ``X: (N, features)``."""
    nodes = [helper.make_node("Scaler", ["X"], ["scaled"], domain="ai.onnx.ml",
                              offset=[0.5] * features, scale=[2.0] * features),
             helper.make_node("LinearRegressor", ["scaled"], ["y"], domain="ai.onnx.ml",
                              coefficients=[0.1 * (k + 1) for k in range(features)],
                              intercepts=[0.25])]
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", features])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1])
    graph = helper.make_graph(nodes, "scaler_linear", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 8
    return model


def pooled_sequence(features: int = 4):
    """``x: (N, T, features)`` -> mean over the tokens -> MatMul: a batch ``N`` and a
    sequence length ``T``, both symbolic."""
    rng = np.random.default_rng(7)
    nodes = [helper.make_node("ReduceMean", ["x"], ["pooled"], axes=[1], keepdims=0),
             helper.make_node("MatMul", ["pooled", "w"], ["y"])]
    inits = [tensor("w", rng.standard_normal((features, 3)).astype("float32"))]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "T", features])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])
    return make_model(nodes, [x], [y], inits, name="pooled_sequence", opset=17)
