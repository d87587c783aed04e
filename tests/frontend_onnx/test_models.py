"""Models built in code in the style of real exports, checked against onnxruntime.

Each mimics what a common exporter emits: dynamic batch dims resolved through Shape/Gather/
Concat arithmetic, decomposed activations and norms, control flow. The importer must
specialise them to static graphs given concrete input shapes and match onnxruntime.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnx_test_helpers import make_model, nnvm_run, ort_run, tensor

H = helper.make_node
F32 = TensorProto.FLOAT


def _w(rng, *shape, scale=0.2):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _shape_of_batch(prefix, src):
    """Shape(src)[0:1] as a 1-D int64 tensor: the exporter's dynamic batch arithmetic."""
    return [H("Shape", [src], [f"{prefix}_shape"]),
            H("Gather", [f"{prefix}_shape", "c_zero"], [f"{prefix}_batch0"], axis=0),
            H("Unsqueeze", [f"{prefix}_batch0", "c_axes0"], [f"{prefix}_batch"])]


def yolo_model(rng):
    """Backbone conv + SiLU, stride-2 conv, nearest Resize upsample, Concat (FPN), a head
    whose output is reshaped with a batch size computed from Shape, then Split into
    boxes / objectness / classes, and box decoding with Sigmoid and Mul."""
    inits = [tensor("w1", _w(rng, 8, 3, 3, 3)), tensor("b1", _w(rng, 8)),
             tensor("w2", _w(rng, 16, 8, 3, 3)), tensor("b2", _w(rng, 16)),
             tensor("w3", _w(rng, 3 * 7, 24, 1, 1)), tensor("b3", _w(rng, 3 * 7)),
             tensor("scales", np.array([1, 1, 2, 2], dtype=np.float32)),
             tensor("c_zero", np.array(0, dtype=np.int64)),
             tensor("c_axes0", np.array([0], dtype=np.int64)),
             tensor("tail", np.array([3, 7, -1], dtype=np.int64)),
             tensor("split", np.array([4, 1, 2], dtype=np.int64)),
             tensor("stride", np.array(8.0, dtype=np.float32))]
    nodes = [
        H("Conv", ["images", "w1", "b1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        H("Sigmoid", ["c1"], ["s1"]), H("Mul", ["c1", "s1"], ["a1"]),
        H("Conv", ["a1", "w2", "b2"], ["c2"], kernel_shape=[3, 3], strides=[2, 2],
          auto_pad="SAME_UPPER"),
        H("Sigmoid", ["c2"], ["s2"]), H("Mul", ["c2", "s2"], ["a2"]),
        H("Resize", ["a2", "", "scales"], ["up"], mode="nearest",
          coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        H("Concat", ["up", "a1"], ["fpn"], axis=1),
        H("Conv", ["fpn", "w3", "b3"], ["head"], kernel_shape=[1, 1]),
        *_shape_of_batch("hb", "head"),
        H("Concat", ["hb_batch", "tail"], ["newshape"], axis=0),
        H("Reshape", ["head", "newshape"], ["r"]),
        H("Transpose", ["r"], ["t"], perm=[0, 1, 3, 2]),
        H("Split", ["t", "split"], ["box", "obj", "cls"], axis=3),
        H("Sigmoid", ["box"], ["box_s"]), H("Mul", ["box_s", "stride"], ["boxes"]),
        H("Sigmoid", ["obj"], ["objectness"]), H("Softmax", ["cls"], ["classes"], axis=-1),
    ]
    inputs = [helper.make_tensor_value_info("images", F32, ["batch", 3, 16, 16])]
    outputs = [helper.make_tensor_value_info(n, F32, [None] * 4)
               for n in ("boxes", "objectness", "classes")]
    return make_model(nodes, inputs, outputs, inits, name="yolo_like")


def ocr_model(rng):
    """MobileNetV3-style: conv + BN + hard-swish (x * HardSigmoid(x)), depthwise conv with
    ReLU6 as Clip, a squeeze-excite block (GlobalAveragePool, 1x1 convs, HardSigmoid), a
    ConvTranspose upsampler, then a CTC-style head: Transpose + Softmax over classes."""
    c = 8
    inits = [tensor("w0", _w(rng, c, 1, 3, 3)),
             tensor("bn_s", (1 + 0.1 * rng.standard_normal(c)).astype(np.float32)),
             tensor("bn_b", _w(rng, c)), tensor("bn_m", _w(rng, c)),
             tensor("bn_v", (1 + np.abs(rng.standard_normal(c))).astype(np.float32)),
             tensor("wdw", _w(rng, c, 1, 3, 3)), tensor("bdw", _w(rng, c)),
             tensor("wse1", _w(rng, 4, c, 1, 1)), tensor("wse2", _w(rng, c, 4, 1, 1)),
             tensor("wup", _w(rng, c, 6, 2, 2)), tensor("bup", _w(rng, 6)),
             tensor("lo", np.array(0.0, dtype=np.float32)),
             tensor("hi", np.array(6.0, dtype=np.float32)),
             tensor("sq_axes", np.array([2], dtype=np.int64))]
    nodes = [
        H("Conv", ["image", "w0"], ["c0"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
          strides=[2, 2]),
        H("BatchNormalization", ["c0", "bn_s", "bn_b", "bn_m", "bn_v"], ["bn"],
          epsilon=1e-3),
        H("HardSigmoid", ["bn"], ["hs"], alpha=1.0 / 6, beta=0.5),
        H("Mul", ["bn", "hs"], ["hswish"]),
        H("Conv", ["hswish", "wdw", "bdw"], ["dw"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
          group=c),
        H("Clip", ["dw", "lo", "hi"], ["relu6"]),
        H("GlobalAveragePool", ["relu6"], ["gap"]),
        H("Conv", ["gap", "wse1"], ["se1"], kernel_shape=[1, 1]), H("Relu", ["se1"], ["se1r"]),
        H("Conv", ["se1r", "wse2"], ["se2"], kernel_shape=[1, 1]),
        H("HardSigmoid", ["se2"], ["gate"]),
        H("Mul", ["relu6", "gate"], ["se"]),
        H("ConvTranspose", ["se", "wup", "bup"], ["up"], kernel_shape=[2, 2], strides=[2, 2]),
        H("ReduceMean", ["up"], ["pooled"], axes=[2], keepdims=1),
        H("Squeeze", ["pooled", "sq_axes"], ["seq"]),
        H("Transpose", ["seq"], ["tbc"], perm=[2, 0, 1]),
        H("Softmax", ["tbc"], ["probs"], axis=-1),
    ]
    inputs = [helper.make_tensor_value_info("image", F32, ["batch", 1, 8, 32])]
    outputs = [helper.make_tensor_value_info("probs", F32, [None] * 3)]
    return make_model(nodes, inputs, outputs, inits, opset=13, name="ocr_like")


def bert_model(rng, layers: int = 1):
    """BERT-style encoder: word + position embeddings (Gather; positions from Range over
    Shape), decomposed LayerNorm, multi-head attention whose head split uses Shape/Gather/
    Concat/Reshape arithmetic on dynamic batch and sequence dims, Erf GELU, residuals."""
    vocab, d, heads, ff = 50, 16, 2, 32
    dh = d // heads
    inits = [tensor("word_emb", _w(rng, vocab, d)), tensor("pos_emb", _w(rng, 64, d)),
             tensor("c_zero", np.array(0, dtype=np.int64)),
             tensor("c_one", np.array(1, dtype=np.int64)),
             tensor("c_axes0", np.array([0], dtype=np.int64)),
             tensor("c_heads", np.array([heads, dh], dtype=np.int64)),
             tensor("c_d", np.array([d], dtype=np.int64)),
             tensor("eps", np.array(1e-12, dtype=np.float32)),
             tensor("two", np.array(2.0, dtype=np.float32)),
             tensor("half", np.array(0.5, dtype=np.float32)),
             tensor("onef", np.array(1.0, dtype=np.float32)),
             tensor("sqrt2", np.array(np.sqrt(2.0), dtype=np.float32)),
             tensor("scale", np.array(np.sqrt(dh), dtype=np.float32))]
    nodes = [
        H("Gather", ["input_ids", "word_emb"][::-1], ["we"], axis=0),
        H("Shape", ["input_ids"], ["ids_shape"]),
        H("Gather", ["ids_shape", "c_one"], ["seq_len"], axis=0),
        H("Range", ["c_zero", "seq_len", "c_one"], ["positions"]),
        H("Gather", ["pos_emb", "positions"], ["pe"], axis=0),
        H("Add", ["we", "pe"], ["h0"]),
    ]

    def layer_norm(x, out, p):
        gamma = f"{p}_gamma"
        beta = f"{p}_beta"
        inits.extend([tensor(gamma, (1 + 0.1 * rng.standard_normal(d)).astype(np.float32)),
                      tensor(beta, _w(rng, d))])
        nodes.extend([
            H("ReduceMean", [x], [f"{p}_mean"], axes=[-1]),
            H("Sub", [x, f"{p}_mean"], [f"{p}_c"]),
            H("Pow", [f"{p}_c", "two"], [f"{p}_sq"]),
            H("ReduceMean", [f"{p}_sq"], [f"{p}_var"], axes=[-1]),
            H("Add", [f"{p}_var", "eps"], [f"{p}_ve"]),
            H("Sqrt", [f"{p}_ve"], [f"{p}_std"]),
            H("Div", [f"{p}_c", f"{p}_std"], [f"{p}_n"]),
            H("Mul", [f"{p}_n", gamma], [f"{p}_g"]),
            H("Add", [f"{p}_g", beta], [out])])

    def linear(x, out, p, n_in, n_out):
        inits.extend([tensor(f"{p}_w", _w(rng, n_in, n_out)), tensor(f"{p}_b", _w(rng, n_out))])
        nodes.extend([H("MatMul", [x, f"{p}_w"], [f"{p}_mm"]),
                      H("Add", [f"{p}_mm", f"{p}_b"], [out])])

    layer_norm("h0", "x0", "ln_emb")
    x = "x0"
    for i in range(layers):
        p = f"l{i}"
        nodes.extend([H("Shape", [x], [f"{p}_shape"]),
                      H("Slice", [f"{p}_shape", "c_axes0", "c_heads"][:2] + ["c_two_end"],
                        [f"{p}_bs"])])
        for name in ("q", "k", "v"):
            linear(x, f"{p}_{name}", f"{p}_{name}", d, d)
            nodes.extend([
                H("Concat", [f"{p}_bs", "c_heads"], [f"{p}_{name}_shape"], axis=0),
                H("Reshape", [f"{p}_{name}", f"{p}_{name}_shape"], [f"{p}_{name}_r"]),
                H("Transpose", [f"{p}_{name}_r"], [f"{p}_{name}_t"],
                  perm=[0, 2, 3, 1] if name == "k" else [0, 2, 1, 3])])
        nodes.extend([
            H("MatMul", [f"{p}_q_t", f"{p}_k_t"], [f"{p}_scores"]),
            H("Div", [f"{p}_scores", "scale"], [f"{p}_scaled"]),
            H("Add", [f"{p}_scaled", "attn_mask_f"], [f"{p}_masked"]),
            H("Softmax", [f"{p}_masked"], [f"{p}_probs"], axis=-1),
            H("MatMul", [f"{p}_probs", f"{p}_v_t"], [f"{p}_ctx"]),
            H("Transpose", [f"{p}_ctx"], [f"{p}_ctx_t"], perm=[0, 2, 1, 3]),
            H("Concat", [f"{p}_bs", "c_d"], [f"{p}_merge_shape"], axis=0),
            H("Reshape", [f"{p}_ctx_t", f"{p}_merge_shape"], [f"{p}_merged"])])
        linear(f"{p}_merged", f"{p}_attn", f"{p}_o", d, d)
        nodes.append(H("Add", [x, f"{p}_attn"], [f"{p}_res1"]))
        layer_norm(f"{p}_res1", f"{p}_x1", f"{p}_ln1")
        linear(f"{p}_x1", f"{p}_ff1", f"{p}_ff1", d, ff)
        nodes.extend([
            H("Div", [f"{p}_ff1", "sqrt2"], [f"{p}_g1"]), H("Erf", [f"{p}_g1"], [f"{p}_g2"]),
            H("Add", [f"{p}_g2", "onef"], [f"{p}_g3"]),
            H("Mul", [f"{p}_ff1", f"{p}_g3"], [f"{p}_g4"]),
            H("Mul", [f"{p}_g4", "half"], [f"{p}_gelu"])])
        linear(f"{p}_gelu", f"{p}_ff2", f"{p}_ff2", ff, d)
        nodes.append(H("Add", [f"{p}_x1", f"{p}_ff2"], [f"{p}_res2"]))
        layer_norm(f"{p}_res2", f"{p}_out", f"{p}_ln2")
        x = f"{p}_out"
    inits.append(tensor("c_two_end", np.array([2], dtype=np.int64)))
    # attention mask (batch, seq) of 0/1 -> additive (batch, 1, 1, seq)
    inits.append(tensor("mask_axes", np.array([1, 2], dtype=np.int64)))
    inits.append(tensor("neg", np.array(-10000.0, dtype=np.float32)))
    nodes[:0] = [H("Cast", ["attention_mask"], ["mask_f"], to=F32),
                 H("Unsqueeze", ["mask_f", "mask_axes"], ["mask_4d"]),
                 H("Sub", ["onef", "mask_4d"], ["mask_inv"]),
                 H("Mul", ["mask_inv", "neg"], ["attn_mask_f"])]
    nodes.append(H("Identity", [x], ["last_hidden_state"]))
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                            ["batch", "seq"])]
    outputs = [helper.make_tensor_value_info("last_hidden_state", F32, [None] * 3)]
    return make_model(nodes, inputs, outputs, inits, opset=13, name="bert_like")


def vad_model(rng, same_framing: bool = False):
    """Silero-VAD style: an If on the sample rate picks the framing (16 kHz: frames of 32;
    8 kHz: frames of 16 duplicated to 32, or with ``same_framing`` the 16 kHz framing
    scaled by 2), then an LSTM with state inputs, a Gemm head and a Sigmoid speech
    probability; the new LSTM state is returned too."""
    hidden, feat = 8, 32
    inits = [tensor("W", _w(rng, 1, 4 * hidden, feat)), tensor("R", _w(rng, 1, 4 * hidden, hidden)),
             tensor("B", _w(rng, 1, 8 * hidden)), tensor("head_w", _w(rng, 1, hidden)),
             tensor("head_b", _w(rng, 1)), tensor("sr16k", np.array(16000, dtype=np.int64)),
             tensor("frames32", np.array([-1, 1, feat], dtype=np.int64)),
             tensor("frames16", np.array([-1, 1, feat // 2], dtype=np.int64)),
             tensor("twof", np.array(2.0, dtype=np.float32)),
             tensor("last", np.array([-1, hidden], dtype=np.int64))]
    then_g = helper.make_graph(
        [H("Reshape", ["audio", "frames32"], ["then_out"])], "sr16k_branch", [],
        [helper.make_tensor_value_info("then_out", F32, [None] * 3)])
    if same_framing:
        else_nodes = [H("Reshape", ["audio", "frames32"], ["framed"]),
                      H("Mul", ["framed", "twof"], ["else_out"])]
    else:
        else_nodes = [H("Reshape", ["audio", "frames16"], ["half_frames"]),
                      H("Concat", ["half_frames", "half_frames"], ["else_out"], axis=2)]
    else_g = helper.make_graph(else_nodes, "sr8k_branch", [],
                               [helper.make_tensor_value_info("else_out", F32, [None] * 3)])
    nodes = [
        H("Equal", ["sr", "sr16k"], ["is16k"]),
        H("If", ["is16k"], ["frames"], then_branch=then_g, else_branch=else_g),
        H("LSTM", ["frames", "W", "R", "B", "", "h0", "c0"], ["Y", "Y_h", "Y_c"],
          hidden_size=hidden),
        H("Reshape", ["Y", "last"], ["y2"]),
        H("Gemm", ["y2", "head_w", "head_b"], ["logit"], transB=1),
        H("Sigmoid", ["logit"], ["speech_prob"]),
    ]
    inputs = [helper.make_tensor_value_info("audio", F32, [1, "samples"]),
              helper.make_tensor_value_info("sr", TensorProto.INT64, []),
              helper.make_tensor_value_info("h0", F32, [1, 1, hidden]),
              helper.make_tensor_value_info("c0", F32, [1, 1, hidden])]
    outputs = [helper.make_tensor_value_info("speech_prob", F32, [None] * 2),
               helper.make_tensor_value_info("Y_h", F32, [None] * 3),
               helper.make_tensor_value_info("Y_c", F32, [None] * 3)]
    return make_model(nodes, inputs, outputs, inits, opset=16, name="vad_like")


def _vad_feed(rng, sr, samples=96):
    return {"audio": rng.standard_normal((1, samples)).astype(np.float32),
            "sr": np.array(sr, dtype=np.int64),
            "h0": rng.standard_normal((1, 1, 8)).astype(np.float32),
            "c0": rng.standard_normal((1, 1, 8)).astype(np.float32)}


def _close(got, want, rtol=1e-4, atol=1e-5):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


@pytest.mark.parametrize("batch", [1, 3])
def test_yolo_like_dynamic_batch(rng, batch):
    model = yolo_model(rng)
    feed = {"images": rng.standard_normal((batch, 3, 16, 16)).astype(np.float32)}
    _close(nnvm_run(model, feed), ort_run(model, feed))


def test_yolo_like_graph_is_static_after_import(rng):
    import nnvm

    graph, params = nnvm.frontend.from_onnx(yolo_model(rng), shape={"images": (2, 3, 16, 16)})
    ops = {n.op.name for n in graph.index.nodes if n.op is not None}
    assert not ops & {"shape", "gather", "range"}, ops  # shape arithmetic folded away
    assert "reshape" in ops and "resize" in ops


def test_ocr_like(rng):
    model = ocr_model(rng)
    feed = {"image": rng.standard_normal((2, 1, 8, 32)).astype(np.float32)}
    _close(nnvm_run(model, feed), ort_run(model, feed))


@pytest.mark.parametrize("batch,seq", [(1, 5), (2, 7)])
def test_bert_like_encoder(rng, batch, seq):
    model = bert_model(rng)
    feed = {"input_ids": rng.integers(0, 50, (batch, seq)).astype(np.int64),
            "attention_mask": np.ones((batch, seq), dtype=np.int64)}
    feed["attention_mask"][:, -1] = 0
    _close(nnvm_run(model, feed), ort_run(model, feed))


@pytest.mark.parametrize("sr", [16000, 8000])
def test_vad_like_runtime_if(rng, sr):
    """Branches with equal output shapes: the If stays in the graph and runs at run time."""
    model = vad_model(rng, same_framing=True)
    feed = _vad_feed(rng, sr)
    import nnvm

    graph, _ = nnvm.frontend.from_onnx(model, shape={k: v.shape for k, v in feed.items()})
    assert any(n.op is not None and n.op.name == "if_else" for n in graph.index.nodes)
    _close(nnvm_run(model, feed), ort_run(model, feed))


@pytest.mark.parametrize("sr", [16000, 8000])
def test_vad_like_if_needs_sample_rate(rng, sr):
    """Branches frame differently, so the LSTM input shape depends on `sr`: the importer
    names the input it needs when asked for static shapes; frozen to its value, the If is
    replaced by its branch."""
    import nnvm
    from nnvm_onnx.errors import NeedsConstantError

    model = vad_model(rng)
    feed = _vad_feed(rng, sr)
    shapes = {k: v.shape for k, v in feed.items()}
    with pytest.raises(NeedsConstantError, match="'sr'") as info:
        nnvm.frontend.from_onnx(model, shape=shapes, static_shapes=True)
    assert info.value.inputs == ("sr",)
    rest = {k: v for k, v in feed.items() if k != "sr"}
    got = nnvm_run(model, rest, shape={k: v.shape for k, v in rest.items()},
                   freeze={"sr": feed["sr"]})
    _close(got, ort_run(model, feed))
    graph, _ = nnvm.frontend.from_onnx(model, shape={"audio": (1, 96)},
                                       freeze={"sr": feed["sr"]})
    assert all(n.op is None or n.op.name != "if_else" for n in graph.index.nodes)


def test_vad_like_through_backend_adapter(rng):
    """The onnx.backend adapter freezes `sr` by itself and caches one module per value."""
    from nnvm_onnx.backend import Backend

    model = vad_model(rng)
    rep = Backend.prepare(model, "CPU", target="reference")
    for sr in (16000, 8000, 16000):
        feed = _vad_feed(rng, sr, samples=64)
        _close(list(rep.run([feed[k] for k in ("audio", "sr", "h0", "c0")])),
               ort_run(model, feed))
    assert len(rep._cache) == 2
