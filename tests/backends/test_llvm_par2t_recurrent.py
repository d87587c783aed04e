"""A recurrent layer whose directions do not run in parallel splits its input projection
(``X W^T + Wb`` of every step, before the time loop) across threads, on each of its three
paths (dot tiles, column panels, plain dot products), and stays equal to onnxruntime at 1
and 2 threads on row counts no tile divides.

Why: a one-direction layer had no parallel loop at all (a 64-step, 128-unit GRU ran 190 us
at 1 and at 2 threads, half its multiply-adds in the projection). Speed is measured by
``benchmarks/bench_roofline.py``, not asserted here.
"""

from __future__ import annotations

import numpy as np
import pytest

import nnvm

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
pytest.importorskip("nnvm_llvm", reason="llvm backend not installed")
pytest.importorskip("tvm", reason="the llvm compiler needs TVM (apache-tvm)")
from test_llvm_recurrent import _sequence_model  # noqa: E402  (one ONNX recurrent node)

#: (op, seq, batch, n_in, hid, attrs): the projection's path and row tiles
CASES = {
    "gru-sweep-panels-64-rows": ("GRU", 64, 1, 128, 128, {"linear_before_reset": 1}),
    "gru-panels-80-rows-reverse": ("GRU", 80, 1, 64, 32, {"direction": "reverse"}),
    "gru-dots-24-rows": ("GRU", 24, 1, 128, 64, {"linear_before_reset": 1}),
    "gru-panels-37-rows-odd-k": ("GRU", 37, 1, 100, 40, {}),
    "lstm-dots-24-rows": ("LSTM", 24, 1, 128, 64, {}),
    "lstm-dots-batch3-reverse": ("LSTM", 9, 3, 96, 32, {"direction": "reverse"}),
    "rnn-plain-5-rows": ("RNN", 5, 1, 1000, 100, {}),
}


def _recurrent_kernel_text(model, feed) -> str:
    from nnvm_llvm.compiler.codegen import kernel_lowerings
    from nnvm_llvm.tuning.tuner import _prepare

    shapes = {k: v.shape for k, v in feed.items()}
    graph, params = nnvm.frontend.from_onnx(model, shape=shapes)
    graph, params = _prepare(graph, shapes, "float32", params, 3)
    (gl,) = [gl for gl in kernel_lowerings(graph, params, 16) if gl.kind == "extern"]
    return str(gl.primfunc(16))


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_direction_layer_splits_its_input_projection(case):
    op, seq, batch, n_in, hid, attrs = CASES[case]
    model, feed = _sequence_model(np.random.default_rng(0), op, seq, batch, n_in, hid, **attrs)
    assert "T.parallel(" in _recurrent_kernel_text(model, feed)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_split_projection_matches_onnxruntime(case, threads):
    ort = pytest.importorskip("onnxruntime")
    op, seq, batch, n_in, hid, attrs = CASES[case]
    model, feed = _sequence_model(np.random.default_rng(1), op, seq, batch, n_in, hid,
                                  **attrs)
    shapes = {k: v.shape for k, v in feed.items()}
    graph, params = nnvm.frontend.from_onnx(model, shape=shapes)
    lib = nnvm.compiler.build(graph, target="llvm", shape=shapes, params=params)
    lib.set_num_threads(threads)
    got = lib.run(**{k: v for k, v in feed.items() if k in lib.input_names})
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feed)
    assert lib.stats()["num_fallback_kernels"] == 0
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
