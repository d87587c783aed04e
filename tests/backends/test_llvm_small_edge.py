"""Small batch matmuls (attention heads of a few tens of rows) below the row-tile split's
threshold run one parallel task per batch (``gemm.splits_by_batch``): serial, they ran at
the 1-thread FMA roof and so at half the 2-thread one (the roofline sweep's
``1x2x32x64 @ 1x2x64x32`` at 2.07x of the roof at 2 threads). Checked against NumPy at 1
and 2 threads, and structurally: the task loop is the batch loop (one task per batch), and
batches too small to pay for a launch (below ``BATCH_TASK_MIN_WORK``) stay serial.
"""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
import nnvm.symbol as sym
from llvm_probe import skip_without_llvm

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

skip_without_llvm()


def _scheduled(a_shape, b_shape, epilogue: bool = False) -> str:
    from nnvm_llvm.compiler.codegen import kernel_lowerings
    from nnvm_llvm.compiler.schedules import schedule
    from nnvm_llvm.tuning.tuner import _prepare

    y = sym.matmul(sym.Variable("a"), sym.Variable("b"))
    if epilogue:
        y = sym.relu(y * 0.5)
    graph, params = _prepare(y, {"a": a_shape, "b": b_shape}, "float32", {}, 3)
    (gl,) = [gl for gl in kernel_lowerings(graph, params, 16) if gl.kind == "matmul"]
    info = gl.schedule_info(16)
    text = str(schedule(gl.primfunc(16), info))
    assert info.applied
    return text


SPLIT = [
    ((1, 2, 32, 64), (1, 2, 64, 32), 2),   # the sweep's 2-thread edge (131 K multiply-adds)
    ((1, 2, 32, 32), (1, 2, 32, 64), 2),
    ((1, 2, 32, 32), (1, 2, 32, 32), 2),
    ((1, 4, 16, 32), (1, 4, 32, 32), 4),   # 16 K per batch: the smallest that splits
    ((2, 2, 16, 32), (2, 2, 32, 32), 4),   # two batch axes, fused into one task loop
    ((4, 16, 32), (1, 32, 32), 4),         # B broadcast over the batches
]


@pytest.mark.parametrize("a_shape,b_shape,batches", SPLIT)
def test_small_batch_matmul_runs_one_task_per_batch(a_shape, b_shape, batches):
    text = _scheduled(a_shape, b_shape)
    assert f"T.parallel({batches})" in text, text
    assert text.count("T.parallel(") == 1, text


def test_small_batch_matmul_with_epilogue_runs_one_task_per_batch():
    text = _scheduled((1, 2, 32, 64), (1, 2, 64, 32), epilogue=True)
    assert "T.parallel(2)" in text, text


@pytest.mark.parametrize("a_shape,b_shape", [
    ((1, 2, 8, 32), (1, 2, 32, 32)),    # 8 K per batch: the launch costs more than it saves
    ((1, 1, 32, 64), (1, 1, 64, 32)),   # one batch: nothing to split
    ((32, 64), (64, 32)),               # no batch axis
])
def test_tiny_or_unbatched_matmul_stays_serial(a_shape, b_shape):
    text = _scheduled(a_shape, b_shape)
    assert "T.parallel(" not in text, text


def test_large_batch_matmul_keeps_row_tile_tasks():
    """At or above ``MATMUL_MIN_WORK`` the tasks are (batch, row tile), as before."""
    text = _scheduled((1, 2, 64, 64), (1, 2, 64, 64))
    assert "T.parallel(2)" not in text and "T.parallel(" in text, text


def test_splits_by_batch_thresholds():
    from nnvm_llvm.compiler.gemm import BATCH_TASK_MIN_WORK, splits_by_batch

    limit = 160_000
    assert splits_by_batch(2 * BATCH_TASK_MIN_WORK, 2, limit)
    assert not splits_by_batch(2 * BATCH_TASK_MIN_WORK - 1, 2, limit)
    assert not splits_by_batch(limit, 2, limit)            # the row-tile split's range
    assert not splits_by_batch(4 * BATCH_TASK_MIN_WORK, 1, limit)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("a_shape,b_shape,batches", SPLIT + [
    ((1, 2, 8, 32), (1, 2, 32, 32), 2)])
def test_small_batch_matmul_matches_numpy(rng, a_shape, b_shape, batches, threads):
    feed = {"a": rng.standard_normal(a_shape).astype("float32"),
            "b": rng.standard_normal(b_shape).astype("float32")}
    y = sym.relu(sym.matmul(sym.Variable("a"), sym.Variable("b")) * 0.5)
    lib = nnvm.compiler.build(y, target="llvm", opt_level=3,
                              shape={k: v.shape for k, v in feed.items()})
    lib.set_num_threads(threads)
    for _ in range(3):  # repeated launches reuse the pool's per-thread scratch
        got = np.asarray(lib.run(**feed)[0])
        np.testing.assert_allclose(got, np.maximum(feed["a"] @ feed["b"] * 0.5, 0),
                                   rtol=1e-4, atol=1e-4)
