"""Convs with a tiny reduction (RGB stems) vectorised along the output row
(``conv2d_rows``), against NumPy: strided with an odd padded width (the phase-split copy
padded by one column), unpadded, stride 1, batch 2, channel counts no vector divides,
fused epilogues; and the ``rows`` knob's first choice is the untuned kernel."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm.symbol as sym
from llvm_probe import run_weighted, skip_without_llvm

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

skip_without_llvm()


def _conv_numpy(x, w, b, stride, pad):
    n, ic, h, wd = x.shape
    oc, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - kh) // stride + 1
    ow = (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, oc, oh, ow), "float64")
    for r in range(kh):
        for s in range(kw):
            patch = xp[:, :, r:r + stride * oh:stride, s:s + stride * ow:stride]
            out += np.einsum("oc,nchw->nohw", w[:, :, r, s], patch)
    return (out + b[None, :, None, None]).astype("float32")


@pytest.mark.parametrize("n,ic,oc,hw,stride,pad", [
    (1, 3, 16, 64, 2, 1),    # MobileNet's stem: padded width 65 (odd), 32 output columns
    (2, 3, 24, 32, 2, 1),    # batch 2, 24 channels: 8-channel tiles
    (1, 3, 20, 33, 2, 0),    # no padding: the image itself is phase-split (a copy)
    (1, 2, 12, 16, 1, 1),    # stride 1: no phase split
    (1, 3, 17, 32, 2, 1),    # 17 channels: zero-padded weight block
])
@pytest.mark.parametrize("threads", [1, 2])
def test_rows_template_matches_numpy(n, ic, oc, hw, stride, pad, threads, rng):
    x = rng.standard_normal((n, ic, hw, hw)).astype("float32")
    wt = (rng.standard_normal((oc, ic, 3, 3)) * 0.3).astype("float32")
    b = rng.standard_normal(oc).astype("float32")
    y = sym.relu(sym.conv2d(sym.Variable("x"), sym.Variable("w"), sym.Variable("b"),
                            channels=oc, kernel_size=(3, 3), strides=(stride, stride),
                            padding=(pad, pad)))
    lib, got = run_weighted(y, x, {"w": wt, "b": b}, threads)
    assert lib.stats()["num_fallback_kernels"] == 0
    want = np.maximum(_conv_numpy(x, wt, b, stride, pad), 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_rows_knob_first_choice_is_the_untuned_kernel():
    import tvm

    from nnvm_llvm.compiler.codegen import kernel_lowerings
    from nnvm_llvm.compiler.schedules import knob_space, schedule
    from nnvm_llvm.tuning.tuner import _prepare

    rng = np.random.default_rng(5)
    y = sym.relu(sym.conv2d(sym.Variable("x"), channels=16, kernel_size=(3, 3),
                            strides=(2, 2), padding=(1, 1), name="c"))
    params = {"c_weight": rng.standard_normal((16, 3, 3, 3)).astype("float32"),
              "c_bias": rng.standard_normal(16).astype("float32")}
    graph, params = _prepare(y, {"x": (1, 3, 64, 64)}, "float32", params, 2)
    convs = [gl for gl in kernel_lowerings(graph, params, 16) if gl.kind == "conv2d"]
    assert convs
    for gl in convs:
        space = knob_space(gl.primfunc(16), gl.schedule_info(16))
        assert space.get("rows") == [True, False]
        untuned = gl.schedule_info(16)
        plain = schedule(gl.primfunc(16), untuned)
        assert untuned.applied
        first = schedule(gl.primfunc(16), gl.schedule_info(
            16, {k: v[0] for k, v in space.items()}))
        tvm.ir.assert_structural_equal(plain, first)
        off = gl.schedule_info(16, {"rows": False})
        other = schedule(gl.primfunc(16), off)
        assert off.applied and str(plain) != str(other)
