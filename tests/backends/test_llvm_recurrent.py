"""Recurrent layers (LSTM, GRU, RNN) and Resize compiled on llvm: no host (NumPy) step.

Each case builds one node for ``llvm`` and checks it against the reference interpreter (and
onnxruntime, when installed, through the ONNX importer), asserting that the built module has
no fallback kernel: a sequence model must not leave its recurrent layer or its upsampling to
the host (issues 13 and 14).
"""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
import nnvm.symbol as sym

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
pytest.importorskip("nnvm_llvm", reason="llvm backend not installed")
pytest.importorskip("tvm", reason="the llvm compiler needs TVM (apache-tvm)")

GATES = {"lstm": 4, "gru": 3, "rnn": 1}


def _recurrent_inputs(rng, kind, seq, batch, n_in, hid, attrs):
    """Names, values and dtypes of the node's inputs, in the op's slot order."""
    g, d = GATES[kind], 2 if attrs.get("direction") == "bidirectional" else 1
    layout = attrs.get("layout", 0)
    state = (d, batch, hid) if layout == 0 else (batch, d, hid)
    slots = [("X", (seq, batch, n_in) if layout == 0 else (batch, seq, n_in)),
             ("W", (d, g * hid, n_in)), ("R", (d, g * hid, hid))]
    for flag, name, shape in (("use_bias", "B", (d, 2 * g * hid)),
                              ("use_sequence_lens", "L", (batch,)),
                              ("use_initial_h", "H0", state), ("use_initial_c", "C0", state),
                              ("use_peepholes", "P", (d, 3 * hid))):
        if attrs.get(flag):
            slots.append((name, shape))
    values = {n: rng.uniform(-1, 1, s).astype("float32") for n, s in slots}
    dtypes = {n: "float32" for n, _ in slots}
    if "L" in values:
        values["L"] = rng.integers(1, seq + 1, batch).astype("int32")
        dtypes["L"] = "int32"
    return [n for n, _ in slots], values, dtypes


RECURRENT = [
    ("lstm", 7, 2, 5, 8, {"use_bias": True, "use_initial_h": True, "use_initial_c": True}),
    ("lstm", 10, 1, 6, 20, {"direction": "bidirectional", "use_bias": True}),  # panels
    ("lstm", 5, 3, 4, 8, {"direction": "reverse", "use_peepholes": True, "clip": 0.5,
                          "input_forget": True, "use_sequence_lens": True}),
    ("lstm", 4, 2, 3, 6, {"layout": 1, "use_initial_h": True,
                          "activations": ("HardSigmoid", "Tanh", "Relu")}),
    ("lstm", 1, 2, 5, 8, {"use_bias": True, "use_initial_h": True, "use_initial_c": True}),
    ("gru", 8, 2, 5, 32, {"use_bias": True, "use_initial_h": True}),
    ("gru", 9, 3, 5, 12, {"use_bias": True, "linear_before_reset": True,
                          "direction": "bidirectional", "use_sequence_lens": True}),
    ("gru", 3, 1, 4, 5, {"clip": 0.7, "activations": ("LeakyRelu", "ScaledTanh"),
                         "activation_alpha": (0.2, 0.9), "activation_beta": (1.5,)}),
    ("rnn", 5, 2, 4, 16, {"use_bias": True, "use_initial_h": True}),
    ("rnn", 4, 2, 3, 7, {"direction": "bidirectional", "layout": 1,
                         "activations": ("Affine", "Softsign"), "activation_alpha": (0.5,),
                         "activation_beta": (0.1,)}),
]
IDS = ["lstm-states", "lstm-bidir-h20", "lstm-reverse-peep-clip-coupled-lens",
       "lstm-layout1-acts", "lstm-single-step", "gru", "gru-lbr-bidir-lens",
       "gru-clip-alpha-beta", "rnn", "rnn-bidir-layout1-acts"]


@pytest.mark.parametrize("kind,seq,batch,n_in,hid,attrs", RECURRENT, ids=IDS)
def test_recurrent_layer_is_compiled_and_matches_reference(rng, kind, seq, batch, n_in, hid,
                                                           attrs):
    names, values, dtypes = _recurrent_inputs(rng, kind, seq, batch, n_in, hid, attrs)
    params = {n: values[n] for n in ("W", "R", "B", "P") if n in values}
    y = getattr(sym, kind)(*[sym.Variable(n) for n in names], hidden_size=hid, **attrs)
    shape = {n: v.shape for n, v in values.items()}
    lib = nnvm.compiler.build(y, target="llvm", shape=shape, params=params, dtype=dtypes)
    ref = nnvm.compiler.build(y, target="reference", shape=shape, params=params, dtype=dtypes)
    assert lib.stats()["num_fallback_kernels"] == 0, lib.stats()["unsupported_ops"]
    feed = {n: v for n, v in values.items() if n in lib.input_names}
    got, want = lib.run(**feed), ref.run(**feed)
    assert len(got) == len(want) == (3 if kind == "lstm" else 2)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def _onnx_model(nodes, inputs, outputs, inits, opset):
    from onnx import TensorProto, helper

    graph = helper.make_graph(nodes, "g", inputs, [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, [None] * r) for n, r in outputs],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _vs_onnxruntime(model, feed, rtol=1e-5, atol=1e-5, threads=None):
    """Import, build for llvm (on ``threads`` threads when given), compare every output
    with onnxruntime; returns stats()."""
    ort = pytest.importorskip("onnxruntime")
    g, params = nnvm.frontend.from_onnx(model, shape={k: v.shape for k, v in feed.items()})
    lib = nnvm.compiler.build(g, target="llvm", shape={k: v.shape for k, v in feed.items()},
                              params=params)
    if threads is not None:
        lib.set_num_threads(threads)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feed)
    got = lib.run(**{k: v for k, v in feed.items() if k in lib.input_names})
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
    return lib.stats()


def _sequence_model(rng, op, seq, batch, n_in, hid, **attrs):
    """``(model, feed)``: one ONNX recurrent node with W, R, B initializers and initial
    states fed."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    g, d = GATES[op.lower()], 2 if attrs.get("direction") == "bidirectional" else 1
    outs = ["Y", "Yh"] + (["Yc"] if op == "LSTM" else [])
    ins = ["x", "W", "R", "B", "", "h"] + (["c"] if op == "LSTM" else [])
    node = helper.make_node(op, ins, outs, hidden_size=hid, **attrs)
    inits = [numpy_helper.from_array(rng.uniform(-0.5, 0.5, s).astype("float32"), n)
             for n, s in (("W", (d, g * hid, n_in)), ("R", (d, g * hid, hid)),
                          ("B", (d, 2 * g * hid)))]
    shapes = {"x": (seq, batch, n_in), "h": (d, batch, hid)}
    if op == "LSTM":
        shapes["c"] = (d, batch, hid)
    feed = {k: rng.uniform(-1, 1, s).astype("float32") for k, s in shapes.items()}
    model = _onnx_model([node], [helper.make_tensor_value_info(k, TensorProto.FLOAT, s)
                                 for k, s in shapes.items()],
                        [(n, 4 if n == "Y" else 3) for n in outs], inits, opset=14)
    return model, feed


@pytest.mark.parametrize("op,direction,extra", [
    ("LSTM", "forward", {}), ("LSTM", "bidirectional", {}),
    ("GRU", "reverse", {"linear_before_reset": 1}), ("GRU", "forward", {}),
    ("RNN", "bidirectional", {})])
def test_recurrent_sequence_matches_onnxruntime(rng, op, direction, extra):
    """A sequence (the VAD-over-chunks and CNN+LSTM OCR shape) against onnxruntime."""
    model, feed = _sequence_model(rng, op, 9, 2, 6, 16, direction=direction, **extra)
    stats = _vs_onnxruntime(model, feed)
    assert stats["num_fallback_kernels"] == 0, stats["unsupported_ops"]


#: (op, seq, batch, n_in, hid, attrs) whose products take the kernel's dot tiles
#: (``gemm_dots``: hidden size and k whole vectors; multiples of 16 cover 8- and 16-lane
#: targets): several tiles per gate, both directions, batch > 1, input rows below and
#: above ``DOTS_MAX_ROWS`` (40 rows: panels from the in-register transpose), GRU with the
#: reset before R (its second product starts at weight row 2H); every other recurrent
#: product runs its tiles backwards (counted over steps x batch entries: odd batches make
#: a batch entry's steps alternate between both orders)
DOT_TILES = [
    ("LSTM", 8, 1, 32, 32, {}),
    ("LSTM", 1, 1, 48, 64, {}),
    ("LSTM", 5, 2, 16, 16, {"direction": "bidirectional"}),
    ("LSTM", 20, 2, 32, 16, {"direction": "reverse"}),
    ("GRU", 6, 2, 32, 32, {}),
    ("GRU", 4, 1, 16, 48, {"linear_before_reset": 1, "direction": "bidirectional"}),
    ("RNN", 3, 3, 16, 32, {}),
    ("LSTM", 7, 3, 16, 32, {"direction": "bidirectional"}),
]


@pytest.mark.parametrize("op,seq,batch,n_in,hid,attrs", DOT_TILES,
                         ids=[f"{c[0]}-{c[1]}x{c[2]}x{c[3]}-h{c[4]}" for c in DOT_TILES])
def test_recurrent_dot_tiles_match_onnxruntime(rng, op, seq, batch, n_in, hid, attrs):
    model, feed = _sequence_model(rng, op, seq, batch, n_in, hid, **attrs)
    stats = _vs_onnxruntime(model, feed)
    assert stats["num_fallback_kernels"] == 0, stats["unsupported_ops"]


#: (op, seq, batch, n_in, hid, attrs), one per product path, whose register tiles are
#: stack allocations (``test_llvm_recurrent_registers``): dot tiles (the recurrent GEMV and a
#: projection of few rows), column panels (a projection of many rows, split across
#: threads), panels of the recurrent weights (a hidden size no vector divides), plain dot
#: products (odd k); the roofline sweep's GRU and LSTM shapes among them, which split each
#: step's product across threads (``STEP_SPLIT_MIN_WORK``)
REGISTER_PATHS = {
    "gru-64-steps-sweep": ("GRU", 64, 1, 128, 128, {"linear_before_reset": 1}),
    "lstm-8-steps-sweep": ("LSTM", 8, 1, 128, 128, {}),
    "lstm-bidir-20-steps": ("LSTM", 20, 1, 64, 64, {"direction": "bidirectional"}),
    "gru-reset-before-r-reverse": ("GRU", 11, 2, 48, 32, {"direction": "reverse"}),
    "gru-odd-hidden-panels": ("GRU", 9, 1, 24, 37, {"linear_before_reset": 1}),
    "lstm-odd-k-plain": ("LSTM", 3, 2, 21, 13, {"direction": "bidirectional"}),
    "gru-reset-before-r-batch2-split-steps": ("GRU", 12, 2, 64, 128, {}),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", sorted(REGISTER_PATHS))
def test_register_tile_paths_match_onnxruntime(rng, case, threads):
    model, feed = _sequence_model(rng, *REGISTER_PATHS[case][:5], **REGISTER_PATHS[case][5])
    stats = _vs_onnxruntime(model, feed, rtol=1e-4, atol=1e-4, threads=threads)
    assert stats["num_fallback_kernels"] == 0, stats["unsupported_ops"]


RESIZE = [
    ("linear", "half_pixel", None, (1, 3, 17, 23), {"sizes": (1, 3, 34, 46)}),  # LR-ASPP head
    ("linear", "pytorch_half_pixel", None, (1, 2, 5, 7), {"sizes": (1, 2, 13, 1)}),
    ("linear", "align_corners", None, (2, 2, 6, 5), {"scales": (1, 1, 1.5, 2.3)}),
    ("linear", "asymmetric", None, (1, 4, 9, 9), {"scales": (1, 1, 0.5, 0.75)}),
    ("linear", "half_pixel_symmetric", None, (1, 1, 7, 8), {"scales": (1, 1, 1.7, 0.6)}),
    ("nearest", "asymmetric", "floor", (1, 2, 4, 5), {"scales": (1, 1, 3, 3)}),
    ("nearest", "half_pixel", "round_prefer_ceil", (1, 3, 6, 7), {"scales": (1, 1, 1.5, 0.7)}),
    ("nearest", "align_corners", "round_prefer_floor", (1, 2, 5, 4), {"sizes": (1, 2, 9, 11)}),
    ("nearest", "tf_half_pixel_for_nn", "ceil", (1, 1, 6, 6), {"scales": (1, 1, 1.75, 2.5)}),
    ("linear", "half_pixel", None, (3, 20), {"scales": (1, 2.5)}),  # 2-D (N, L)
    ("cubic", "half_pixel", None, (1, 2, 6, 7), {"scales": (1, 1, 1.5, 0.6)}),
    ("cubic", "asymmetric", None, (1, 1, 5, 5), {"sizes": (1, 1, 9, 3)}),
]


@pytest.mark.parametrize("mode,ctm,nearest,shape,size", RESIZE,
                         ids=[f"{m}-{c}-{i}" for i, (m, c, *_) in enumerate(RESIZE)])
def test_resize_is_compiled_and_matches_onnxruntime_and_reference(rng, mode, ctm, nearest,
                                                                  shape, size):
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    key = "sizes" if "sizes" in size else "scales"
    value = np.array(size[key], "int64" if key == "sizes" else "float32")
    inputs = ["x", "", "", "s"] if key == "sizes" else ["x", "", "s"]
    extra = {"nearest_mode": nearest} if nearest else {}
    node = helper.make_node("Resize", inputs, ["y"], mode=mode,
                            coordinate_transformation_mode=ctm, **extra)
    feed = {"x": rng.standard_normal(shape).astype("float32")}
    model = _onnx_model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                        [("y", len(shape))], [numpy_helper.from_array(value, "s")], opset=19)
    if ctm == "align_corners" and "scales" in size:
        # ONNX (its reference and node tests) divides by scale * n_in - 1 = 10.5 here,
        # onnxruntime by the output length - 1 = 10: only the reference can judge this one
        pytest.importorskip("onnxruntime")
    else:
        stats = _vs_onnxruntime(model, feed)
        assert stats["num_fallback_kernels"] == 0, stats["unsupported_ops"]
    g, params = nnvm.frontend.from_onnx(model, shape={"x": shape})
    ref = nnvm.compiler.build(g, target="reference", shape={"x": shape}, params=params)
    lib = nnvm.compiler.build(g, target="llvm", shape={"x": shape}, params=params)
    assert lib.stats()["num_fallback_kernels"] == 0, lib.stats()["unsupported_ops"]
    np.testing.assert_allclose(lib.run(**feed)[0], ref.run(**feed)[0], rtol=1e-5, atol=1e-5)


def test_resize_crop_and_integer_data_match_reference(rng):
    """tf_crop_and_resize's extrapolation fill and rounded linear blends of uint8 data."""
    shape = (1, 2, 6, 7)
    cases = [({"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
               "roi": (-0.2, 0.1, 1.1, 0.8), "axes": (2, 3), "sizes": (9, 5),
               "extrapolation_value": 7.5}, "float32"),
             ({"mode": "linear", "scales": (1, 1, 1.6, 0.7)}, "uint8"),
             ({"mode": "nearest", "nearest_mode": "round_prefer_ceil",
               "coordinate_transformation_mode": "tf_crop_and_resize",
               "roi": (0.1, 0.0, 0.9, 1.2), "axes": (2, 3), "sizes": (4, 9)}, "int32")]
    for attrs, dtype in cases:
        x = rng.uniform(0, 255, shape).astype(dtype)
        y = sym.resize(sym.Variable("x"), **attrs)
        lib = nnvm.compiler.build(y, target="llvm", shape={"x": shape}, dtype={"x": dtype})
        ref = nnvm.compiler.build(y, target="reference", shape={"x": shape}, dtype={"x": dtype})
        assert lib.stats()["num_fallback_kernels"] == 0, lib.stats()["unsupported_ops"]
        got, want = lib.run(x=x)[0], ref.run(x=x)[0]
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got.astype("float64"), want.astype("float64"), rtol=1e-5,
                                   atol=1e-4 if dtype == "float32" else 0)


def test_exclude_outside_and_antialias_keep_the_reference():
    """Fuzz case 23002601: cubic with exclude_outside (int64 data cast to float, 0.8x) took
    over 180 s to build: its normalising division made each TVM lowering pass take ~1.5 s.
    The node now keeps its reference kernel, with the reason in stats()."""
    x = np.arange(16).reshape(1, 1, 4, 4)
    y = sym.resize(sym.cast(sym.Variable("x"), dtype="float32"), mode="cubic",
                   scales=(1, 1, 0.8, 0.8), cubic_coeff_a=-0.5, exclude_outside=True)
    lib = nnvm.compiler.build(y, target="llvm", shape={"x": x.shape}, dtype={"x": "int64"})
    ref = nnvm.compiler.build(y, target="reference", shape={"x": x.shape}, dtype={"x": "int64"})
    assert lib.stats()["fallback_ops"] == ["resize"]
    assert "exclude_outside" in lib.stats()["unsupported_ops"]["resize"]
    np.testing.assert_allclose(lib.run(x=x)[0], ref.run(x=x)[0], rtol=1e-5, atol=1e-5)
    y = sym.resize(sym.Variable("x"), mode="linear", scales=(1, 1, 0.5, 0.5), antialias=True)
    lib = nnvm.compiler.build(y, target="llvm", shape={"x": x.shape})
    assert lib.stats()["fallback_ops"] == ["resize"]
    assert "antialiased" in lib.stats()["unsupported_ops"]["resize"]


def test_crop_and_resize_without_roi_matches_onnxruntime():
    """Fuzz case 23001978: tf_crop_and_resize with no roi input raised a raw TypeError in
    the llvm lowering. onnxruntime reads a missing roi as the whole axis ([0, 1])."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    shape = (1, 1, 4, 4)
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode="cubic",
                            coordinate_transformation_mode="tf_crop_and_resize")
    model = _onnx_model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                        [("y", 4)], [numpy_helper.from_array(
                            np.array([1, 1, 2, 2], "float32"), "s")], opset=19)
    feed = {"x": np.arange(16, dtype="float32").reshape(shape)}
    stats = _vs_onnxruntime(model, feed, rtol=1e-5, atol=1e-4)
    assert stats["num_fallback_kernels"] == 0, stats["unsupported_ops"]
    # the op itself, built without roi, is refused (NNVMError), never a raw exception
    y = sym.resize(sym.Variable("x"), mode="linear", scales=(1, 1, 2, 2),
                   coordinate_transformation_mode="tf_crop_and_resize")
    lib = nnvm.compiler.build(y, target="llvm", shape={"x": shape})
    assert "without roi" in lib.stats()["unsupported_ops"]["resize"]
    with pytest.raises(nnvm.NNVMError, match="roi"):
        lib.run(**feed)


@pytest.mark.parametrize("dtype,tol", [("float16", 1e-3), ("float64", 1e-12)])
def test_recurrent_layer_in_other_float_types(rng, dtype, tol):
    """float16 accumulates in float32 inside the kernel, float64 stays float64."""
    seq, batch, n_in, hid = 9, 2, 5, 16
    values = {"X": rng.uniform(-1, 1, (seq, batch, n_in)).astype(dtype),
              "W": rng.uniform(-0.5, 0.5, (1, 4 * hid, n_in)).astype(dtype),
              "R": rng.uniform(-0.5, 0.5, (1, 4 * hid, hid)).astype(dtype)}
    y = sym.lstm(*[sym.Variable(n) for n in values], hidden_size=hid)
    shape, types = {k: v.shape for k, v in values.items()}, {k: dtype for k in values}
    params = {"W": values["W"], "R": values["R"]}
    lib = nnvm.compiler.build(y, target="llvm", shape=shape, dtype=types, params=params)
    ref = nnvm.compiler.build(y, target="reference", shape=shape, dtype=types, params=params)
    assert lib.stats()["num_fallback_kernels"] == 0, lib.stats()["unsupported_ops"]
    for got, want in zip(lib.run(X=values["X"]), ref.run(X=values["X"])):
        assert got.dtype == want.dtype == np.dtype(dtype)
        np.testing.assert_allclose(got.astype("float64"), want.astype("float64"), rtol=tol,
                                   atol=tol)
