"""The bidirectional LSTM at the corpus's size (silero-vad-16k-sequence: 20 steps of 512
units over 512 inputs, a 4 MB recurrent matrix per direction streamed from L3 every step,
the two directions on a thread each at 2 threads) equals onnxruntime at 1 and 2 threads,
several runs in a row of one library; so do its neighbours: batch 2 with initial states
and ``sequence_lens`` (one entry stopping early), and hidden sizes no vector divides (the
recurrent weights as column panels or plain dot products) with both directions split.

Why: the roofline sweep times this layer (issue 14) and every change to its GEMV (tile
order, panels, thread layout) must keep its numbers; before this file no test built a
512-unit layer. Weights are scaled like a trained layer's (``1 / sqrt(hidden)``), so the
gates are not all saturated and a wrong product shows. Speed is measured by
``benchmarks/bench_roofline.py``, not asserted here.
"""

from __future__ import annotations

import numpy as np
import pytest

import nnvm

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
pytest.importorskip("nnvm_llvm", reason="llvm backend not installed")
pytest.importorskip("tvm", reason="the llvm compiler needs TVM (apache-tvm)")
from test_llvm_recurrent import _onnx_model  # noqa: E402  (a typed one-graph ONNX model)

#: (seq, batch, n_in, hid, lens): the sweep's shape, then batch 2 with one sequence cut
#: short, then hidden sizes of part vectors: 100 over 6 steps (plain dot products, odd
#: k), 37 over 12 (the recurrent weights transposed into column panels); each with work
#: enough for its directions to run in parallel
CASES = {
    "silero-20x1x512": (20, 1, 512, 512, False),
    "batch2-lens-512": (6, 2, 512, 512, True),
    "odd-hidden-100-lens": (6, 2, 64, 100, True),
    "odd-hidden-37-panels": (12, 1, 96, 37, False),
}


def _bidirectional_lstm(rng, seq, batch, n_in, hid, lens):
    """``(model, feed)``: one bidirectional ONNX LSTM, W, R, B initializers, initial states
    fed (and ``sequence_lens`` when ``lens``: the first entry stops 3 steps early)."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    scale = 1 / np.sqrt(hid)
    node = helper.make_node("LSTM", ["x", "W", "R", "B", "L" if lens else "", "h", "c"],
                            ["Y", "Yh", "Yc"], hidden_size=hid, direction="bidirectional")
    inits = [numpy_helper.from_array(rng.uniform(-scale, scale, s).astype("float32"), n)
             for n, s in (("W", (2, 4 * hid, n_in)), ("R", (2, 4 * hid, hid)),
                          ("B", (2, 8 * hid)))]
    shapes = {"x": (seq, batch, n_in), "h": (2, batch, hid), "c": (2, batch, hid)}
    feed = {k: rng.uniform(-1, 1, s).astype("float32") for k, s in shapes.items()}
    inputs = [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in shapes.items()]
    if lens:
        feed["L"] = np.array([seq - 3] + [seq] * (batch - 1), "int32")
        inputs.append(helper.make_tensor_value_info("L", TensorProto.INT32, (batch,)))
    model = _onnx_model([node], inputs, [("Y", 4), ("Yh", 3), ("Yc", 3)], inits, opset=14)
    return model, feed


@pytest.fixture(scope="module", params=sorted(CASES))
def built(request):
    """``(lib, feed, want)`` per case, built once for both thread counts."""
    ort = pytest.importorskip("onnxruntime")
    model, feed = _bidirectional_lstm(np.random.default_rng(7), *CASES[request.param])
    shape = {k: v.shape for k, v in feed.items()}
    g, params = nnvm.frontend.from_onnx(model, shape=shape)
    lib = nnvm.compiler.build(g, target="llvm", shape=shape, params=params,
                              dtype={k: v.dtype.name for k, v in feed.items()})
    assert lib.stats()["num_fallback_kernels"] == 0, lib.stats()["unsupported_ops"]
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feed)
    return lib, feed, want


@pytest.mark.parametrize("threads", [1, 2])
def test_bidirectional_lstm_matches_onnxruntime(built, threads):
    lib, feed, want = built
    lib.set_num_threads(threads)
    for run in range(3):  # a run starts from the same buffers: no state carried over
        got = lib.run(**{k: v for k, v in feed.items() if k in lib.input_names})
        assert len(got) == len(want)
        for name, a, b in zip(("Y", "Y_h", "Y_c"), got, want):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5,
                                       err_msg=f"{name}, {threads} threads, run {run}")
