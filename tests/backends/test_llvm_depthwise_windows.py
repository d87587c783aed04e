"""Depthwise convolutions on ``llvm`` computed over flattened, stride-phase-split planes
(``nnvm_llvm.compiler.flat_window``), checked against the ``reference`` target.

The flat layout computes columns past the row end and drops them, reads each stride phase
at unit stride, and sizes its planes from the kernel's reach: the cases cover what could
go wrong there (odd and tiny planes, strides 2 and 3 with asymmetric padding, dilation,
a kernel taller than wide, no padding, batches), each with the ReLU6 epilogue MobileNets
fuse into the kernel.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")
import nnvm  # noqa: E402
import nnvm.symbol as sym  # noqa: E402

CASES = {
    # id: (input shape, kernel, strides, padding (top, left, bottom, right), dilation)
    "mobilenet_s1": ((1, 16, 14, 14), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    "mobilenet_s2": ((1, 16, 28, 28), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    "odd_plane_s2_asym": ((1, 5, 13, 11), (3, 3), (2, 2), (0, 0, 1, 1), (1, 1)),
    "tf_same_s2_k5": ((1, 6, 15, 9), (5, 5), (2, 2), (1, 1, 2, 2), (1, 1)),
    "stride3_wide": ((1, 3, 10, 23), (3, 3), (3, 3), (1, 2, 1, 0), (1, 1)),
    "dilated_s1": ((1, 4, 16, 16), (5, 5), (1, 1), (4, 4, 4, 4), (2, 2)),
    "dilated_s2": ((1, 4, 17, 19), (3, 3), (2, 2), (2, 2, 2, 2), (2, 2)),
    "tiny_1x1_plane": ((1, 8, 1, 1), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    "tiny_2x3_plane": ((1, 7, 2, 3), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    "tall_kernel_no_pad": ((1, 4, 9, 12), (5, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
    "batch3_7x7": ((3, 10, 7, 7), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    "batch2_s2_k5": ((2, 12, 20, 20), (5, 5), (2, 2), (2, 2, 2, 2), (1, 1)),
}


def _model(xs, kernel, strides, padding, dilation, rng, epilogue="relu6"):
    """A depthwise conv with bias and the ReLU6 (MobileNet) or SiLU (EfficientNet) epilogue."""
    c = xs[1]
    x, w, b = sym.Variable("x"), sym.Variable("w"), sym.Variable("b")
    y = sym.conv2d(x, w, b, channels=c, kernel_size=kernel, strides=strides, padding=padding,
                   dilation=dilation, groups=c, use_bias=True)
    y = sym.clip(y, a_min=0.0, a_max=6.0) if epilogue == "relu6" else y * sym.sigmoid(y)
    params = {"w": (rng.standard_normal((c, 1) + kernel) * 0.5).astype("float32"),
              "b": rng.standard_normal(c).astype("float32")}
    return y, params


@pytest.mark.parametrize("case", sorted(CASES))
def test_depthwise_matches_reference(case):
    xs, kernel, strides, padding, dilation = CASES[case]
    rng = np.random.default_rng(7)
    y, params = _model(xs, kernel, strides, padding, dilation, rng)
    xv = (rng.standard_normal(xs) * 3).astype("float32")
    got, want = [nnvm.compiler.build(y, target=t, shape={"x": xs}, params=params).run(x=xv)[0]
                 for t in ("llvm", "reference")]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_depthwise_keeps_nan_through_relu6():
    """The phase planes are padded with zeros, never with a neighbour's values: a NaN in
    one channel stays in that channel's window, and ReLU6 keeps it."""
    rng = np.random.default_rng(3)
    y, params = _model((1, 4, 9, 9), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), rng)
    xv = rng.standard_normal((1, 4, 9, 9)).astype("float32")
    xv[0, 1, 4, 4] = np.nan
    got = nnvm.compiler.build(y, target="llvm", shape={"x": xv.shape}, params=params).run(x=xv)[0]
    want = np.zeros(got.shape, bool)
    want[0, 1, 2, 2] = True  # the one window (rows and columns 3..5) over element (4, 4)
    np.testing.assert_array_equal(np.isnan(got), want)


def test_every_tuning_knob_of_a_depthwise_kernel_schedules():
    """``nnvm tune``'s knobs for the flat window (``vw``, ``rt``, ``parallel``)."""
    assert_knobs_schedule((1, 24, 28, 28), (3, 3), (2, 2), (1, 1, 1, 1), {"vw", "rt", "parallel"})


def assert_knobs_schedule(xs, kernel, strides, padding, names) -> None:
    """The depthwise kernel's knob space is ``names``; the first of each knob is the untuned
    kernel, and every combination is one the template accepts (a knob it refused would fall
    back to the plain loop nest and waste the tuner's trials)."""
    import itertools

    import tvm
    from nnvm_llvm.compiler.codegen import kernel_lowerings
    from nnvm_llvm.compiler.schedules import ScheduleInfo, knob_space, schedule

    rng = np.random.default_rng(5)
    y, params = _model(xs, kernel, strides, padding, (1, 1), rng)
    graph, params = nnvm.compiler.optimize(y, shape={"x": xs}, params=params)
    (gl,) = [g for g in kernel_lowerings(graph, params, 16) if g.kind == "depthwise"]
    space = knob_space(gl.primfunc(16), ScheduleInfo("depthwise", 16))
    assert set(space) == set(names), space
    plain = schedule(gl.primfunc(16), ScheduleInfo("depthwise", 16))
    first = schedule(gl.primfunc(16), ScheduleInfo(
        "depthwise", 16, knobs={k: v[0] for k, v in space.items()}))
    tvm.ir.assert_structural_equal(plain, first)
    for combo in itertools.product(*space.values()):
        info = ScheduleInfo("depthwise", 16, knobs=dict(zip(space, combo)))
        schedule(gl.primfunc(16), info)
        assert info.applied, combo


@pytest.mark.parametrize("xs,strides", [((2, 8, 40, 40), (1, 1)), ((1, 6, 36, 37), (2, 2)),
                                        ((1, 5, 7, 7), (1, 1))],
                         ids=["wide_rows_s1", "wide_rows_s2", "short_rows"])
def test_depthwise_with_silu_epilogue_in_vector_rows(xs, strides):
    """EfficientNet's SiLU epilogue in TVM vectors: 40-wide rows in vectors of 10 (a divisor
    of the row), 7-wide rows one vector each; 19 wide (prime) is left to LLVM's loop."""
    rng = np.random.default_rng(11)
    c = xs[1]
    x, w, b = sym.Variable("x"), sym.Variable("w"), sym.Variable("b")
    conv = sym.conv2d(x, w, b, channels=c, kernel_size=(3, 3), strides=strides,
                      padding=(1, 1), groups=c, use_bias=True)
    y = conv * sym.sigmoid(conv)
    params = {"w": (rng.standard_normal((c, 1, 3, 3)) * 0.5).astype("float32"),
              "b": rng.standard_normal(c).astype("float32")}
    xv = rng.standard_normal(xs).astype("float32")
    got, want = [nnvm.compiler.build(y, target=t, shape={"x": xs}, params=params).run(x=xv)[0]
                 for t in ("llvm", "reference")]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("xs,kernel,strides", [((1, 6, 9, 38), (5, 5), (1, 1)),
                                               ((2, 5, 11, 76), (3, 3), (2, 2)),
                                               ((1, 4, 6, 34), (3, 3), (1, 1))],
                         ids=["rows_38_k5", "rows_38_s2_batch2", "rows_34"])
def test_depthwise_with_bias_only_in_pairs_of_columns(xs, kernel, strides):
    """A bias-only epilogue over rows whose widest divisor under a vector is 2 (38 = 2 x 19,
    34 = 2 x 17): the rows are read out of the flat result in TVM vectors of 2, and the
    schedule must still apply (no fallback) and match the reference."""
    from nnvm_llvm.compiler.codegen import kernel_lowerings
    from nnvm_llvm.compiler.schedules import ScheduleInfo, schedule

    rng = np.random.default_rng(13)
    c = xs[1]
    x, w, b = sym.Variable("x"), sym.Variable("w"), sym.Variable("b")
    pad = kernel[0] // 2
    y = sym.conv2d(x, w, b, channels=c, kernel_size=kernel, strides=strides,
                   padding=(pad, pad), groups=c, use_bias=True)
    params = {"w": (rng.standard_normal((c, 1) + kernel) * 0.5).astype("float32"),
              "b": rng.standard_normal(c).astype("float32")}
    graph, opt = nnvm.compiler.optimize(y, shape={"x": xs}, params=params)
    (gl,) = [g for g in kernel_lowerings(graph, opt, 16) if g.kind == "depthwise"]
    info = ScheduleInfo("depthwise", 16)
    func = schedule(gl.primfunc(16), info)
    assert info.applied
    assert "T.vectorized(2)" in str(func.script())  # the output rows in pairs
    xv = (rng.standard_normal(xs) * 3).astype("float32")
    got, want = [nnvm.compiler.build(y, target=t, shape={"x": xs}, params=params).run(x=xv)[0]
                 for t in ("llvm", "reference")]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
