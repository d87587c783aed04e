"""Depthwise convs on small planes computed with 16 channels in a vector
(``nnvm_llvm.compiler.window_blocked``), checked against the ``reference`` target.

The kernel re-lays its input out per block of 16 channels and writes NCHW back, so the
cases cover what could go wrong there: channel counts not a multiple of the vector (the
padded lanes read the last channel again and must never be written), strides with
asymmetric padding, dilation, batches (the parallel loop runs over images x blocks) and the
fused bias + ReLU6 / SiLU epilogues.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")
import nnvm  # noqa: E402
from nnvm_llvm.compiler.flat_window import FlatPlane  # noqa: E402
from nnvm_llvm.compiler.window_blocked import wants_blocked  # noqa: E402
from test_llvm_depthwise_windows import _model, assert_knobs_schedule  # noqa: E402

CASES = {
    # id: (input shape, kernel, strides, padding (top, left, bottom, right), dilation)
    "mnasnet_7x7_k5": ((1, 64, 7, 7), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),
    "channels_40_k3": ((1, 40, 7, 7), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    "channels_72_s2_asym": ((1, 72, 9, 8), (3, 3), (2, 2), (0, 1, 1, 1), (1, 1)),
    "dilated_k3": ((1, 32, 9, 9), (3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),
    "batch2_5x6_k5": ((2, 44, 5, 6), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),
    "plane_1x1": ((1, 16, 1, 1), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    # 25 taps at a flat waste of 1.2 (unit stride, small plane) and 1.14 (strided, odd)
    "k5_20x20_waste_1_2": ((1, 48, 20, 20), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),
    "k5_s2_27x27_waste_1_14": ((1, 48, 27, 27), (5, 5), (2, 2), (2, 2, 2, 2), (1, 1)),
    # 3 x 3 stride 2 at a flat waste of 1.11 (19 x 19 outputs), odd and asymmetric
    "k3_s2_37x38_waste_1_11": ((1, 48, 37, 38), (3, 3), (2, 2), (1, 1, 1, 0), (1, 1)),
}


def _geometry(xs, kernel, strides, padding, dilation) -> FlatPlane:
    (kh, kw), (sh, sw), (dh, dw), (pt, pl, pb, pr) = kernel, strides, dilation, padding
    oh = (xs[2] + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (xs[3] + pl + pr - (kw - 1) * dw - 1) // sw + 1
    return FlatPlane(kh, kw, sh, sw, dh, dw, pt, pl, xs[2], xs[3], oh, ow, 16)


@pytest.mark.parametrize("epilogue", ["relu6", "silu"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_blocked_depthwise_matches_reference(case, epilogue):
    xs, kernel, strides, padding, dilation = CASES[case]
    assert wants_blocked(_geometry(*CASES[case]), xs[1]), "the case must take the kernel"
    rng = np.random.default_rng(13)
    y, params = _model(xs, kernel, strides, padding, dilation, rng, epilogue)
    xv = (rng.standard_normal(xs) * 3).astype("float32")
    got, want = [nnvm.compiler.build(y, target=t, shape={"x": xs}, params=params).run(x=xv)[0]
                 for t in ("llvm", "reference")]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_big_planes_and_few_channels_keep_the_flat_kernel():
    """Where the flat tile wastes little (a 28 x 28 plane) or the channels would leave most
    lanes empty (8 channels), the flat kernel stays."""
    assert not wants_blocked(_geometry((1, 96, 28, 28), (3, 3), (1, 1), (1, 1, 1, 1),
                                       (1, 1)), 96)
    assert not wants_blocked(_geometry((1, 8, 7, 7), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)), 8)
    # 25 taps over a 50 x 38 plane: the flat kernel's row tiles beat the blocked kernel
    assert not wants_blocked(_geometry((1, 256, 50, 38), (5, 5), (1, 1), (2, 2, 2, 2),
                                       (1, 1)), 256)
    # 3 x 3 stride 2 with 28 x 28 outputs: flat (the blocked kernel ran 0.94x)
    assert not wants_blocked(_geometry((1, 144, 56, 56), (3, 3), (2, 2), (1, 1, 1, 1),
                                       (1, 1)), 144)


def test_blocked_kernel_keeps_nan_in_its_channel():
    """Padded lanes read the last channel again (times a zero weight): a NaN there must stay
    in its own channel's window and never reach another channel or the padded lanes'
    neighbours."""
    rng = np.random.default_rng(3)
    y, params = _model((1, 30, 7, 7), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), rng)
    xv = rng.standard_normal((1, 30, 7, 7)).astype("float32")
    xv[0, 29, 3, 3] = np.nan
    assert wants_blocked(_geometry((1, 30, 7, 7), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)), 30)
    got = nnvm.compiler.build(y, target="llvm", shape={"x": xv.shape}, params=params).run(x=xv)[0]
    want = np.zeros(got.shape, bool)
    want[0, 29, 2:5, 2:5] = True
    np.testing.assert_array_equal(np.isnan(got), want)


def test_every_tuning_knob_of_a_blocked_kernel_schedules():
    """``nnvm tune``'s knobs of the blocked kernel: ``tile`` and ``parallel``."""
    assert_knobs_schedule((1, 48, 7, 7), (5, 5), (1, 1), (2, 2, 2, 2), {"tile", "parallel"})


def _scheduled_blocked(xs, kernel, strides, padding, dilation, constant_weight=True) -> str:
    """The scheduled TIR of the depthwise kernel of one model, as text; its weight a
    parameter (packed at load) or an input (copied per call)."""
    from nnvm_llvm.compiler.codegen import kernel_lowerings
    from nnvm_llvm.compiler.schedules import ScheduleInfo, schedule

    y, params = _model(xs, kernel, strides, padding, dilation, np.random.default_rng(7))
    shape = {"x": xs}
    if not constant_weight:
        shape["w"] = params.pop("w").shape
    graph, params = nnvm.compiler.optimize(y, shape=shape, params=params)
    (gl,) = [g for g in kernel_lowerings(graph, params, 16) if g.kind == "depthwise"]
    info = ScheduleInfo("depthwise", 16)
    text = str(schedule(gl.primfunc(16), info))
    assert info.applied
    return text


@pytest.mark.parametrize("channels", [48, 40])
def test_blocked_depthwise_copies_weights_in_vectors_and_pads_only_the_border(channels):
    """A weight that is an input is copied per task as a TVM vector (16 strided loads), not
    left to LLVM (which made it gathers behind a permute chain); a constant one is packed at
    load (no copy at all). The padded planes keep their bound check (zeros written on the
    border only) instead of a fill of the whole plane then the copy; 40 channels also cover
    the weight copy's guard of the padded lanes (zero weights)."""
    xs = (1, channels, 7, 7)
    case = (xs, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1))
    assert wants_blocked(_geometry(*case), channels)
    text = _scheduled_blocked(*case, constant_weight=False)
    loops = text[:text.index('T.sblock("pad_wblock_')].splitlines()[-3:]
    assert any("T.vectorized(16)" in line for line in loops), loops
    assert "_pad_const" not in text
    packed = _scheduled_blocked(*case)
    assert "pad_wblock_" not in packed and "_pad_const" not in packed


@pytest.mark.parametrize("case", ["channels_40_k3", "batch2_5x6_k5"])
def test_blocked_depthwise_with_an_input_weight_matches_reference(case):
    """The weight fed at run time (not packed at load): the per-call blocked copy."""
    xs, kernel, strides, padding, dilation = CASES[case]
    rng = np.random.default_rng(21)
    y, params = _model(xs, kernel, strides, padding, dilation, rng)
    w = params.pop("w")
    xv = (rng.standard_normal(xs) * 3).astype("float32")
    shape = {"x": xs, "w": w.shape}
    got, want = [nnvm.compiler.build(y, target=t, shape=shape, params=params).run(x=xv, w=w)[0]
                 for t in ("llvm", "reference")]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_blocked_depthwise_with_padding_wider_than_the_plane_matches_reference():
    """A dilated 5 x 5 window padded by 4 on a 6 x 5 plane: most of each padded plane is
    border, every position's bound check decides between a zero and a gathered input."""
    case = ((1, 40, 6, 5), (5, 5), (1, 1), (4, 4, 4, 4), (2, 2))
    xs = case[0]
    assert wants_blocked(_geometry(*case), xs[1])
    rng = np.random.default_rng(17)
    y, params = _model(*case, rng, "relu6")
    xv = (rng.standard_normal(xs) * 3).astype("float32")
    got, want = [nnvm.compiler.build(y, target=t, shape={"x": xs}, params=params).run(x=xv)[0]
                 for t in ("llvm", "reference")]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_blocked_depthwise_writes_back_whole_rows_unrolled():
    """The NCHW write-back (the ReLU6 epilogue fused) runs over a row's positions unrolled,
    the 16 channels a vector, so LLVM transposes the row at once (rows of 10-20 ran 1.35-1.8x
    faster than as a loop)."""
    text = _scheduled_blocked((1, 48, 14, 14), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1))
    loops = text[:text.rindex("T.sblock(")].splitlines()[-3:]
    assert "T.unroll(14)" in loops[0] and "T.vectorized(16)" in loops[1], loops


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_blocked_5x5_pool_on_a_20x20_plane_matches_reference(kind):
    """YOLO's SPPF pools (5 x 5, stride 1, padding 2 on 20 x 20) share the 25-tap threshold
    and take the blocked kernel too (512 x 20 x 20 max 219 -> 189 us at 1 thread)."""
    import nnvm.symbol as sym

    xs = (1, 48, 20, 20)
    assert wants_blocked(_geometry(xs, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)), xs[1])
    x = sym.Variable("x")
    pool = sym.max_pool2d if kind == "max" else sym.avg_pool2d
    y = pool(x, pool_size=(5, 5), strides=(1, 1), padding=(2, 2, 2, 2))
    xv = (np.random.default_rng(23).standard_normal(xs) * 50).astype("float32")
    libs = [nnvm.compiler.build(y, target=t, shape={"x": xs}) for t in ("llvm", "reference")]
    assert libs[0].stats()["schedule_fallbacks"] == []
    got, want = [lib.run(x=xv)[0] for lib in libs]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_blocked_planes_of_full_blocks_read_their_channels_plainly():
    """40 channels: the blocks of 16 whole channels read channel ``16 k + lane`` (a plain
    vector per position); only the last block clamps the padded lanes to the last channel,
    behind a branch per block (the clamp on every block made each position a gather of
    extracted addresses: 5 x 5 over 184 x 7 x 7 and 72 x 14 x 14 1.2x slower)."""
    text = _scheduled_blocked((1, 40, 7, 7), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1))
    start = text.index('T.sblock("pad_blocked_')
    body = text[start:text.index("T.sblock(", start + 1)]
    assert "T.if_then_else(v_k < 2," in body and "in0[v_b, v_k * 16 + v_ci," in body, body


def _written_back_in_row(text: str, rows: int) -> bool:
    """Whether the last block of a scheduled kernel (the NCHW write-back) sits inside the
    output-row loop (``for i in range(rows)``, or ``for i, j_0 in T.grid(rows, ...)``)."""
    lines = text.splitlines()
    row = next(k for k, line in enumerate(lines) if f"for i in range({rows})" in line
               or "for i, " in line and f"T.grid({rows}," in line)
    depth = len(lines[row]) - len(lines[row].lstrip())
    back = next(k for k in range(len(lines) - 1, 0, -1) if "T.sblock(" in lines[k])
    return back > row and all(len(line) - len(line.lstrip()) > depth
                              for line in lines[row + 1:back + 1] if line.strip())


def test_blocked_depthwise_writes_each_row_back_after_computing_it():
    """The write-back (the ReLU6 epilogue fused) runs inside the output-row loop, right
    after the row's register tiles, not in a pass over the whole block after the window."""
    text = _scheduled_blocked((1, 48, 14, 14), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1))
    assert _written_back_in_row(text, 14)


def test_blocked_depthwise_with_a_part_vector_writes_back_per_task():
    """40 channels leave the last vector half empty: its lanes' guard inside every row ran
    1.1x slower, so the write-back stays one pass per task after the window."""
    text = _scheduled_blocked((1, 40, 7, 7), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1))
    assert not _written_back_in_row(text, 7)


def test_part_vector_channels_need_more_flat_waste():
    """Channels that leave the last vector part empty take the blocked kernel only where the
    flat tile wastes 1.55 or more (its write-back checks every lane): 7 x 7 planes yes,
    14 x 14 with 5 x 5 taps (1.47) and 3 x 3 stride 2 over 28 x 28 (1.14) no; whole vectors
    of channels keep the usual thresholds."""
    g7 = _geometry((1, 184, 7, 7), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1))
    g14 = _geometry((1, 120, 14, 14), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1))
    g28 = _geometry((1, 72, 28, 28), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1))
    assert wants_blocked(g7, 184) and wants_blocked(g7, 176)
    assert not wants_blocked(g14, 120) and wants_blocked(g14, 128)
    assert not wants_blocked(g28, 72) and wants_blocked(g28, 80)


def scheduled_blocked_max_pool(xs) -> str:
    """The scheduled TIR of a padded 3 x 3 max pool over ``xs`` (a blocked kernel), as
    text."""
    import nnvm.symbol as sym
    from nnvm_llvm.compiler.codegen import kernel_lowerings
    from nnvm_llvm.compiler.schedules import ScheduleInfo, schedule

    assert wants_blocked(_geometry(xs, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)), xs[1])
    y = sym.max_pool2d(sym.Variable("x"), pool_size=(3, 3), strides=(1, 1),
                       padding=(1, 1, 1, 1))
    graph, params = nnvm.compiler.optimize(y, shape={"x": xs}, params={})
    (gl,) = [g for g in kernel_lowerings(graph, params, 16) if g.kind == "pool"]
    info = ScheduleInfo("pool", 16)
    text = str(schedule(gl.primfunc(16), info))
    assert info.applied and 'T.sblock("pad_blocked_' in text
    return text


def test_blocked_pool_pads_only_the_border():
    """A blocked max pool keeps the planes' bound check too (the pad value written on the
    border only), not a fill of the whole padded plane then the copy (3 x 3 over
    832 x 7 x 7 1.33x faster at 1 thread)."""
    assert "_pad_const" not in scheduled_blocked_max_pool((1, 48, 7, 7))
