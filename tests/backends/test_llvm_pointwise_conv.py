"""Pointwise convs on llvm vectorised along the pixels (``schedules._schedule_conv2d_spatial``).

Against NumPy over the shapes the template takes (1x1, stride 1, no padding; a pixel count
whole vectors divide, or any plane with at least as many output channels as input ones,
its last pixel tile then overlapping the one before it) and the ones it leaves to the
channel-vector template."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm.symbol as sym
from llvm_probe import run_weighted, skip_without_llvm

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

skip_without_llvm()


def _pointwise(n, ic, oc, h, w, threads, rng, stride=1, epilogue=True):
    x = rng.standard_normal((n, ic, h, w)).astype("float32")
    wt = (rng.standard_normal((oc, ic, 1, 1)) * 0.2).astype("float32")
    b = rng.standard_normal(oc).astype("float32")
    y = sym.conv2d(sym.Variable("x"), sym.Variable("w"), sym.Variable("b"), channels=oc,
                   kernel_size=(1, 1), strides=(stride, stride))
    if epilogue:
        y = sym.clip(y, a_min=0.0, a_max=6.0)
    lib, got = run_weighted(y, x, {"w": wt, "b": b}, threads)
    xs = x[:, :, ::stride, ::stride]
    want = np.einsum("oc,nchw->nohw", wt[:, :, 0, 0], xs) + b[None, :, None, None]
    if epilogue:
        want = np.clip(want, 0, 6)
    return lib, got, want


@pytest.mark.parametrize("n,ic,oc,h,w", [
    (1, 16, 96, 32, 32),    # MobileNet's expand, 2-vector tiles
    (1, 3, 64, 16, 16),     # an RGB stem as a 1x1
    (2, 24, 36, 8, 8),      # batch 2, 6-channel tiles
    (1, 96, 20, 4, 12),     # projection, 4-channel tiles, rows no vector divides
    (1, 40, 48, 7, 7),      # 49 pixels: 64 would waste a quarter, channel vectors
    (1, 40, 56, 7, 7),      # 49 pixels, 56 channels: half-vector blocks, padded to 64
    (1, 24, 40, 13, 13),    # 169 pixels padded to 176, channels no vector divides
    (2, 48, 48, 14, 14),    # 196 pixels, batch 2
    (3, 20, 36, 5, 5),      # 25 pixels, batch 3, 4-channel tiles
    (1, 12, 17, 7, 7),      # 17 channels: zero-padded weight block, padded plane
    (1, 64, 16, 13, 13),    # a squeeze on 169 pixels: left to the channel-vector template
    (1, 8, 3, 16, 16),      # 3 output channels: likewise
])
@pytest.mark.parametrize("threads", [1, 2])
def test_pointwise_matches_numpy(n, ic, oc, h, w, threads, rng):
    lib, got, want = _pointwise(n, ic, oc, h, w, threads, rng)
    assert lib.stats()["num_fallback_kernels"] == 0
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_strided_and_bare_pointwise(rng):
    for kw in ({"stride": 2}, {"epilogue": False}):
        _, got, want = _pointwise(1, 16, 32, 16, 16, 1, rng, **kw)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_spatial_tile_is_chosen_only_for_pointwise():
    import tvm.s_tir as s_tir
    from tvm import te

    from nnvm_llvm.compiler import lowering, schedules

    class Ctx:
        name, packed, vector_lanes = "conv", {}, 16

    def tile(kernel, stride, hw, oc=32, block=None, **knobs):
        x = te.placeholder((1, 16, hw, hw), name="x")
        w = te.placeholder((oc, 16, kernel, kernel), name="w")
        attrs = {"kernel_size": (kernel, kernel), "strides": (stride, stride),
                 "padding": (0, 0), "dilation": (1, 1), "groups": 1, "channels": oc,
                 "layout": "NCHW", "kernel_layout": "OIHW"}
        oh = (hw - kernel) // stride + 1
        y = lowering.LOWERINGS["conv2d"].compute(attrs, [x, w], [((1, oc, oh, oh), "float32")],
                                                 Ctx())
        sch = s_tir.Schedule(te.create_prim_func([x, w, y]))
        schedules.inline_all(sch, sch.mod["main"], ("pad_",))
        info = schedules.ScheduleInfo("conv2d", conv_block=block, knobs=knobs)
        return schedules._spatial_tile(sch, schedules._find(sch, "anchor_conv2d"), info)

    assert tile(1, 1, 16) == (8, 32)
    assert tile(1, 2, 16) is None       # strided: the image is not the output
    assert tile(3, 1, 16) is None       # not pointwise
    assert tile(1, 1, 7) is None        # 49 pixels: padded to 64, a quarter wasted
    assert tile(1, 1, 7, block=8) == (8, 32)  # unless channel vectors are half ones
    assert tile(1, 1, 13) == (8, 16)    # 169 pixels: 176 pads least
    assert tile(1, 1, 13, oc=8) is None  # a squeeze on a padded plane: channel vectors
    assert tile(1, 1, 13, oc=8, spatial=True) == (8, 16)  # unless tuned otherwise
    assert tile(1, 1, 16, spatial=False) is None
    assert tile(1, 1, 3) is None        # 9 pixels: less than one vector


def test_padded_plane_with_residual_epilogue(rng):
    """A 196-pixel plane (12 whole tiles and one overlapping the 12th) with bias, a residual
    add of the input and ReLU fused into the write-back, at 1 and 2 threads."""
    x = rng.standard_normal((2, 48, 14, 14)).astype("float32")
    wt = (rng.standard_normal((48, 48, 1, 1)) * 0.2).astype("float32")
    b = rng.standard_normal(48).astype("float32")
    xv = sym.Variable("x")
    y = sym.relu(sym.conv2d(xv, sym.Variable("w"), sym.Variable("b"), channels=48,
                            kernel_size=(1, 1)) + xv)
    want = np.maximum(np.einsum("oc,nchw->nohw", wt[:, :, 0, 0], x)
                      + b[None, :, None, None] + x, 0)
    for threads in (1, 2):
        lib, got = run_weighted(y, x, {"w": wt, "b": b}, threads)
        assert lib.stats()["num_fallback_kernels"] == 0
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("ic,oc,hw", [(48, 48, 14), (64, 16, 13), (24, 40, 7)])
def test_spatial_knob_first_choice_is_the_untuned_kernel(ic, oc, hw):
    """``nnvm tune``'s rule on padded planes: the first choice of every knob (``spatial``
    included, True or False by the heuristic) schedules the same TIR as no knobs."""
    import tvm

    from nnvm_llvm.compiler.codegen import kernel_lowerings
    from nnvm_llvm.compiler.schedules import knob_space, schedule
    from nnvm_llvm.tuning.tuner import _prepare

    rng = np.random.default_rng(ic + oc + hw)
    y = sym.relu(sym.conv2d(sym.Variable("x"), channels=oc, kernel_size=(1, 1), name="c"))
    params = {"c_weight": rng.standard_normal((oc, ic, 1, 1)).astype("float32"),
              "c_bias": rng.standard_normal(oc).astype("float32")}
    graph, params = _prepare(y, {"x": (1, ic, hw, hw)}, "float32", params, 2)
    convs = [gl for gl in kernel_lowerings(graph, params, 16) if gl.kind == "conv2d"]
    assert convs
    for gl in convs:
        space = knob_space(gl.primfunc(16), gl.schedule_info(16))
        assert "spatial" in space and sorted(space["spatial"]) == [False, True]
        assert space["spatial"][0] is (oc >= ic)
        plain = schedule(gl.primfunc(16), gl.schedule_info(16))
        first = schedule(gl.primfunc(16), gl.schedule_info(
            16, {k: v[0] for k, v in space.items()}))
        tvm.ir.assert_structural_equal(plain, first)
        other = gl.schedule_info(16, {"spatial": not space["spatial"][0]})
        schedule(gl.primfunc(16), other)
        assert other.applied


def test_grouped_pointwise_on_padded_plane_keeps_a_template(rng):
    """ShuffleNet-v1's grouped 1x1 convs on 14x14 planes: not the padded GEMM (the image
    channel depends on the output channel), but still a scheduled kernel."""
    x = rng.standard_normal((1, 48, 14, 14)).astype("float32")
    wt = (rng.standard_normal((96, 16, 1, 1)) * 0.2).astype("float32")
    y = sym.conv2d(sym.Variable("x"), sym.Variable("w"), channels=96, kernel_size=(1, 1),
                   groups=3, use_bias=False)
    lib, got = run_weighted(y, x, {"w": wt}, 1)
    assert lib.stats()["num_fallback_kernels"] == 0
    from nnvm_llvm.compiler.codegen import kernel_lowerings
    from nnvm_llvm.compiler.schedules import schedule
    from nnvm_llvm.tuning.tuner import _prepare

    graph, params = _prepare(y, {"x": x.shape}, "float32", {"w": wt}, 2)
    for gl in kernel_lowerings(graph, params, 16):
        info = gl.schedule_info(16)
        schedule(gl.primfunc(16), info)
        assert info.applied, gl.kind
    want = np.concatenate([np.einsum("oc,nchw->nohw", wt[32 * g:32 * g + 32, :, 0, 0],
                                     x[:, 16 * g:16 * g + 16]) for g in range(3)], axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
