"""The conv2d, dense and batch-matmul templates split their work across threads: the built
kernel's TIR has a parallel loop of at least ``2 x threads`` iterations (the sweep's shapes
that ran no faster at 2 threads than at 1: 32 output channels of a 3x3 conv, attention's
``QK^T``, a 32-row linear layer), and the split kernels stay correct at 1 and 2 threads on
odd sizes (row counts, widths and channel counts no tile divides).

Why a structural check: the 2-thread time of these kernels equal to the 1-thread one is
what a kernel without a parallel loop does, and what a pool whose worker never claims a
task does; this file pins down that the first is not the cause (speed itself is measured
by ``benchmarks/bench_roofline.py``, not asserted here)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import nnvm
import nnvm.symbol as sym
from llvm_probe import run_weighted, skip_without_llvm

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

skip_without_llvm()

#: threads of the machines the project targets (the CI boxes have 2 cores)
THREADS = 2


def _parallel_extents(y, shapes: dict, params: dict, kind: str) -> list[int]:
    """Extents of the parallel loops of the scheduled ``kind`` kernels of ``y``."""
    from nnvm_llvm.compiler.codegen import kernel_lowerings
    from nnvm_llvm.compiler.schedules import schedule
    from nnvm_llvm.tuning.tuner import _prepare

    graph, params = _prepare(y, shapes, "float32", params, 3)
    extents = []
    found = [gl for gl in kernel_lowerings(graph, params, 16) if gl.kind == kind]
    assert found, f"no {kind} kernel"
    for gl in found:
        info = gl.schedule_info(16)
        text = str(schedule(gl.primfunc(16), info))
        assert info.applied
        extents += [int(n) for n in re.findall(r"in T\.parallel\((\d+)\)", text)]
    return extents


def _conv_numpy(x, w, pad):
    n, _, h, wd = x.shape
    oc, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    out = np.zeros((n, oc, oh, ow), "float64")
    for r in range(kh):
        for s in range(kw):
            out += np.einsum("oc,nchw->nohw", w[:, :, r, s], xp[:, :, r:r + oh, s:s + ow])
    return out.astype("float32")


def _conv(ic, oc, k, pad):
    return sym.conv2d(sym.Variable("x"), sym.Variable("w"), channels=oc,
                      kernel_size=(k, k), padding=(pad, pad), use_bias=False)


@pytest.mark.parametrize("ic,oc,h,w,k,pad", [
    (128, 32, 28, 28, 3, 1),   # the sweep's 520 us conv: one channel block per row
    (128, 32, 7, 7, 3, 1),
    (48, 48, 14, 14, 1, 0),    # pointwise: the pixel-GEMM template
    (16, 8, 112, 112, 1, 0),   # MNASNet's 16 -> 8: one channel tile, split over pixel chunks
    (96, 24, 56, 56, 1, 0),    # three channel tiles, each split in four
])
def test_conv_kernels_have_a_parallel_loop_per_thread(ic, oc, h, w, k, pad):
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((oc, ic, k, k)).astype("float32")}
    extents = _parallel_extents(_conv(ic, oc, k, pad), {"x": (1, ic, h, w), "w": (oc, ic, k, k)},
                                params, "conv2d")
    assert max(extents, default=0) >= 2 * THREADS, extents


@pytest.mark.parametrize("a_shape,b_shape", [
    ((1, 2, 197, 64), (1, 2, 64, 197)),   # ViT's QK^T: 197 rows no tile divides
    ((1, 2, 49, 64), (1, 2, 64, 49)),
    ((1, 8, 40, 15), (1, 8, 15, 40)),     # attention's 15-wide heads: 192 K multiply-adds
    ((1, 8, 40, 40), (1, 8, 40, 15)),
])
def test_batch_matmul_has_a_parallel_loop_per_thread(a_shape, b_shape):
    # one task per batch: these operands are zero-padded copies each task makes of its own
    # batch (test_llvm_par2t_batch_pads.py), so a task a thread steals reads no other
    # core's copy
    y = sym.matmul(sym.Variable("a"), sym.Variable("b"))
    extents = _parallel_extents(y, {"a": a_shape, "b": b_shape}, {}, "matmul")
    assert max(extents, default=0) >= THREADS, extents


def test_small_batch_matmul_splits_by_batch_only():
    # 131 K multiply-adds (2 x 32x32 @ 32x64): split by batch and row tile, it ran slower at
    # 1 and 2 threads; one task per batch (gemm.splits_by_batch) gains at 2 threads
    y = sym.matmul(sym.Variable("a"), sym.Variable("b"))
    assert _parallel_extents(y, {"a": (1, 2, 32, 32), "b": (1, 2, 32, 64)}, {}, "matmul") == [2]


@pytest.mark.parametrize("units", [64, 128])
def test_dense_has_a_parallel_loop_per_thread(units):
    rng = np.random.default_rng(0)
    y = sym.dense(sym.Variable("x"), units=units, use_bias=False, name="fc")
    params = {"fc_weight": rng.standard_normal((units, 128)).astype("float32")}
    extents = _parallel_extents(y, {"x": (32, 128)}, params, "dense")
    assert max(extents, default=0) >= 2 * THREADS, extents


@pytest.mark.parametrize("ic,oc,h,w,k,pad", [
    (40, 32, 15, 13, 3, 1),    # odd rows and columns, one 16-channel block pair
    (24, 20, 11, 9, 3, 1),     # 20 channels: a zero-padded channel block
    (48, 48, 13, 13, 1, 0),    # pointwise on a 169-pixel plane (padded pixel tiles)
    (8, 8, 67, 63, 1, 0),      # one channel tile in 8 pixel chunks, a padded last tile
    (20, 4, 64, 67, 1, 0),     # 4 channels: 67 chunks of 2 tiles
    (12, 12, 61, 71, 1, 0),    # 6-channel tiles, 271 pixel tiles (prime): not chunked
])
@pytest.mark.parametrize("threads", [1, 2])
def test_split_conv_matches_numpy_on_odd_sizes(ic, oc, h, w, k, pad, threads, rng):
    x = rng.standard_normal((1, ic, h, w)).astype("float32")
    wt = (rng.standard_normal((oc, ic, k, k)) * 0.2).astype("float32")
    lib, got = run_weighted(_conv(ic, oc, k, pad), x, {"w": wt}, threads)
    assert lib.stats()["num_fallback_kernels"] == 0
    np.testing.assert_allclose(got, _conv_numpy(x, wt, pad), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("a_shape,b_shape", [
    ((1, 2, 97, 64), (1, 2, 64, 97)),     # odd M and N, uneven row tiles
    ((1, 3, 41, 33), (1, 3, 33, 41)),
    # operands zero-padded inside one task per batch (test_llvm_par2t_batch_pads.py)
    ((1, 2, 49, 64), (1, 2, 64, 49)),
    ((2, 3, 37, 64), (2, 3, 64, 45)),     # two batch axes
    ((1, 3, 101, 40), (1, 3, 40, 67)),    # odd M, N and K
    ((1, 2, 197, 40), (1, 2, 40, 131)),   # the output slice a copy of its own per batch
    ((1, 8, 40, 15), (1, 8, 15, 40)),     # split from 160 K multiply-adds
    ((1, 8, 40, 40), (1, 8, 40, 15)),
])
@pytest.mark.parametrize("threads", [1, 2])
def test_split_batch_matmul_matches_numpy_on_odd_sizes(a_shape, b_shape, threads, rng):
    feed = {"a": rng.standard_normal(a_shape).astype("float32"),
            "b": rng.standard_normal(b_shape).astype("float32")}
    lib = nnvm.compiler.build(sym.matmul(sym.Variable("a"), sym.Variable("b")), target="llvm",
                              opt_level=3, shape={k: v.shape for k, v in feed.items()})
    lib.set_num_threads(threads)
    got = np.asarray(lib.run(**feed)[0])
    np.testing.assert_allclose(got, feed["a"] @ feed["b"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows,units", [(37, 72), (29, 130)])
@pytest.mark.parametrize("threads", [1, 2])
def test_split_dense_matches_numpy_on_odd_sizes(rows, units, threads, rng):
    x = rng.standard_normal((rows, 128)).astype("float32")
    wt = (rng.standard_normal((units, 128)) * 0.1).astype("float32")
    y = sym.dense(sym.Variable("x"), sym.Variable("w"), units=units, use_bias=False)
    _, got = run_weighted(y, x, {"w": wt}, threads)
    np.testing.assert_allclose(got, x @ wt.T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bias", [False, True])
def test_dense_uneven_row_tiles_keep_the_row_bound_under_a_column_slice(bias):
    """37 rows in tiles of 8 under a 72-wide output sliced from 80-wide panels: the store of
    every output block keeps ``row < 37`` (inlining the slice dropped it, and the last tile
    wrote three rows past the output: heap corruption, ``munmap_chunk(): invalid pointer``)."""
    from nnvm_llvm.compiler.codegen import kernel_lowerings
    from nnvm_llvm.compiler.schedules import schedule
    from nnvm_llvm.tuning.tuner import _prepare

    rng = np.random.default_rng(0)
    y = sym.dense(sym.Variable("x"), units=72, use_bias=bias, name="fc")
    params = {"fc_weight": rng.standard_normal((72, 128)).astype("float32")}
    if bias:
        params["fc_bias"] = rng.standard_normal(72).astype("float32")
    graph, params = _prepare(y, {"x": (37, 128)}, "float32", params, 3)
    (gl,) = [gl for gl in kernel_lowerings(graph, params, 16) if gl.kind == "dense"]
    info = gl.schedule_info(16)
    text = str(schedule(gl.primfunc(16), info))
    assert info.applied
    # the write-back of the register tile (the block after the reduction's update)
    writeback = text[text.rindex('T.sblock("anchor_dense_local")'):]
    assert re.search(r"T\.where\([^)]*< 37\)", writeback), writeback
