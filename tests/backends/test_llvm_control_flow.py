"""Control flow on ``llvm``: the decision on the host, the bodies compiled.

An ``If`` / ``Loop`` node is one host step of the llvm executor; its bodies are built for
llvm the first time they run with a given input signature (``nnvm_llvm/runtime/subgraphs.py``)
and counted as compiled, not as reference fallbacks. Each model is built with ``onnx.helper``
and compared with onnxruntime, also after export and load.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("tvm")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import nnvm  # noqa: E402


def _if_model():
    """y = cond ? relu(x @ W + b) : tanh(x) * 2 (branches capture x and the weights)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype("float32"), "W")
    b = numpy_helper.from_array(rng.standard_normal(8).astype("float32"), "B")
    then = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Add", ["m", "B"], ["a"]),
         helper.make_node("Relu", ["a"], ["t_out"])], "then", [],
        [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, [4, 8])])
    two = numpy_helper.from_array(np.array(2.0, "float32"), "two")
    other = helper.make_graph(
        [helper.make_node("Tanh", ["x"], ["th"]), helper.make_node("Mul", ["th", "two"], ["e_out"])],
        "else", [], [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, [4, 8])], [two])
    node = helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)
    graph = helper.make_graph(
        [node], "if_model",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8]),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _loop_model():
    """Three iterations of acc = tanh(acc @ W) (a recurrent body), plus the scan output."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array((rng.standard_normal((6, 6)) * 0.5).astype("float32"), "W")
    body = helper.make_graph(
        [helper.make_node("MatMul", ["acc_in", "W"], ["m"]),
         helper.make_node("Tanh", ["m"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Identity", ["acc_out"], ["scan_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [2, 6])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [2, 6]),
         helper.make_tensor_value_info("scan_out", TensorProto.FLOAT, [2, 6])])
    trip = numpy_helper.from_array(np.array(3, "int64"), "trip")
    true = numpy_helper.from_array(np.array(True), "true")
    node = helper.make_node("Loop", ["trip", "true", "x"], ["final", "scans"], body=body)
    graph = helper.make_graph(
        [node], "loop_model", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
        [helper.make_tensor_value_info("final", TensorProto.FLOAT, [2, 6]),
         helper.make_tensor_value_info("scans", TensorProto.FLOAT, [3, 2, 6])], [w, trip, true])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _runners(lib):
    return [n.info["subgraph_runner"] for n in lib.graph.index.nodes
            if n.op is not None and "subgraph_runner" in n.info]


def _check(model, feeds, shapes, tmp_path, op):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    graph, params = nnvm.frontend.from_onnx(model, shape=shapes)
    lib = nnvm.compiler.build(graph, target="llvm", shape=shapes, params=params)
    stats = lib.stats()
    assert stats["num_fallback_kernels"] == 0 and stats["control_flow_ops"] == [op]
    path = str(tmp_path / "m.nnvm")
    lib.export(path)
    loaded = nnvm.runtime.load(path)
    for module in (lib, loaded):
        for feed in feeds:
            want = sess.run(None, feed)
            got = module.run(**{k: v for k, v in feed.items() if k in module.input_names})
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
        runners = _runners(module)
        assert runners and sum(r.compiled for r in runners) >= len(feeds)
        assert sum(r.interpreted for r in runners) == 0


def test_if_branches_run_compiled(tmp_path):
    x = np.random.default_rng(2).standard_normal((4, 8)).astype("float32")
    feeds = [{"x": x, "cond": np.array(True)}, {"x": x, "cond": np.array(False)}]
    _check(_if_model(), feeds, {"x": (4, 8), "cond": ()}, tmp_path, "if_else")


def test_loop_body_runs_compiled(tmp_path):
    x = np.random.default_rng(3).standard_normal((2, 6)).astype("float32")
    _check(_loop_model(), [{"x": x}], {"x": (2, 6)}, tmp_path, "loop")
