"""Bad input gives an NNVMError that names the file, input or node, and the fix."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import nnvm
from nnvm.errors import NNVMError
from nnvm_onnx.errors import NeedsConstantError, OnnxImportError, OnnxUnsupportedError
from onnx_test_helpers import make_model, tensor

H = helper.make_node
F32 = TensorProto.FLOAT


def small_model(opset=17):
    return make_model([H("Relu", ["x"], ["r"], name="relu1"),
                       H("Add", ["r", "bias"], ["y"], name="add1")],
                      [helper.make_tensor_value_info("x", F32, [2, 3])],
                      [helper.make_tensor_value_info("y", F32, [2, 3])],
                      [tensor("bias", np.ones(3, np.float32))], opset=opset)


def test_plugin_registers_the_frontend(tmp_path):
    assert "onnx" in nnvm.plugin_manager.frontends()
    path = tmp_path / "m.onnx"
    path.write_bytes(small_model().SerializeToString())
    front = nnvm.frontend.for_path(str(path))
    assert front is not None and front.name == "onnx"
    graph, params = front.load(str(path))
    assert set(params) == {"bias"}
    out = nnvm.compiler.build(graph, target="reference", params=params).run(
        x=-np.ones((2, 3), np.float32))[0]
    np.testing.assert_array_equal(out, np.ones((2, 3), np.float32))


def test_truncated_file(tmp_path):
    data = small_model().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(OnnxImportError, match="cut.onnx") as info:
        nnvm.frontend.from_onnx(str(path))
    assert "truncated" in str(info.value)


def test_random_bytes_and_missing_file(tmp_path):
    with pytest.raises(NNVMError):
        nnvm.frontend.from_onnx(bytes(range(256)) * 3)
    with pytest.raises(OnnxImportError, match="does not exist"):
        nnvm.frontend.from_onnx(str(tmp_path / "nope.onnx"))


def test_checker_failure_is_reported():
    model = small_model()
    model.graph.node[0].input[0] = ""  # Relu without input
    with pytest.raises(OnnxImportError, match="onnx.checker"):
        nnvm.frontend.from_onnx(model)


def test_unknown_domain_names_the_node():
    model = small_model()
    model.graph.node[0].domain = "com.example"
    model.opset_import.add(domain="com.example", version=1)
    with pytest.raises(OnnxUnsupportedError, match="relu1"):
        nnvm.frontend.from_onnx(model, check=False)


def test_missing_initializer_names_the_node():
    model = small_model()
    del model.graph.initializer[:]
    with pytest.raises(OnnxImportError, match="add1") as info:
        nnvm.frontend.from_onnx(model, check=False)
    assert "bias" in str(info.value)


def test_contradicting_input_shape():
    with pytest.raises(OnnxImportError, match="'x'") as info:
        nnvm.frontend.from_onnx(small_model(), shape={"x": (4, 3)})
    assert "(2, 3)" in str(info.value) and "(4, 3)" in str(info.value)
    with pytest.raises(OnnxImportError, match="names no graph input"):
        nnvm.frontend.from_onnx(small_model(), shape={"nope": (1,)})


def test_too_new_opset():
    import onnx

    model = small_model()
    model.opset_import[0].version = onnx.defs.onnx_opset_version() + 5
    with pytest.raises(OnnxImportError, match="opset newer"):
        nnvm.frontend.from_onnx(model)


def test_every_unsupported_op_is_reported_at_once():
    model = make_model([H("Relu", ["x"], ["a"], name="ok"),
                        H("ImageDecoder", ["raw"], ["img"], name="decode"),
                        H("TfIdfVectorizer", ["s"], ["t"], name="norm", mode="TF",
                          min_gram_length=1, max_gram_length=1, max_skip_count=0,
                          ngram_counts=[0], ngram_indexes=[0], pool_int64s=[1])],
                       [helper.make_tensor_value_info("x", F32, [2]),
                        helper.make_tensor_value_info("raw", TensorProto.UINT8, [10]),
                        helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
                       [helper.make_tensor_value_info("a", F32, [2]),
                        helper.make_tensor_value_info("img", TensorProto.UINT8, [None] * 3),
                        helper.make_tensor_value_info("t", F32, [None])],
                       opset=20)
    with pytest.raises(OnnxUnsupportedError) as info:
        nnvm.frontend.from_onnx(model)
    msg = str(info.value)
    assert "2 unsupported" in msg and "'decode'" in msg and "'norm'" in msg


def _dynamic_reshape_model():
    return make_model([H("Shape", ["x"], ["s"]),
                       H("Gather", ["s", "zero"], ["b"], axis=0),
                       H("Unsqueeze", ["b", "axes"], ["b1"]),
                       H("Concat", ["b1", "minus1"], ["target"], axis=0),
                       H("Reshape", ["x", "target"], ["y"], name="flatten_like")],
                      [helper.make_tensor_value_info("x", F32, ["batch", 3, 4])],
                      [helper.make_tensor_value_info("y", F32, ["batch", 12])],
                      [tensor("zero", np.array(0, np.int64)), tensor("axes", np.array([0])),
                       tensor("minus1", np.array([-1]))])


def test_symbolic_dim_error_names_input_and_dimension():
    with pytest.raises(NeedsConstantError) as info:
        nnvm.frontend.from_onnx(_dynamic_reshape_model())
    msg = str(info.value)
    assert "'x' dim 0 ('batch')" in msg and "shape=" in msg
    assert info.value.symbolic == (("x", 0, "batch"),)


def test_symbolic_dims_stay_symbolic_without_shape_arithmetic():
    model = make_model([H("Relu", ["x"], ["y"])],
                       [helper.make_tensor_value_info("x", F32, ["batch", 4])],
                       [helper.make_tensor_value_info("y", F32, ["batch", 4])])
    graph, _ = nnvm.frontend.from_onnx(model)
    assert "x" not in graph.attrs["shape_inputs"]  # unknown until build(shape=...)
    for batch in (1, 5):
        x = np.linspace(-1, 1, batch * 4, dtype=np.float32).reshape(batch, 4)
        lib = nnvm.compiler.build(graph, target="reference", shape={"x": x.shape})
        np.testing.assert_array_equal(lib.run(x=x)[0], np.maximum(x, 0))


def test_dynamic_batch_specialises_to_static_graph():
    graph, params = nnvm.frontend.from_onnx(_dynamic_reshape_model(), shape={"x": (5, 3, 4)})
    ops = sorted(n.op.name for n in graph.index.nodes if n.op is not None)
    assert ops == ["reshape"]
    assert graph.index.nodes[-1].attrs["shape"] == (5, 12)


def test_shape_tensor_fed_as_input_needs_freeze():
    model = make_model([H("Reshape", ["x", "target"], ["y"], name="reshape1")],
                       [helper.make_tensor_value_info("x", F32, [2, 6]),
                        helper.make_tensor_value_info("target", TensorProto.INT64, [2])],
                       [helper.make_tensor_value_info("y", F32, [None, None])])
    with pytest.raises(NeedsConstantError, match="reshape1") as info:
        nnvm.frontend.from_onnx(model, static_shapes=True)  # default: read at run time
    assert info.value.inputs == ("target",)
    graph, _ = nnvm.frontend.from_onnx(model, freeze={"target": np.array([3, 4])})
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    out = nnvm.compiler.build(graph, target="reference").run(x=x)[0]
    np.testing.assert_array_equal(out, x.reshape(3, 4))
