"""LRN on llvm against onnxruntime: the window written as unrolled channel taps, the
``beta`` powers taken as square roots (0.5, 0.75, 1) or ``pow`` (any other), windows of
odd and even size, wider than the channel count, 3-D and 5-D inputs (against the
reference target where onnxruntime refuses: it takes 4-D and odd sizes only), and NaN/inf poisoning only the windows
that hold them.

Why: the kernel no longer reduces in its own stage; a tap off by one channel, a bounds
test on the wrong side, or a root that is not the power it replaces shows up here as a
wrong number against the oracle."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import nnvm  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

# id: (input shape, size, alpha, beta, bias)
CASES = {
    "alexnet_27": ((1, 19, 27, 27), 5, 1e-4, 0.75, 1.0),
    "even_size_beta_half": ((2, 7, 5, 3), 4, 0.02, 0.5, 2.0),
    "size1_beta1": ((1, 3, 4, 17), 1, 0.5, 1.0, 1.0),
    "window_wider_than_channels": ((1, 3, 6, 6), 7, 0.1, 0.75, 0.5),
    "general_beta_1d": ((2, 9, 31), 3, 1e-3, 0.6, 1.5),
    "3d_big_alpha": ((1, 5, 3, 4, 5), 5, 2.0, 0.75, 1.0),
}


def _model(shape, size, alpha, beta, bias):
    node = helper.make_node("LRN", ["x"], ["y"], size=size, alpha=alpha, beta=beta,
                            bias=bias)
    graph = helper.make_graph([node], "lrn", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _both(model, x):
    """(llvm, oracle) outputs: onnxruntime where its LRN runs (4-D inputs, odd sizes), the
    reference target for the others."""
    graph, params = nnvm.frontend.from_onnx(model, shape={"x": x.shape})

    def run(target):
        lib = nnvm.compiler.build(graph, target=target, opt_level=3, shape={"x": x.shape},
                                  params=params)
        return np.asarray(lib.run(x=x)[0])
    got = run("llvm")
    size = next(a.i for a in model.graph.node[0].attribute if a.name == "size")
    if x.ndim != 4 or size % 2 == 0:
        return got, run("reference")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return got, sess.run(None, {"x": x})[0]


@pytest.mark.parametrize("case", sorted(CASES))
def test_lrn_matches_onnxruntime(rng, case):
    shape, *attrs = CASES[case]
    x = (rng.standard_normal(shape) * 3).astype("float32")
    got, want = _both(_model(shape, *attrs), x)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)


def test_lrn_nan_and_inf_stay_in_their_windows(rng):
    """A NaN or inf poisons only the windows that hold it. Both oracles keep a running
    (cumulative) channel sum, so there a NaN, or the inf - inf of a leaving inf, reaches
    every later channel of the pixel; those two pixels are checked against the definition,
    every other one against onnxruntime."""
    shape = (1, 8, 3, 5)
    x = rng.standard_normal(shape).astype("float32")
    x[0, 1, 0, 0] = np.nan
    x[0, 6, 2, 4] = np.inf
    got, want = _both(_model(shape, 3, 1e-2, 0.75, 1.0), x)
    assert np.isnan(got[0, :3, 0, 0]).all() and np.isfinite(got[0, 3:, 0, 0]).all()
    # channel 6 is inf / inf; its neighbours' windows hold the inf: finite / inf = 0
    assert np.isnan(got[0, 6, 2, 4]) and (got[0, [5, 7], 2, 4] == 0).all()
    assert np.isfinite(got[0, :5, 2, 4]).all()
    ok = np.ones(shape, bool)
    ok[0, :, 0, 0] = ok[0, :, 2, 4] = False
    np.testing.assert_allclose(got[ok], want[ok], rtol=2e-6, atol=1e-6)


def test_lrn_weighs_its_elements_when_choosing_threads():
    """An LRN element (five taps, two roots) counts as several elements of work, so the
    AlexNet-sized LRN (193,600 elements, ~85 us on one thread) is split across threads,
    while a plain add of as many elements (a few microseconds) stays on one."""
    import tvm
    from tvm import te

    from nnvm_llvm.compiler import schedules

    shape = (1, 64, 55, 55)
    x = te.placeholder(shape, name="x")
    lrn = te.compute(shape, lambda n, c, h, w: te.sqrt(
        1.0 + sum(x[n, te.min(c + k, 63), h, w] * x[n, te.min(c + k, 63), h, w]
                  for k in range(5))), name="lrn")
    add = te.compute(shape, lambda *i: x(*i) + 1.0, name="add")
    for out, parallel in ((lrn, True), (add, False)):
        func = te.create_prim_func([x, out])
        sch = tvm.s_tir.Schedule(func)
        (block,) = schedules._blocks(sch)
        assert (schedules._element_cost(sch, block) > 1) == parallel
        scheduled = schedules.schedule(func, schedules.ScheduleInfo("elemwise", 16))
        assert ("T.parallel" in scheduled.script()) == parallel, out.op.name
