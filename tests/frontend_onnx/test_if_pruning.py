"""An ``If`` whose untaken branch cannot take the model's input shapes still imports, as in
onnxruntime (which runs only the taken branch): real voice-activity models switch on their
sample rate, and each branch only fits its own frame size. The bad branch is pruned at
import; selecting it at run time is a clear ``ExecutionError``; ``--freeze`` on the CLI binds
the condition's input so the If folds away."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

import nnvm  # noqa: E402
from nnvm import cli  # noqa: E402
from nnvm.errors import ExecutionError  # noqa: E402


def _out(name):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, ["d0", "d1"])


def _model(then_reshape=None) -> bytes:
    """y = If(sr == 16000, relu(x), reshape(x, (2, 3))): the else branch fits only 6
    elements, so with x of shape (1, 4) it cannot be imported."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    sr = helper.make_tensor_value_info("sr", TensorProto.INT64, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["d0", "d1"])
    then_nodes, then_init = [helper.make_node("Relu", ["x"], ["t"])], []
    if then_reshape is not None:  # a then branch that does not fit either
        then_nodes = [helper.make_node("Reshape", ["x", "shape_t"], ["t"])]
        then_init = [helper.make_tensor("shape_t", TensorProto.INT64, [2], then_reshape)]
    then_g = helper.make_graph(then_nodes, "then", [], [_out("t")], initializer=then_init)
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [2, 3])
    else_g = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["e"])], "else",
                               [], [_out("e")], initializer=[shape])
    k = helper.make_tensor("k", TensorProto.INT64, [], [16000])
    nodes = [helper.make_node("Equal", ["sr", "k"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    graph = helper.make_graph(nodes, "g", [x, sr], [y], initializer=[k])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model.SerializeToString()


X = np.array([[-1.0, 2.0, -3.0, 4.0]], "float32")


@pytest.mark.parametrize("target", ["reference", "llvm"])
def test_untaken_branch_that_cannot_fit_is_pruned(target):
    if target == "llvm":
        pytest.importorskip("tvm")
    model = _model()
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(
        None, {"x": X, "sr": np.array(16000, "int64")})[0]
    graph, params = nnvm.frontend.from_onnx(model, shape={"x": (1, 4), "sr": ()})
    lib = nnvm.compiler.build(graph, target=target, shape={"x": (1, 4), "sr": ()},
                              params=params)
    np.testing.assert_array_equal(lib.run(x=X, sr=np.array(16000, "int64"))[0], want)
    with pytest.raises(ExecutionError, match=r"selected the else branch, which cannot run"):
        lib.run(x=X, sr=np.array(8000, "int64"))


def test_both_branches_unfit_is_still_an_import_error():
    model = _model(then_reshape=[5, 5])
    with pytest.raises(nnvm.NNVMError, match="Reshape"):
        nnvm.frontend.from_onnx(model, shape={"x": (1, 4), "sr": ()})


def test_cli_freeze_binds_the_condition(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    path.write_bytes(_model())
    art = tmp_path / "m.nnvm"
    assert cli.main(["compile", str(path), "--target", "reference", "--shape", "x=1,4",
                     "--freeze", "sr=16000", "-o", str(art), "-q"]) == 0
    lib = nnvm.runtime.load(str(art))
    assert lib.input_names == ["x"]  # sr is a constant now, the If folded away
    np.testing.assert_array_equal(lib.run(x=X)[0], np.maximum(X, 0))
    assert cli.main(["compile", str(path), "--freeze", "sr", "-o", str(art), "-q"]) != 0
    assert "--freeze 'sr'" in capsys.readouterr().err
