"""A long one-direction LSTM/GRU/RNN on dot tiles splits each step into parts that compute
their own units' products AND gates (``recurrent_loop.step_units``, the state
double-buffered; all steps in one launch, ``test_llvm_recurrent_claimed_steps``), and
stays equal to onnxruntime at 1 and 2 threads: odd unit chunk counts, batch 2, forward
and reverse, fed initial states and ``sequence_lens`` (``layout`` 1, which onnxruntime
rejects, against NNVM's reference kernel). The layers the fusion cannot take (a GRU with
its reset before R, a hidden size that is not whole vectors) keep the split product with
the gates after it, checked here too.

Why: with only the product split, a 64-step 128-unit GRU ran as fast at 2 threads as at 1
(the gates on one thread after each launch). Speed is measured by
``benchmarks/bench_roofline.py``, not asserted here.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import nnvm

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
pytest.importorskip("nnvm_llvm", reason="llvm backend not installed")
pytest.importorskip("tvm", reason="the llvm compiler needs TVM (apache-tvm)")
from test_llvm_recurrent import GATES, _onnx_model  # noqa: E402

#: (op, seq, batch, n_in, hid, attrs, fused): hidden sizes of 7 and 9 chunks of 16 units
#: (14 and 18 of 8 on AVX2), so the 2-thread split is uneven
CASES = {
    "gru-sweep-64-steps": ("GRU", 64, 1, 128, 128, {"linear_before_reset": 1}, True),
    "gru-7-chunks-batch2-reverse-lens": ("GRU", 9, 2, 40, 112, {
        "linear_before_reset": 1, "direction": "reverse", "lens": True}, True),
    "lstm-9-chunks-lens": ("LSTM", 7, 2, 24, 144, {"lens": True}, True),
    "lstm-8-steps-reverse": ("LSTM", 8, 1, 128, 128, {"direction": "reverse"}, True),
    "rnn-192-units": ("RNN", 8, 1, 32, 192, {}, True),
    "lstm-layout1-batch2-lens": ("LSTM", 8, 2, 16, 128, {"layout": 1, "lens": True}, True),
    "gru-reset-before-r": ("GRU", 12, 2, 64, 128, {}, False),
    "lstm-odd-hidden-100": ("LSTM", 16, 2, 30, 100, {"lens": True}, False),
}


def _model(rng, op, seq, batch, n_in, hid, attrs):
    """``(model, feed)``: one ONNX recurrent node, initial states (and ``sequence_lens``
    when ``attrs["lens"]``) fed; ``layout`` 1 puts the batch first."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    attrs = dict(attrs)
    lens = attrs.pop("lens", False)
    g = GATES[op.lower()]
    outs = ["Y", "Yh"] + (["Yc"] if op == "LSTM" else [])
    ins = ["x", "W", "R", "B", "L" if lens else "", "h"] + (["c"] if op == "LSTM" else [])
    node = helper.make_node(op, ins, outs, hidden_size=hid, **attrs)
    inits = [numpy_helper.from_array(rng.uniform(-0.5, 0.5, s).astype("float32"), n)
             for n, s in (("W", (1, g * hid, n_in)), ("R", (1, g * hid, hid)),
                          ("B", (1, 2 * g * hid)))]
    major = (batch, seq) if attrs.get("layout") else (seq, batch)  # layout 1: batch first
    state = (batch, 1, hid) if attrs.get("layout") else (1, batch, hid)
    shapes = {"x": (*major, n_in), "h": state}
    if op == "LSTM":
        shapes["c"] = state
    feed = {k: rng.uniform(-1, 1, s).astype("float32") for k, s in shapes.items()}
    inputs = [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in shapes.items()]
    if lens:  # one entry stops early: its later steps keep the state and output 0
        feed["L"] = np.array([seq - 3] + [seq] * (batch - 1), "int32")
        inputs.append(helper.make_tensor_value_info("L", TensorProto.INT32, (batch,)))
    model = _onnx_model([node], inputs, [(n, 4 if n == "Y" else 3) for n in outs], inits,
                        opset=14)
    return model, feed


def built_with_reference(case, seed, target="llvm"):
    """``(lib, inputs, want)``: the case's one-node model built for ``target``, its feed,
    and onnxruntime's outputs (NNVM's reference kernel's for ``layout`` 1, which
    onnxruntime's CPU kernels reject)."""
    ort = pytest.importorskip("onnxruntime")
    op, seq, batch, n_in, hid, attrs, _ = CASES[case]
    model, feed = _model(np.random.default_rng(seed), op, seq, batch, n_in, hid, attrs)
    shape = {k: v.shape for k, v in feed.items()}
    dtype = {k: v.dtype.name for k, v in feed.items()}
    g, params = nnvm.frontend.from_onnx(model, shape=shape)
    lib = nnvm.compiler.build(g, target=target, shape=shape, params=params, dtype=dtype)
    assert lib.stats()["num_fallback_kernels"] == 0, lib.stats()["unsupported_ops"]
    inputs = {k: v for k, v in feed.items() if k in lib.input_names}
    if attrs.get("layout"):
        want = nnvm.compiler.build(g, target="reference", shape=shape, params=params,
                                   dtype=dtype).run(**inputs)
    else:
        want = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, feed)
    return lib, inputs, want


def assert_runs_match(lib, inputs, want, threads, runs=2):
    """``runs`` runs in a row at ``threads`` equal ``want`` (a later run starts from the
    same buffers: no state carried over)."""
    lib.set_num_threads(threads)
    for _ in range(runs):
        got = lib.run(**inputs)
        assert len(got) == len(want)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4,
                                       err_msg=f"{threads} threads")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_step_paths_match_onnxruntime(case, threads):
    assert_runs_match(*built_with_reference(case, 1), threads)


def _kernel_text(model, feed) -> tuple[str, int]:
    """The recurrent kernel's TIR for this machine's vector width, and that width."""
    from nnvm_llvm.compiler.codegen import kernel_lowerings
    from nnvm_llvm.compiler.target import tvm_target, vector_lanes
    from nnvm_llvm.tuning.tuner import _prepare

    from nnvm.backend import parse_target

    lanes = vector_lanes(tvm_target(parse_target("llvm")))
    shapes = {k: v.shape for k, v in feed.items()}
    graph, params = nnvm.frontend.from_onnx(model, shape=shapes)
    graph, params = _prepare(graph, shapes, {k: v.dtype.name for k, v in feed.items()},
                             params, 3)
    (gl,) = [gl for gl in kernel_lowerings(graph, params, lanes) if gl.kind == "extern"]
    return str(gl.primfunc(lanes)), lanes


@pytest.mark.parametrize("case", sorted(CASES))
def test_fused_step_only_where_gates_need_no_other_units(case):
    """The fused step's state buffer holds two rows per batch entry (one read, the other
    written); the split product with the gates after it has one, and no such buffer."""
    op, seq, batch, n_in, hid, attrs, fused = CASES[case]
    model, feed = _model(np.random.default_rng(1), op, seq, batch, n_in, hid, attrs)
    text, lanes = _kernel_text(model, feed)
    assert "T.parallel(" in text, "the layer lost its parallel loops"
    shapes = {tuple(int(v) for v in s.split(",") if v.strip())
              for s in re.findall(r"T\.alloc_buffer\(\(([\d, ]*)\)", text)}
    assert shapes, "no allocation found: the TIR printer changed, update the parser"
    padded = -(-hid // lanes) * lanes
    assert ((2 * batch, padded) in shapes) == fused, sorted(shapes)
