"""The llvm backend's fast paths stay exact: packed MatMul panels (padded widths), batched
attention matmuls, vector row reductions, polynomial exp/erf, scalar params compiled in as
constants (and refused when rebound), the per-step profile and the exact-input run path."""

from __future__ import annotations

import math

import numpy as np
import pytest

import nnvm
import nnvm.symbol as sym
from nnvm.backend import get_backend
from nnvm.errors import ExecutionError

REASON = get_backend("llvm", require_available=False).compiler_available()
pytestmark = pytest.mark.skipif(REASON is not None, reason=str(REASON))


def _build(y, shape, params=None, **kw):
    return nnvm.compiler.build(y, target="llvm", shape=shape, params=params or {},
                               opt_level=3, **kw)


@pytest.mark.parametrize("k,n", [(48, 64), (40, 50), (33, 258)])
def test_matmul_with_param_weight_uses_padded_panels(rng, k, n):
    x, w = sym.Variable("x"), sym.Variable("w")
    y = sym.relu(sym.matmul(x, w))
    wv = rng.standard_normal((k, n)).astype("float32")
    lib = _build(y, {"x": (2, 6, k)}, {"w": wv})
    assert any(p["layout"] == "matmul" for p in lib._plan["packed"].values())
    xv = rng.standard_normal((2, 6, k)).astype("float32")
    np.testing.assert_allclose(lib.run(x=xv)[0], np.maximum(xv @ wv, 0), rtol=1e-4, atol=1e-4)


def test_dense_with_odd_units_matches_numpy(rng):
    x = sym.Variable("x")
    y = sym.dense(x, units=21, name="fc")
    w = rng.standard_normal((21, 17)).astype("float32")
    b = rng.standard_normal(21).astype("float32")
    lib = _build(y, {"x": (5, 17)}, {"fc_weight": w, "fc_bias": b})
    xv = rng.standard_normal((5, 17)).astype("float32")
    np.testing.assert_allclose(lib.run(x=xv)[0], xv @ w.T + b, rtol=1e-4, atol=1e-4)


def test_attention_matmuls_and_softmax_match_numpy(rng):
    q, k, v = sym.Variable("q"), sym.Variable("k"), sym.Variable("v")
    p = sym.softmax(sym.matmul(q, k, transpose_b=True) * 0.25, axis=-1)
    y = sym.matmul(p, v)
    shape = {"q": (1, 3, 32, 16), "k": (1, 3, 32, 16), "v": (1, 3, 32, 16)}
    lib = _build(y, shape)
    feed = {n: rng.standard_normal(s).astype("float32") for n, s in shape.items()}
    s = feed["q"] @ feed["k"].transpose(0, 1, 3, 2) * 0.25
    e = np.exp(s - s.max(-1, keepdims=True))
    want = (e / e.sum(-1, keepdims=True)) @ feed["v"]
    np.testing.assert_allclose(lib.run(**feed)[0], want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("width", [48, 20])
def test_row_reductions_match_numpy(rng, width):
    x = sym.Variable("x")
    y = sym.mean(x, axis=-1, keepdims=True) + sym.max(x, axis=-1, keepdims=True)
    lib = _build(y, {"x": (7, width)})
    xv = rng.standard_normal((7, width)).astype("float32")
    want = xv.mean(-1, keepdims=True) + xv.max(-1, keepdims=True)
    np.testing.assert_allclose(lib.run(x=xv)[0], want, rtol=1e-5, atol=1e-5)


def test_polynomial_exp_and_erf_are_accurate():
    xs = np.concatenate([np.linspace(-86, 88, 2048), np.linspace(-4, 4, 2048),
                         np.geomspace(1e-7, 0.5, 256), -np.geomspace(1e-7, 0.5, 256)])
    xs = xs.astype("float32")
    x = sym.Variable("x")
    lib = _build(sym.Group([sym.exp(x), sym.erf(x), sym.sigmoid(x)]), {"x": xs.shape})
    got_exp, got_erf, got_sig = (o.astype(np.float64) for o in lib.run(x=xs))
    x64 = xs.astype(np.float64)
    assert np.max(np.abs(got_exp - np.exp(x64)) / np.exp(x64)) < 5e-7
    erf = np.vectorize(math.erf)(x64)
    assert np.max(np.abs(got_erf - erf) / np.maximum(np.abs(erf), 1e-3)) < 1e-6
    assert np.max(np.abs(got_sig - 1 / (1 + np.exp(-x64)))) < 1e-6


def test_scalar_params_are_compiled_in_and_rebinding_them_is_refused(rng):
    x, two = sym.Variable("x"), sym.Variable("two")
    y = sym.broadcast_pow(x, two)
    lib = _build(y, {"x": (4, 16), "two": ()}, {"two": np.array(2.0, "float32")})
    assert lib._plan["baked"] == {"two": 2.0}
    xv = rng.standard_normal((4, 16)).astype("float32")
    np.testing.assert_allclose(lib.run(x=xv)[0], xv * xv, rtol=1e-6)
    lib.set_input(two=np.array(2.0, "float32"))  # same value: fine
    lib.run(x=xv)
    lib.set_input(two=np.array(3.0, "float32"))
    with pytest.raises(ExecutionError, match="compiled into the kernels"):
        lib.run(x=xv)


def test_profile_names_every_step_and_run_converts_inexact_inputs(rng):
    x = sym.Variable("x")
    y = sym.softmax(sym.dense(x, units=32, name="fc"))
    params = {"fc_weight": rng.standard_normal((32, 8)).astype("float32"),
              "fc_bias": np.zeros(32, "float32")}
    lib = _build(y, {"x": (3, 8)}, params)
    prof = lib.profile(repeat=3)
    assert len(prof) == lib.stats()["num_kernels"] and all(t >= 0 for _, t in prof)
    xv = rng.standard_normal((3, 8))
    exact = lib.run(x=xv.astype("float32"))[0]
    with pytest.raises(ExecutionError, match="wrong dtype"):
        lib.run(x=xv)  # float64 is refused unless the caller opts into casting
    lib.allow_cast = True
    np.testing.assert_allclose(lib.run(x=xv)[0], exact, rtol=1e-6)  # float64 -> converted
    with pytest.raises(ExecutionError, match="wrong shape"):
        lib.run(x=np.zeros((2, 8), "float32"))


def _onnx_vs_ort(nodes, inputs, inits, feed, opset=17):
    """Import a one-node ONNX graph, build for llvm, and compare every output with ORT."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [None] * r)
            for n, r in nodes[1]]
    graph = helper.make_graph(nodes[0], "g", inputs, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    g, params = nnvm.frontend.from_onnx(model, shape={k: v.shape for k, v in feed.items()})
    lib = _build(g, {k: v.shape for k, v in feed.items()}, params)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feed)
    for got, ref in zip(lib.run(**feed), want):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    return lib.stats()


@pytest.mark.parametrize("scales,ctm", [((1, 1, 2, 2), "half_pixel"),
                                        ((1, 1, 2, 3), "asymmetric"),
                                        ((1, 1, 1.5, 1.5), "half_pixel")])
def test_nearest_resize_is_compiled_for_whole_and_fractional_scales(rng, scales, ctm):
    from onnx import TensorProto, helper, numpy_helper

    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest",
                            coordinate_transformation_mode=ctm,
                            nearest_mode="floor" if ctm == "asymmetric" else "round_prefer_floor")
    feed = {"x": rng.standard_normal((1, 2, 4, 6)).astype("float32")}
    stats = _onnx_vs_ort(([node], [("y", 4)]),
                         [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 2, 4, 6))],
                         [numpy_helper.from_array(np.array(scales, "float32"), "s")], feed)
    assert "resize" not in stats["fallback_ops"]  # whole scales gather i // s, others interpolate


def test_nearest_resize_whose_map_is_not_a_division_is_compiled(rng):
    from onnx import TensorProto, helper, numpy_helper

    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest",
                            coordinate_transformation_mode="asymmetric")  # rounds i / 3
    feed = {"x": rng.standard_normal((1, 1, 4, 5)).astype("float32")}
    stats = _onnx_vs_ort(([node], [("y", 4)]),
                         [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 1, 4, 5))],
                         [numpy_helper.from_array(np.array((1, 1, 3, 3), "float32"), "s")], feed)
    assert stats["fallback_ops"] == []


@pytest.mark.parametrize("kernel,stride", [(2, 2), (3, 2)])
def test_conv_transpose_kernel_equal_stride_matches_ort(rng, kernel, stride):
    from onnx import TensorProto, helper, numpy_helper

    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"],
                            kernel_shape=[kernel, kernel], strides=[stride, stride])
    feed = {"x": rng.standard_normal((1, 6, 5, 7)).astype("float32")}
    inits = [numpy_helper.from_array(rng.standard_normal((6, 4, kernel, kernel)).astype(
        "float32"), "w"), numpy_helper.from_array(rng.standard_normal(4).astype("float32"), "b")]
    stats = _onnx_vs_ort(([node], [("y", 4)]),
                         [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 6, 5, 7))],
                         inits, feed)
    assert stats["fallback_ops"] == []


@pytest.mark.parametrize("steps", [1, 2])
def test_lstm_is_one_kernel_and_matches_ort(rng, steps):
    from onnx import TensorProto, helper, numpy_helper

    hid, n_in, batch = 8, 5, 2
    node = helper.make_node("LSTM", ["x", "W", "R", "B", "", "h", "c"], ["Y", "Yh", "Yc"],
                            hidden_size=hid)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype("float32"), n)
             for n, s in (("W", (1, 4 * hid, n_in)), ("R", (1, 4 * hid, hid)),
                          ("B", (1, 8 * hid)))]
    shapes = {"x": (steps, batch, n_in), "h": (1, batch, hid), "c": (1, batch, hid)}
    feed = {k: rng.standard_normal(s).astype("float32") for k, s in shapes.items()}
    stats = _onnx_vs_ort(([node], [("Y", 4), ("Yh", 3), ("Yc", 3)]),
                         [helper.make_tensor_value_info(k, TensorProto.FLOAT, s)
                          for k, s in shapes.items()], inits, feed, opset=14)
    assert stats["fallback_ops"] == []  # one step or many: the time loop is in the kernel
