"""The main job (examples/demo.py) and its bundled model."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import nnvm

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODELS = os.path.join(ROOT, "examples", "models")


def load_bundled():
    with open(os.path.join(MODELS, "digits_mlp.json"), encoding="utf-8") as f:
        graph = nnvm.graph.load_json(f.read())
    with open(os.path.join(MODELS, "digits_mlp.params"), "rb") as f:
        params = nnvm.compiler.load_param_dict(f.read())
    samples = np.load(os.path.join(MODELS, "digits_mlp.samples.npz"))
    return graph, params, samples["data"], samples["label"]


def test_bundled_files_are_small():
    for name in os.listdir(MODELS):
        assert os.path.getsize(os.path.join(MODELS, name)) < 64 * 1024, name


def test_bundled_model_is_the_symbol_the_script_writes():
    sys.path.insert(0, MODELS)
    try:
        import make_models
    finally:
        sys.path.remove(MODELS)
    graph, params, data, _ = load_bundled()
    nnvm.compiler.graph_util.check_graph_equal(graph, nnvm.graph.create(
        make_models.digits_mlp_symbol()))
    assert {k: v.shape for k, v in params.items()} == {
        "fc1_weight": (32, 64), "fc1_bias": (32,), "fc2_weight": (10, 32), "fc2_bias": (10,)}
    assert data.shape == (32, 64) and data.dtype == np.float32


def test_bundled_model_classifies_digits_and_matches_numpy():
    graph, params, data, labels = load_bundled()
    lib = nnvm.compiler.build(graph, target="reference", shape={"data": data.shape},
                              params=params)
    (prob,) = lib.run(data=data)
    h = np.maximum(data @ params["fc1_weight"].T + params["fc1_bias"], 0)
    logits = h @ params["fc2_weight"].T + params["fc2_bias"]
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    np.testing.assert_allclose(prob, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)
    assert np.mean(prob.argmax(axis=1) == labels) >= 0.9


def test_bundled_onnx_model_is_the_same_network():
    ort = pytest.importorskip("onnxruntime")
    graph, params, data, _ = load_bundled()
    sess = ort.InferenceSession(os.path.join(MODELS, "digits_mlp.onnx"),
                                providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, {"data": data})
    lib = nnvm.compiler.build(graph, target="reference", shape={"data": data.shape},
                              params=params)
    np.testing.assert_allclose(lib.run(data=data)[0], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fmt", ["auto", "json"])
def test_demo_runs_on_the_best_target(fmt):
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "demo.py"),
                           "--format", fmt, "--repeat", "5"], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert f"target: {nnvm.backend.best_target()}" in out
    assert "accuracy on 32 held-out digits" in out and "ms" in out
    assert "(ok)" in out
    accuracy = float(out.split("accuracy on 32 held-out digits: ")[1].split()[0])
    assert accuracy >= 0.9
    if fmt == "json":
        assert "digits_mlp.json" in out
