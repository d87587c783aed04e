"""Unit-stride depthwise Convs over large planes on ``llvm``, computed in strips of output
rows (``nnvm_llvm.compiler.depthwise_strided``, 8 or 4 rows a strip), checked
against onnxruntime.

The path is taken by unit-stride depthwise windows over input planes of at least
``UNIT_STRIP_MIN_PLANE_BYTES``. The cases cover what the strips could get wrong: rows of
half vectors stored straight into the output with the epilogue inlined (152 wide), rows of
whole vectors (304 wide), rows cropped from whole vectors (150 wide), a last strip partly
past the output (output heights no strip divides), a 5 x 5 window, a dilated window, pads
on one side, a batch of two; and unit-stride pools and small planes keeping the
whole-plane kernel. Schedules are checked at 16 lanes whatever this machine's vectors.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")
import nnvm  # noqa: E402
from llvm_probe import build_onnx, ort_outputs, skip_without_llvm  # noqa: E402
from test_llvm_depthwise_strided_strips import _onnx, _schedule_text  # noqa: E402

skip_without_llvm()

CASES = {
    # id: (input shape, kernel, pads (top, left, bottom, right), dilations)
    "k3_rows_152_half_vectors": ((1, 2, 200, 152), 3, (1, 1, 1, 1), (1, 1)),
    "k3_rows_304_whole_vectors": ((1, 2, 400, 304), 3, (1, 1, 1, 1), (1, 1)),
    "k3_rows_150_cropped_odd_rows_batch2": ((2, 2, 131, 150), 3, (1, 1, 1, 1), (1, 1)),
    "k3_half_vectors_last_strip_partial": ((1, 2, 203, 152), 3, (1, 1, 1, 1), (1, 1)),
    "k5_rows_128": ((1, 2, 128, 128), 5, (2, 2, 2, 2), (1, 1)),
    "k3_dilation2": ((1, 2, 150, 140), 3, (2, 2, 2, 2), (2, 2)),
    "k3_pads_one_side": ((1, 2, 120, 117), 3, (0, 0, 2, 2), (1, 1)),
}


def _geometry(xs, k, pads, d, lanes=16):
    from nnvm_llvm.compiler.flat_window import FlatPlane

    oh = xs[2] + pads[0] + pads[2] - (k - 1) * d[0]
    ow = xs[3] + pads[1] + pads[3] - (k - 1) * d[1]
    return FlatPlane(k, k, 1, 1, *d, pads[0], pads[1], xs[2], xs[3], oh, ow, lanes)


@pytest.mark.parametrize("epilogue", ["none", "bias", "relu6"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_unit_strips_match_onnxruntime(case, epilogue):
    from nnvm_llvm.compiler.depthwise_strided import wants_strips

    xs, k, pads, d = CASES[case]
    assert wants_strips(_geometry(xs, k, pads, d))
    rng = np.random.default_rng(14)
    model = _onnx(xs, k, (1, 1), pads, d, epilogue, rng)
    xv = (rng.standard_normal(xs) * 3).astype(np.float32)
    want = ort_outputs(model, {"x": xv})[0]
    lib = build_onnx(model, {"x": xv})
    assert lib.stats()["schedule_fallbacks"] == []
    got = lib.run(x=xv)[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_half_vector_strips_store_the_output_with_no_crop():
    """3 x 3 over 200 x 152: 25 strips of 8 output rows per plane, each copying its 10
    input rows (154 columns: the output's 152 and the taps' reach) once, register tiles of
    4 rows of 8-lane vectors, stored straight into the output (no cropped rows)."""
    from nnvm_llvm.compiler.depthwise_strided import strip_rows, strips_exact

    g = _geometry((1, 2, 200, 152), 3, (1, 1, 1, 1), (1, 1))
    assert strip_rows(g) == 8 and strips_exact(_geometry((1, 2, 200, 152), 3,
                                                           (1, 1, 1, 1), (1, 1)))
    text, applied, _ = _schedule_text((1, 2, 200, 152), 3, (1, 1), (1, 1, 1, 1))
    assert applied
    assert "T.sblock_alloc_buffer((1, 2, 25, 1, 10, 154))" in text
    assert "pad_phases" not in text and "_rows" not in text  # no whole plane, no crop
    strip = text.index("in range(25)")
    assert strip < text.index('T.sblock("pad_strips_') < text.index("anchor_depthwise_update")
    assert "in range(1, 153)" in text  # the copy's interior columns: no padding check
    assert "i_1_1 in T.unroll(4)" in text and "T.vectorized(8)" in text
    assert "rh in T.unroll(3)" in text and "rw in T.unroll(3)" in text


def test_whole_vector_strips_take_16_lanes():
    """304 wide: 8 rows would copy 10 rows of 306 columns (12 KB, over
    ``UNIT_STRIP_BYTES``), so strips of 4 rows (6 rows, 7 KB); no crop (304 = 19 x 16)."""
    text, applied, _ = _schedule_text((1, 2, 400, 304), 3, (1, 1), (1, 1, 1, 1))
    assert applied and "pad_strips_" in text and "_rows" not in text
    assert "T.sblock_alloc_buffer((1, 2, 100, 1, 6, 306))" in text
    assert "T.vectorized(16)" in text and "in range(100)" in text


def test_cropped_strips_keep_their_rows():
    """150 wide: rounded up to 160 (whole vectors) and cropped per strip."""
    text, applied, _ = _schedule_text((1, 2, 131, 150), 3, (1, 1), (1, 1, 1, 1))
    assert applied and "pad_strips_" in text and "anchor_depthwise_rows" in text
    assert "T.sblock_alloc_buffer((1, 2, 17, 1, 10, 162))" in text


@pytest.mark.parametrize("xs", [(1, 2, 64, 64), (1, 2, 50, 38)])
def test_small_unit_stride_planes_keep_the_flat_kernel(xs):
    text, applied, _ = _schedule_text(xs, 3, (1, 1), (1, 1, 1, 1))
    assert applied and "pad_strips_" not in text


def test_unit_stride_pools_keep_the_whole_plane():
    from nnvm_llvm.compiler.codegen import kernel_lowerings
    import nnvm.symbol as sym

    y = sym.max_pool2d(sym.Variable("x"), pool_size=(3, 3), strides=(1, 1), padding=(1, 1))
    graph, opt = nnvm.compiler.optimize(y, shape={"x": (1, 2, 200, 152)})
    lowered = [g for g in kernel_lowerings(graph, opt, 16)]
    text = "".join(str(g.primfunc(16)) for g in lowered)
    assert "pad_phases_" in text and "pad_strips_" not in text


def test_every_tuning_knob_of_a_unit_strip_kernel_schedules():
    import itertools

    from nnvm_llvm.compiler.schedules import ScheduleInfo, knob_space, schedule

    _, _, gl = _schedule_text((1, 2, 200, 152), 3, (1, 1), (1, 1, 1, 1))
    space = knob_space(gl.primfunc(16), ScheduleInfo("depthwise", 16))
    assert space["rt"] == [4, 2, 1], space
    for combo in itertools.product(*space.values()):
        info = ScheduleInfo("depthwise", 16, knobs=dict(zip(space, combo)))
        schedule(gl.primfunc(16), info)
        assert info.applied, combo


def test_half_vector_strips_store_the_epilogue_from_the_register_tiles():
    """With a bias, the bias add is inlined into the register tiles' store: no plane of
    the window's own and no bias pass over the strip's rows."""
    import nnvm.symbol as sym
    from nnvm_llvm.compiler.codegen import kernel_lowerings
    from nnvm_llvm.compiler.schedules import ScheduleInfo, schedule

    xs = (1, 2, 200, 152)
    y = sym.conv2d(sym.Variable("x"), sym.Variable("w"), sym.Variable("b"), channels=2,
                   kernel_size=(3, 3), strides=(1, 1), padding=(1, 1), groups=2)
    graph, opt = nnvm.compiler.optimize(y, shape={"x": xs}, params={
        "w": np.ones((2, 1, 3, 3), np.float32), "b": np.ones(2, np.float32)})
    (gl,) = [g for g in kernel_lowerings(graph, opt, 16) if g.kind == "depthwise"]
    info = ScheduleInfo("depthwise", 16)
    text = str(schedule(gl.primfunc(16), info).script())
    assert info.applied and "pad_strips_" in text
    assert "anchor_depthwise = T.sblock_alloc_buffer" not in text
    assert 'T.sblock("anchor_depthwise_local")' in text
    store = text[text.index('T.sblock("anchor_depthwise_local")'):]
    assert "_bias[" in store[:600]  # the tile's store writes the bias output
    assert "anchor_depthwise_rows" not in text
