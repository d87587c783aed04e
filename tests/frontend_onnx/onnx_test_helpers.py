"""Helpers for the ONNX frontend tests: model building and the onnxruntime oracle."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")


def make_model(nodes, inputs, outputs, initializers=(), opset: int = 17, name: str = "model"):
    """A checked ModelProto built from helper-made parts (IR version onnxruntime accepts)."""
    from onnx import helper

    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs),
                              initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="nnvm-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def ort_run(model, feed: dict) -> list[np.ndarray]:
    """Run with onnxruntime (the oracle)."""
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feed)


def nnvm_run(model, feed: dict, shape=None, target: str = "reference", **kw) -> list:
    """Import with nnvm.frontend.from_onnx, build for ``target`` and run."""
    import nnvm

    shape = shape if shape is not None else {k: v.shape for k, v in feed.items()}
    graph, params = nnvm.frontend.from_onnx(model, shape=shape, **kw)
    dtypes = {k: v.dtype.name for k, v in feed.items() if k in graph.index.input_names}
    lib = nnvm.compiler.build(graph, target=target, shape={
        k: v for k, v in shape.items() if k in graph.index.input_names}, dtype=dtypes,
        params=params)
    return lib.run(**{k: v for k, v in feed.items() if k in lib.input_names})


def tensor(name, array):
    from onnx import numpy_helper

    return numpy_helper.from_array(np.asarray(array), name)
