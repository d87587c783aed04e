"""An artifact built from a model with subgraphs exports, loads in a fresh process and
matches onnxruntime: the weights an ``If`` branch holds travel with the artifact
(``subgraph_params.bin``), and the branch's captured-input names survive graph JSON (a tuple
of names used to come back as one string)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

import nnvm  # noqa: E402


def _model() -> bytes:
    """y = If(flag, x @ W_then, x + b_else): each branch has its own weight and reads x from
    the enclosing graph."""
    rng = np.random.default_rng(0)
    w = helper.make_tensor("w_then", TensorProto.FLOAT, [4, 4],
                           rng.standard_normal(16).astype("float32"))
    b = helper.make_tensor("b_else", TensorProto.FLOAT, [4],
                           rng.standard_normal(4).astype("float32"))
    out = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 4])  # noqa: E731
    then_g = helper.make_graph([helper.make_node("MatMul", ["x", "w_then"], ["t"])], "then",
                               [], [out("t")], initializer=[w])
    else_g = helper.make_graph([helper.make_node("Add", ["x", "b_else"], ["e"])], "else",
                               [], [out("e")], initializer=[b])
    graph = helper.make_graph(
        [helper.make_node("If", ["flag"], ["y"], then_branch=then_g, else_branch=else_g)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
              helper.make_tensor_value_info("flag", TensorProto.BOOL, [])], [out("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model.SerializeToString()


LOAD = textwrap.dedent("""
    import sys, numpy as np, nnvm
    lib = nnvm.runtime.load(sys.argv[1])
    x = np.load(sys.argv[2])
    outs = [lib.run(x=x, flag=np.array(f))[0] for f in (True, False)]
    np.save(sys.argv[3], np.stack(outs))
""")


@pytest.mark.parametrize("target", ["reference", "llvm"])
def test_if_with_branch_weights_exports_and_loads_in_a_fresh_process(tmp_path, target):
    if target == "llvm":
        pytest.importorskip("tvm")
    model = _model()
    x = np.arange(8, dtype="float32").reshape(2, 4) / 8
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    want = np.stack([sess.run(None, {"x": x, "flag": np.array(f)})[0] for f in (True, False)])
    graph, params = nnvm.frontend.from_onnx(model, shape={"x": (2, 4), "flag": ()})
    lib = nnvm.compiler.build(graph, target=target, shape={"x": (2, 4), "flag": ()},
                              params=params)
    art, xin, out = tmp_path / "m.nnvm", tmp_path / "x.npy", tmp_path / "y.npy"
    lib.export(str(art))
    np.save(xin, x)
    res = subprocess.run([sys.executable, "-c", LOAD, str(art), str(xin), str(out)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    np.testing.assert_allclose(np.load(out), want, rtol=1e-6, atol=1e-6)
