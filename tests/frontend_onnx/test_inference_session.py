"""``nnvm.InferenceSession`` behaves like onnxruntime's: the model's own input and output
names and order, ``run(output_names, feed)`` returning just the asked outputs in that order,
a compiled artifact cached on disk so the next session does not compile, and symbolic
dimensions compiled per fed shape."""

from __future__ import annotations

import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

import nnvm  # noqa: E402
from nnvm.errors import ExecutionError  # noqa: E402

#: a real model nobody here wrote: PyTorch's Conv2d export shipped in the onnx wheel
CONV2D = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data",
                      "pytorch-converted", "test_Conv2d", "model.onnx")


def _two_outputs(batch="N") -> bytes:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3])
    outs = [helper.make_tensor_value_info("neg", TensorProto.FLOAT, [batch, 3]),
            helper.make_tensor_value_info("relu", TensorProto.FLOAT, [batch, 3])]
    nodes = [helper.make_node("Neg", ["x"], ["neg"]), helper.make_node("Relu", ["x"], ["relu"])]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], outs),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model.SerializeToString()


@pytest.mark.parametrize("target", ["reference", "llvm"])
def test_real_model_names_order_and_values_equal_onnxruntime(tmp_path, target):
    if target == "llvm":
        pytest.importorskip("tvm")
    ref = ort.InferenceSession(CONV2D, providers=["CPUExecutionProvider"])
    sess = nnvm.InferenceSession(CONV2D, target=target, cache_dir=str(tmp_path))
    assert [(a.name, tuple(a.shape), a.type) for a in sess.get_inputs()] == \
        [(a.name, tuple(a.shape), a.type) for a in ref.get_inputs()]
    assert [a.name for a in sess.get_outputs()] == [a.name for a in ref.get_outputs()]
    shape = ref.get_inputs()[0].shape
    feed = {ref.get_inputs()[0].name:
            np.random.default_rng(0).standard_normal(shape).astype("float32")}
    for got, want in zip(sess.run(None, feed), ref.run(None, feed)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_run_returns_the_asked_outputs_in_the_asked_order(tmp_path):
    sess = nnvm.InferenceSession(_two_outputs(batch=2), target="reference",
                                 cache_dir=str(tmp_path))
    x = np.array([[-1, 2, -3], [4, -5, 6]], "float32")
    relu, neg = sess.run(["relu", "neg"], {"x": x})
    np.testing.assert_array_equal(relu, np.maximum(x, 0))
    np.testing.assert_array_equal(neg, -x)
    assert [o.shape for o in sess.run(["neg"], {"x": x})] == [(2, 3)]
    with pytest.raises(ExecutionError, match="unknown output"):
        sess.run(["nope"], {"x": x})
    with pytest.raises(ExecutionError, match="does not match the model's inputs"):
        sess.run(None, {"y": x})


def test_second_session_loads_the_cached_artifact(tmp_path, monkeypatch):
    model = _two_outputs(batch=2)
    nnvm.InferenceSession(model, target="reference", cache_dir=str(tmp_path))
    cached = os.listdir(tmp_path / "sessions")
    assert len(cached) == 1 and cached[0].endswith(".nnvm")
    calls = []
    real = nnvm.compiler.build
    monkeypatch.setattr(nnvm.compiler, "build", lambda *a, **k: calls.append(1) or real(*a, **k))
    sess = nnvm.InferenceSession(model, target="reference", cache_dir=str(tmp_path))
    assert calls == [] and sess.run(None, {"x": np.ones((2, 3), "float32")})[1].sum() == 6
    nnvm.InferenceSession(model, target="reference", cache_dir=False)
    assert calls == [1]  # without the cache it compiles (so the check above can fail)


def test_symbolic_batch_is_compiled_once_and_cached_with_its_plan(tmp_path):
    sess = nnvm.InferenceSession(_two_outputs(), target="reference", cache_dir=str(tmp_path))
    assert sess.get_inputs()[0].shape == ("N", 3)
    for n in (1, 3, 8):
        x = np.arange(3 * n, dtype="float32").reshape(n, 3) - 4
        np.testing.assert_array_equal(sess.run(["relu"], {"x": x})[0], np.maximum(x, 0))
    assert sess.builds == 1
    assert sorted(p.rsplit(".", 1)[-1] for p in os.listdir(tmp_path / "sessions")) == \
        ["json", "nnvm"]  # the bucket module and its batch plan


def test_artifact_bytes_run_too(tmp_path):
    graph, params = nnvm.frontend.from_onnx(_two_outputs(batch=2), shape={"x": (2, 3)})
    lib = nnvm.compiler.build(graph, target="reference", shape={"x": (2, 3)}, params=params)
    lib.export(str(tmp_path / "m.nnvm"))
    sess = nnvm.InferenceSession((tmp_path / "m.nnvm").read_bytes())
    assert [o.name for o in sess.get_outputs()] == ["neg", "relu"]
    assert sess.run(["neg"], {"x": np.ones((2, 3), "float32")})[0].sum() == -6


class _Tensor:
    """A foreign tensor that speaks only DLPack (as PyTorch or JAX tensors do)."""

    def __init__(self, array, device=(1, 0)):
        self._a, self._device = array, device

    def __dlpack__(self, **kw):
        if self._device[0] != 1:
            raise BufferError("the tensor lives on a GPU")
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._device


def test_dlpack_inputs_are_shared_and_device_tensors_refused(tmp_path):
    from nnvm.session import as_host_array

    sess = nnvm.InferenceSession(_two_outputs(batch=2), target="reference",
                                 cache_dir=str(tmp_path))
    x = np.array([[-1, 2, -3], [4, -5, 6]], "float32")
    assert np.shares_memory(as_host_array(_Tensor(x), "x"), x)  # zero-copy
    (relu,) = sess.run(["relu"], {"x": _Tensor(x)})
    np.testing.assert_array_equal(relu, np.maximum(x, 0))
    # and the outputs are DLPack producers
    np.testing.assert_array_equal(np.from_dlpack(relu), relu)
    with pytest.raises(ExecutionError, match="cannot be read through DLPack.*cpu"):
        sess.run(None, {"x": _Tensor(x, device=(2, 0))})


@pytest.mark.parametrize("target", ["reference", "llvm"])
def test_iobinding_writes_into_bound_buffers(tmp_path, target):
    if target == "llvm":
        pytest.importorskip("tvm")
    sess = nnvm.InferenceSession(_two_outputs(batch=2), target=target, cache_dir=str(tmp_path))
    x = np.array([[-1, 2, -3], [4, -5, 6]], "float32")
    b = sess.io_binding()
    b.bind_input("x", x)
    out = np.full((2, 3), np.nan, "float32")
    b.bind_output("relu", out)
    b.bind_output("neg")
    sess.run_with_iobinding(b)
    np.testing.assert_array_equal(out, np.maximum(x, 0))  # written in place
    relu, neg = b.get_outputs()
    assert relu is out
    np.testing.assert_array_equal(neg, -x)
    x[:] = -x  # inputs are bound by reference: refill and run again
    sess.run_with_iobinding(b)
    assert b.get_outputs()[1] is neg  # the allocated buffer is reused
    np.testing.assert_array_equal(out, np.maximum(x, 0))
    np.testing.assert_array_equal(b.copy_outputs_to_cpu()[1], -x)
    b.bind_output("relu", np.empty((3, 2), "float32"))
    with pytest.raises(ExecutionError, match="does not fit"):
        sess.run_with_iobinding(b)
    with pytest.raises(ExecutionError, match="no such output"):
        b.bind_output("nope")
    with pytest.raises(ExecutionError, match="C-contiguous"):
        b.bind_output("neg", np.empty((3, 2), "float32").T)
    other = nnvm.InferenceSession(_two_outputs(batch=2), target=target, cache_dir=str(tmp_path))
    with pytest.raises(ExecutionError, match="another session"):
        other.run_with_iobinding(b)


# -- overridable initializers and structured outputs, as onnxruntime has them --------------------

def _overridable_w(batch="N") -> bytes:
    """``y = x @ W + b`` whose initializers W and b are also graph inputs (older exporters)."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((3, 4)).astype("float32")
    b = rng.standard_normal(4).astype("float32")
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3]),
           helper.make_tensor_value_info("W", TensorProto.FLOAT, [3, 4]),
           helper.make_tensor_value_info("b", TensorProto.FLOAT, [4])]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["xw"]),
             helper.make_node("Add", ["xw", "b"], ["y"])]
    graph = helper.make_graph(nodes, "g", ins,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])],
                              [onnx.numpy_helper.from_array(w, "W"),
                               onnx.numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8).SerializeToString()


def _args(args) -> list:
    return [(a.name, tuple(a.shape), a.type) for a in args]


@pytest.mark.parametrize("target", ["reference", "llvm"])
@pytest.mark.parametrize("batch", [2, "N"])
def test_overridable_initializers_are_optional_inputs_like_onnxruntime(tmp_path, target, batch):
    if target == "llvm":
        pytest.importorskip("tvm")
    model = _overridable_w(batch)
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    sess = nnvm.InferenceSession(model, target=target, cache_dir=str(tmp_path))
    assert _args(sess.get_inputs()) == _args(ref.get_inputs())
    assert _args(sess.get_overridable_initializers()) == \
        _args(ref.get_overridable_initializers())
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3)).astype("float32")
    w2 = rng.standard_normal((3, 4)).astype("float32")
    feeds = [{"x": x}, {"x": x, "W": w2}, {"x": x}, {"x": x, "W": w2, "b": np.ones(4, "f")},
             {"x": x}]  # a fed value is for that call only: the next one is the default again
    for feed in feeds:
        np.testing.assert_allclose(sess.run(None, feed)[0], ref.run(None, feed)[0],
                                   rtol=1e-5, atol=1e-5)
    with pytest.raises(ExecutionError, match="unknown: \\['V'\\]"):
        sess.run(None, {"x": x, "V": w2})
    with pytest.raises(ExecutionError, match="does not match the model's inputs"):
        sess.run(None, {"W": w2})  # an overridable initializer is no substitute for x


def test_overridable_initializers_of_an_exported_artifact(tmp_path):
    graph, params = nnvm.frontend.from_onnx(_overridable_w(2), shape={"x": (2, 3)})
    lib = nnvm.compiler.build(graph, target="reference", shape={"x": (2, 3)}, params=params)
    lib.export(str(tmp_path / "m.nnvm"))
    ref = ort.InferenceSession(_overridable_w(2), providers=["CPUExecutionProvider"])
    sess = nnvm.InferenceSession(str(tmp_path / "m.nnvm"))
    assert _args(sess.get_inputs()) == _args(ref.get_inputs())
    assert _args(sess.get_overridable_initializers()) == \
        _args(ref.get_overridable_initializers())
    x, w2 = np.ones((2, 3), "float32"), np.full((3, 4), 2, "float32")
    for feed in ({"x": x, "W": w2}, {"x": x}):
        np.testing.assert_allclose(sess.run(None, feed)[0], ref.run(None, feed)[0], rtol=1e-5)


def _zipmap_classifier() -> tuple[bytes, np.ndarray]:
    """A real skl2onnx export: LogisticRegression on iris, probabilities through ZipMap."""
    skl2onnx = pytest.importorskip("skl2onnx")
    datasets = pytest.importorskip("sklearn.datasets")
    from sklearn.linear_model import LogisticRegression

    x, y = datasets.load_iris(return_X_y=True)
    x = x.astype("float32")
    clf = LogisticRegression(max_iter=500).fit(x, y)
    return skl2onnx.to_onnx(clf, x[:1], target_opset=15).SerializeToString(), x


def _same_as_onnxruntime(got: list, want: list) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, list):  # ZipMap: one {label: probability} per row
            assert [sorted(d) for d in g] == [sorted(d) for d in w]
            np.testing.assert_allclose([list(d.values()) for d in g],
                                       [[d[k] for k in d] for d in w], rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(g, w)


def test_zipmap_outputs_are_dicts_like_onnxruntime_also_from_the_cache(tmp_path):
    model, x = _zipmap_classifier()
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for _ in range(2):  # the second session loads the cached .nnvm: no ONNX import
        sess = nnvm.InferenceSession(model, target="reference", cache_dir=str(tmp_path))
        assert _args(sess.get_outputs()) == _args(ref.get_outputs())
        for n in (1, 7):
            feed = {"X": x[10 * n:11 * n]}
            _same_as_onnxruntime(sess.run(None, feed), ref.run(None, feed))
        probs = sess.run(["output_probability"], {"X": x[:2]})[0]
        assert isinstance(probs, list) and isinstance(probs[0], dict)
    assert sess.builds == 1
    cached = [p for p in os.listdir(tmp_path / "sessions") if p.endswith(".nnvm")]
    sess = nnvm.InferenceSession(str(tmp_path / "sessions" / cached[0]))  # a .nnvm by itself
    assert [a.name for a in sess.get_outputs()] == [a.name for a in ref.get_outputs()]
    assert _args(sess.get_outputs())[1] == _args(ref.get_outputs())[1]
    feed = {"X": x[:1]}
    _same_as_onnxruntime(sess.run(None, feed), ref.run(None, feed))
    binding = sess.io_binding()
    binding.bind_input("X", x[:1])
    binding.bind_output("output_label")
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(binding.get_outputs()[0], ref.run(None, feed)[0])
    binding.bind_output("output_probability")
    with pytest.raises(ExecutionError, match="is not a tensor"):
        sess.run_with_iobinding(binding)


def test_sequence_outputs_are_lists_of_arrays_like_onnxruntime(tmp_path):
    seq = helper.make_value_info("parts", helper.make_sequence_type_proto(
        helper.make_tensor_type_proto(TensorProto.FLOAT, None)))
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["x"], ["y"]),
             helper.make_node("SequenceConstruct", ["x", "r"], ["parts"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2, 3])], [seq, helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=8).SerializeToString()
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    feed = {"x": np.arange(6, dtype="float32").reshape(2, 3) - 3}
    want = ref.run(None, feed)
    sessions = [nnvm.InferenceSession(model, target="reference", cache_dir=str(tmp_path))
                for _ in range(2)]  # compiled, then loaded from the cache
    cached = [p for p in os.listdir(tmp_path / "sessions") if p.endswith(".nnvm")]
    sessions.append(nnvm.InferenceSession(str(tmp_path / "sessions" / cached[0])))
    for sess in sessions:
        assert _args(sess.get_outputs()) == _args(ref.get_outputs())
        parts, y = sess.run(None, feed)
        assert isinstance(parts, list) and len(parts) == len(want[0])
        for g, w in zip(parts + [y], want[0] + [want[1]]):
            np.testing.assert_array_equal(g, w)
        assert len(sess.run(["parts"], feed)[0]) == 2
