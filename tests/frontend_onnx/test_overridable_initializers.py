"""Initializers listed as graph inputs are overridable defaults (ONNX IR >= 4, onnxruntime's
rule): imported as graph inputs whose default is the param of the same name, compiled as
inputs (nothing computed from them is folded), fed values win, export/load keeps the default.
"""

from __future__ import annotations

import logging

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

W = (np.arange(12, dtype=np.float32).reshape(4, 3) - 5) / 10
B = np.ones(3, np.float32)


def _model(ir_version: int = 8):
    """Y = X @ relu(W) + B with W an initializer that is also a graph input (B is not)."""
    nodes = [helper.make_node("Relu", ["W"], ["W2"]),
             helper.make_node("MatMul", ["X", "W2"], ["T"]),
             helper.make_node("Add", ["T", "B"], ["Y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 4]),
                     helper.make_tensor_value_info("W", TensorProto.FLOAT, [4, 3])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 3])],
        initializer=[numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "B")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = ir_version
    return model


def _ort(model, feed):
    so = ort.SessionOptions()
    so.log_severity_level = 3  # its "initializer appears in graph inputs" warning
    return ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"]).run(None, feed)


def _build(model, target, **kw):
    graph, params = nnvm.frontend.from_onnx(model, **kw)
    return graph, nnvm.compiler.build(graph, target=target, shape={"X": (2, 4)},
                                      params=params)


def test_import_keeps_it_an_input_with_a_default():
    graph, params = nnvm.frontend.from_onnx(_model())
    assert graph.attrs["input_defaults"] == ["W"]
    assert "W" in graph.index.input_names
    np.testing.assert_array_equal(params["W"], W)
    ops = [n.op.name for n in graph.index.nodes if n.op is not None]
    assert "relu" in ops  # relu(W) is computed, not folded into a constant


@pytest.mark.parametrize("target", TARGETS)
def test_default_and_fed_value_match_onnxruntime(target, rng):
    model = _model()
    x = rng.standard_normal((2, 4)).astype(np.float32)
    other = rng.standard_normal((4, 3)).astype(np.float32)
    _, lib = _build(model, target)
    assert lib.input_names == ["X"]  # as onnxruntime's get_inputs(): the default is optional
    np.testing.assert_allclose(lib.run(X=x)[0], _ort(model, {"X": x})[0], rtol=1e-5)
    np.testing.assert_allclose(lib.run(X=x, W=other)[0], _ort(model, {"X": x, "W": other})[0],
                               rtol=1e-5)
    # module state, as for any input: a fed value stays bound until another is fed
    np.testing.assert_allclose(lib.run(X=x)[0], _ort(model, {"X": x, "W": other})[0],
                               rtol=1e-5)
    np.testing.assert_allclose(lib.run(X=x, W=W)[0], _ort(model, {"X": x})[0], rtol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
def test_export_load_keeps_the_default_and_the_input(target, rng, tmp_path):
    x = rng.standard_normal((2, 4)).astype(np.float32)
    other = rng.standard_normal((4, 3)).astype(np.float32)
    model = _model()
    _, lib = _build(model, target)
    path = str(tmp_path / "m.nnvm")
    lib.export(path)
    loaded = nnvm.runtime.load(path)
    np.testing.assert_allclose(loaded.run(X=x)[0], _ort(model, {"X": x})[0], rtol=1e-5)
    np.testing.assert_allclose(loaded.run(X=x, W=other)[0],
                               _ort(model, {"X": x, "W": other})[0], rtol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
def test_conv_weight_fed_at_run_time(target, rng):
    """A conv weight that may be overridden is not pre-packed as a constant."""
    wv = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["X", "Wc"], ["Y"], pads=[1, 1, 1, 1])], "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 3, 8, 8]),
         helper.make_tensor_value_info("Wc", TensorProto.FLOAT, [8, 3, 3, 3])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 8, 8, 8])],
        initializer=[numpy_helper.from_array(wv, "Wc")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    other = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    g, params = nnvm.frontend.from_onnx(model)
    lib = nnvm.compiler.build(g, target=target, shape={"X": x.shape}, params=params)
    np.testing.assert_allclose(lib.run(X=x)[0], _ort(model, {"X": x})[0], rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_allclose(lib.run(X=x, Wc=other)[0],
                               _ort(model, {"X": x, "Wc": other})[0], rtol=1e-4, atol=1e-5)


def test_ir_version_3_initializers_are_constants():
    """Before IR 4 every initializer had to be listed as an input: all are constants."""
    graph, _ = nnvm.frontend.from_onnx(_model(ir_version=3), check=False)
    assert "input_defaults" not in graph.attrs
    ops = [n.op.name for n in graph.index.nodes if n.op is not None]
    assert "relu" not in ops  # folded at import


def test_freeze_binds_it_to_a_constant(rng):
    x = rng.standard_normal((2, 4)).astype(np.float32)
    other = rng.standard_normal((4, 3)).astype(np.float32)
    graph, lib = _build(_model(), "reference", freeze={"W": other})
    assert "input_defaults" not in graph.attrs
    assert "W" not in graph.index.input_names
    np.testing.assert_allclose(lib.run(X=x)[0], _ort(_model(), {"X": x, "W": other})[0],
                               rtol=1e-5)


def test_freeze_with_a_wrong_shape_is_an_nnvm_error():
    with pytest.raises(nnvm.NNVMError, match="contradicts"):
        nnvm.frontend.from_onnx(_model(), freeze={"W": np.zeros((2, 2), np.float32)})


def test_a_value_needed_at_import_is_frozen_with_a_warning(rng, caplog):
    """Reshape's target shape must be known at import: that initializer stays a constant
    (logged), the other one remains overridable."""
    shape = np.array([3, 4], np.int64)
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["X", "S"], ["R"]),
         helper.make_node("Mul", ["R", "K"], ["Y"])], "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 6]),
         helper.make_tensor_value_info("S", TensorProto.INT64, [2]),
         helper.make_tensor_value_info("K", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3, 4])],
        initializer=[numpy_helper.from_array(shape, "S"),
                     numpy_helper.from_array(np.full(4, 2.0, np.float32), "K")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    with caplog.at_level(logging.WARNING, logger="nnvm.onnx"):
        g, params = nnvm.frontend.from_onnx(model)
    assert "initializer 'S'" in caplog.text
    assert g.attrs["input_defaults"] == ["K"]
    x = rng.standard_normal((2, 6)).astype(np.float32)
    k = np.arange(4, dtype=np.float32)
    lib = nnvm.compiler.build(g, target="reference", shape={"X": (2, 6)}, params=params)
    np.testing.assert_allclose(lib.run(X=x, K=k)[0], _ort(model, {"X": x, "K": k})[0])
