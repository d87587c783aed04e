"""A model's own output names are the module's names everywhere (``lib.output_names``, loaded
artifacts, the CLI's ``<name>.npy`` files), in the model's order, as onnxruntime reports them;
NNVM's ``<node>_<output>`` names used to replace them (``/model/Unsqueeze_output``)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

import nnvm  # noqa: E402
from nnvm import cli  # noqa: E402
from nnvm.backend import build_reason, get_backend  # noqa: E402
from nnvm.errors import BackendUnavailableError  # noqa: E402


def _model() -> bytes:
    """Two outputs whose names are not node names, in an order unlike the node order."""
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [2, 3])
    outs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 2, 3]),
            helper.make_tensor_value_info("/model/relu:0", TensorProto.FLOAT, [2, 3])]
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [0])
    nodes = [helper.make_node("Relu", ["input"], ["/model/relu:0"], name="/model/Relu"),
             helper.make_node("Unsqueeze", ["/model/relu:0", "axes"], ["logits"],
                              name="/model/Unsqueeze")]
    graph = helper.make_graph(nodes, "g", [x], outs, initializer=[axes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    return model.SerializeToString()


def _targets():
    out = ["reference"]
    try:
        if build_reason(get_backend("llvm", require_available=False)) is None:
            out.append("llvm")
    except BackendUnavailableError:
        pass
    return out


@pytest.mark.parametrize("target", _targets())
def test_module_and_artifact_use_the_models_output_names(tmp_path, target):
    model = _model()
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    want = [o.name for o in sess.get_outputs()]
    graph, params = nnvm.frontend.from_onnx(model, shape={"input": (2, 3)})
    lib = nnvm.compiler.build(graph, target=target, shape={"input": (2, 3)}, params=params)
    assert lib.output_names == want == ["logits", "/model/relu:0"]
    x = np.array([[-1, 2, -3], [4, -5, 6]], "float32")
    for got, ref in zip(lib.run(input=x), sess.run(None, {"input": x})):
        np.testing.assert_array_equal(got, ref)
    path = tmp_path / "m.nnvm"
    lib.export(str(path))
    assert nnvm.runtime.load(str(path)).output_names == want


def test_cli_writes_one_file_per_model_output_name(tmp_path, capsys):
    onnx_path = tmp_path / "m.onnx"
    onnx_path.write_bytes(_model())
    art = tmp_path / "m.nnvm"
    assert cli.main(["compile", str(onnx_path), "--target", "reference", "--shape",
                     "input=2,3", "-o", str(art), "-q"]) == 0
    np.save(tmp_path / "x.npy", np.ones((2, 3), "float32"))
    out = tmp_path / "out"
    assert cli.main(["run", str(art), "--input", f"input={tmp_path / 'x.npy'}",
                     "--output-dir", str(out), "-q"]) == 0
    capsys.readouterr()
    names = sorted(p.name for p in out.glob("*.npy"))
    assert names == ["_model_relu_0.npy", "logits.npy"], names  # file-safe spelling
