"""Integer quantisation ops compiled on llvm (``lowering_quant``): no host (NumPy) step.

onnxruntime's dynamic quantisation (``DynamicQuantizeLinear`` feeding ``ConvInteger`` /
``MatMulInteger``, and the ``com.microsoft`` ``DynamicQuantizeLSTM``) is what ddddocr's
captcha model is made of; it ran at 80x onnxruntime while these ops were reference kernels
on the host (issue 14). Integer outputs must equal onnxruntime's and the reference's bit for
bit; each case also asserts the built module has no fallback kernel.
"""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
import nnvm.symbol as sym

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
pytest.importorskip("nnvm_llvm", reason="llvm backend not installed")
pytest.importorskip("tvm", reason="the llvm compiler needs TVM (apache-tvm)")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T, helper, numpy_helper  # noqa: E402

ORT_TYPES = {np.dtype("uint8"): T.UINT8, np.dtype("int8"): T.INT8, np.dtype("uint16"): T.UINT16,
             np.dtype("float32"): T.FLOAT, np.dtype("int32"): T.INT32}


def _model(nodes, feed, outputs, inits, domain_ms=False):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(k, ORT_TYPES[v.dtype], v.shape)
                     for k, v in feed.items()],
        [helper.make_tensor_value_info(n, t, [None] * r) for n, t, r in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    opsets = [helper.make_opsetid("", 13)] + ([helper.make_opsetid("com.microsoft", 1)]
                                              if domain_ms else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model


def _build(model, feed, target="llvm"):
    shapes = {k: v.shape for k, v in feed.items()}
    g, params = nnvm.frontend.from_onnx(model, shape=shapes)
    return nnvm.compiler.build(g, target=target, shape=shapes, params=params)


def _check(model, feed, float_tol=None):
    """llvm == onnxruntime (integers exactly), == reference, and nothing on the host."""
    ort = pytest.importorskip("onnxruntime")
    lib = _build(model, feed)
    assert lib.stats()["num_fallback_kernels"] == 0, lib.stats()["unsupported_ops"]
    feed_in = {k: v for k, v in feed.items() if k in lib.input_names}
    got = [np.asarray(v) for v in lib.run(**feed_in)]
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feed)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype
        if a.dtype.kind == "f" and float_tol is not None:
            np.testing.assert_allclose(a, b, **float_tol)
        else:
            np.testing.assert_array_equal(a, b)
    return got, feed_in


DQL_OUT = [("q", T.UINT8, 2), ("s", T.FLOAT, 0), ("z", T.UINT8, 0)]


@pytest.mark.parametrize("kind", ["mixed", "positive", "negative", "zeros", "tiny", "wide"])
def test_dynamic_quantize_linear_matches_onnxruntime_bit_for_bit(rng, kind):
    """The scale is onnxruntime's float32 formula: the same bits, so the same uint8s."""
    x = {"mixed": rng.standard_normal((7, 33)) * 3 + 0.5,
         "positive": rng.uniform(0.1, 9, (7, 33)),
         "negative": -rng.uniform(0.1, 9, (7, 33)),
         "zeros": np.zeros((7, 33)),
         "tiny": rng.standard_normal((7, 33)) * 1e-6,
         "wide": rng.standard_normal((7, 33)) * 1e4}[kind].astype("float32")
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"])
    _check(_model([node], {"x": x}, DQL_OUT, {}), {"x": x})


def test_dynamic_quantize_linear_many_draws_match_onnxruntime(rng):
    """Random ranges and offsets, one model per size: every scale, zero point and uint8
    equal (a multiply by 1/scale instead of the division fails this)."""
    for size in (1, 16, 250):
        node = helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"])
        x = np.zeros((1, size), "float32")
        model = _model([node], {"x": x}, DQL_OUT, {})
        lib = _build(model, {"x": x})
        ort = pytest.importorskip("onnxruntime")
        sess = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"])
        for _ in range(40):
            x = (rng.standard_normal((1, size)) * 10 ** rng.uniform(-3, 3)
                 + rng.uniform(-5, 5)).astype("float32")
            for a, b in zip(lib.run(x=x), sess.run(None, {"x": x})):
                np.testing.assert_array_equal(np.asarray(a), b)


CONV = [  # x shape, w shape, w dtype, per-channel w zero point, attrs
    ((1, 8, 17, 30), (24, 8, 3, 3), "uint8", False, {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ((1, 24, 9, 12), (48, 24, 1, 1), "uint8", False, {}),
    ((2, 5, 11, 7), (7, 5, 3, 2), "int8", True, {"pads": [0, 1, 2, 0], "dilations": [2, 1]}),
    ((1, 3, 40, 1), (16, 3, 5, 1), "uint8", False, {"pads": [2, 0, 2, 0]}),  # column image
]


@pytest.mark.parametrize("xs,ws,wdt,per_channel,attrs", CONV,
                         ids=["stride2-pad", "1x1", "int8-perchannel-dilated", "column"])
def test_quantized_conv_matches_onnxruntime(rng, xs, ws, wdt, per_channel, attrs):
    """DynamicQuantizeLinear -> ConvInteger, the ddddocr shape: int32 outputs exact,
    padding contributing the zero point (onnxruntime pads the shifted input with 0)."""
    info = np.iinfo(wdt)
    w = rng.integers(info.min, info.max + 1, ws).astype(wdt)
    wz = (rng.integers(info.min, info.max + 1, ws[0]) if per_channel else
          np.array(int(info.max) // 2 + 3)).astype(wdt)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"]),
             helper.make_node("ConvInteger", ["q", "w", "z", "wz"], ["y"], **attrs)]
    feed = {"x": (rng.standard_normal(xs) * 3 + 1).astype("float32")}
    if per_channel:  # onnxruntime's ConvInteger takes a scalar weight zero point only
        model = _model(nodes, feed, [("y", T.INT32, 4)], {"w": w, "wz": wz})
        lib, ref = _build(model, feed), _build(model, feed, "reference")
        assert lib.stats()["num_fallback_kernels"] == 0, lib.stats()["unsupported_ops"]
        np.testing.assert_array_equal(lib.run(**feed)[0], ref.run(**feed)[0])
        return
    got, feed_in = _check(_model(nodes, feed, [("y", T.INT32, 4)], {"w": w, "wz": wz}), feed)
    ref = _build(_model(nodes, feed, [("y", T.INT32, 4)], {"w": w, "wz": wz}), feed,
                 "reference")
    np.testing.assert_array_equal(got[0], ref.run(**feed_in)[0])


@pytest.mark.parametrize("groups", [2, 6])
def test_grouped_and_depthwise_conv_integer_match_reference(rng, groups):
    x = rng.integers(-128, 128, (1, 6, 9, 10)).astype("int8")
    w = rng.integers(-128, 128, (6, 6 // groups, 3, 3)).astype("int8")
    y = sym.conv_integer(sym.Variable("x"), sym.Variable("w"), sym.Variable("xz"),
                         sym.Variable("wz"), groups=groups, pads=(1, 1, 1, 1))
    params = {"w": w, "xz": np.array(5, "int8"), "wz": np.array(-3, "int8")}
    args = dict(shape={"x": x.shape, "w": w.shape, "xz": (), "wz": ()},
                dtype={"x": "int8", "w": "int8", "xz": "int8", "wz": "int8"}, params=params)
    lib = nnvm.compiler.build(y, target="llvm", **args)
    ref = nnvm.compiler.build(y, target="reference", **args)
    assert lib.stats()["num_fallback_kernels"] == 0, lib.stats()["unsupported_ops"]
    np.testing.assert_array_equal(lib.run(x=x)[0], ref.run(x=x)[0])


@pytest.mark.parametrize("n,bdt", [(8210, "uint8"), (100, "int8"), (32, "uint8")])
def test_quantized_matmul_with_weight_matches_onnxruntime(rng, n, bdt):
    """Packed weight panels (8210 columns: ddddocr's classifier, zero-padded to a vector)."""
    info = np.iinfo(bdt)
    b = rng.integers(info.min, info.max + 1, (64, n)).astype(bdt)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"]),
             helper.make_node("MatMulInteger", ["q", "b", "z", "bz"], ["y"])]
    feed = {"x": rng.standard_normal((2, 5, 64)).astype("float32")}
    _check(_model(nodes, feed, [("y", T.INT32, 3)], {"b": b, "bz": np.array(3, bdt)}), feed)


def test_matmul_integer_of_two_activations_matches_onnxruntime(rng):
    """Both operands inputs (no packing), batch broadcast, int8 with zero points."""
    feed = {"a": rng.integers(-128, 128, (3, 4, 20)).astype("int8"),
            "b": rng.integers(-128, 128, (20, 9)).astype("int8"),
            "az": np.array(-7, "int8"), "bz": np.array(11, "int8")}
    node = helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])
    _check(_model([node], feed, [("y", T.INT32, 3)], {}), feed)


def test_dynamic_quantize_lstm_runs_compiled_and_matches_onnxruntime(rng):
    """The com.microsoft LSTM is unrolled by the importer into the ops above: all compiled."""
    seq, batch, n_in, hid = 4, 1, 12, 16
    ws = {"W": rng.integers(-128, 128, (2, n_in, 4 * hid)).astype("int8"),
          "R": rng.integers(-128, 128, (2, hid, 4 * hid)).astype("int8"),
          "B": rng.uniform(-0.1, 0.1, (2, 8 * hid)).astype("float32"),
          "Ws": np.array([0.004, 0.003], "float32"), "Wz": np.zeros(2, "int8"),
          "Rs": np.array([0.002, 0.005], "float32"), "Rz": np.zeros(2, "int8")}
    node = helper.make_node("DynamicQuantizeLSTM", ["x", "W", "R", "B", "", "", "", "",
                                                    "Ws", "Wz", "Rs", "Rz"],
                            ["y", "yh", "yc"], domain="com.microsoft", hidden_size=hid,
                            direction="bidirectional")
    feed = {"x": rng.standard_normal((seq, batch, n_in)).astype("float32")}
    model = _model([node], feed, [("y", T.FLOAT, 4), ("yh", T.FLOAT, 3), ("yc", T.FLOAT, 3)],
                   ws, domain_ms=True)
    _check(model, feed, float_tol={"rtol": 1e-5, "atol": 1e-5})



QDQ = [  # x shape, scale shape, quantised dtype, attrs, opset
    ((3, 4, 5), (), "uint8", {}, 13),
    ((3, 4, 5), (4,), "int8", {"axis": 1}, 13),
    ((2, 6, 5), (2, 3, 5), "int8", {"axis": 1, "block_size": 2}, 21),
    ((4, 7), (7,), "uint16", {"axis": -1}, 21),
]


@pytest.mark.parametrize("xs,ss,qdt,attrs,opset", QDQ,
                         ids=["tensor-u8", "axis-i8", "blocked-i8", "axis-u16"])
def test_quantize_dequantize_linear_match_onnxruntime_and_reference(rng, xs, ss, qdt, attrs,
                                                                    opset):
    """QuantizeLinear -> DequantizeLinear (static QDQ models): the integers equal, and the
    dequantised floats are the same bits (both computed in float64, rounded once)."""
    info = np.iinfo(qdt)
    scale = rng.uniform(0.01, 0.2, ss).astype("float32")
    zp = rng.integers(info.min // 2, info.max // 2 + 1, ss).astype(qdt)
    x = (rng.standard_normal(xs) * 6).astype("float32")
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], **attrs),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], **attrs)]
    qtype = {"uint8": T.UINT8, "int8": T.INT8, "uint16": T.UINT16}[qdt]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, xs)],
        [helper.make_tensor_value_info("q", qtype, xs), helper.make_tensor_value_info(
            "y", T.FLOAT, xs)],
        [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zp, "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    got, feed = _check(model, {"x": x})
    want = _build(model, {"x": x}, "reference").run(**feed)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, np.asarray(b))
