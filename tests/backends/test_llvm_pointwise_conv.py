"""Pointwise convs on llvm vectorised along the pixels (``schedules._schedule_conv2d_spatial``).

Against NumPy over the shapes the template takes (1x1, stride 1, no padding, a pixel count
whole vectors divide) and the ones it must leave to the channel-vector template."""

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
    (1, 40, 48, 7, 7),      # 49 pixels: left to the channel-vector template
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

    def tile(kernel, stride, hw):
        x = te.placeholder((1, 16, hw, hw), name="x")
        w = te.placeholder((32, 16, kernel, kernel), name="w")
        attrs = {"kernel_size": (kernel, kernel), "strides": (stride, stride),
                 "padding": (0, 0), "dilation": (1, 1), "groups": 1, "channels": 32,
                 "layout": "NCHW", "kernel_layout": "OIHW"}
        oh = (hw - kernel) // stride + 1
        y = lowering.LOWERINGS["conv2d"].compute(attrs, [x, w], [((1, 32, oh, oh), "float32")],
                                                 Ctx())
        sch = s_tir.Schedule(te.create_prim_func([x, w, y]))
        schedules.inline_all(sch, sch.mod["main"], ("pad_",))
        info = schedules.ScheduleInfo("conv2d")
        return schedules._spatial_tile(sch, schedules._find(sch, "anchor_conv2d"), info)

    assert tile(1, 1, 16) == (8, 32)
    assert tile(1, 2, 16) is None       # strided: the image is not the output
    assert tile(3, 1, 16) is None       # not pointwise
    assert tile(1, 1, 7) is None        # 49 pixels: no whole vector
