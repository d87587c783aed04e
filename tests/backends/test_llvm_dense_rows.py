"""Linear layers on llvm whose row count no register tile divides (``schedules._dense_mr``).

ViT's 197 tokens, a 50-token sequence, 17 rows: tiles of 8 rows with a partial last one,
with and without the K-sliced path (a weight panel larger than L1), against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm.symbol as sym
from llvm_probe import run_weighted, skip_without_llvm

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

skip_without_llvm()


@pytest.mark.parametrize("m,k,n", [(197, 192, 576), (197, 768, 192), (50, 64, 96),
                                   (17, 40, 32), (13, 8, 16)])
@pytest.mark.parametrize("threads", [1, 2])
def test_uneven_rows_match_numpy(m, k, n, threads, rng):
    x = rng.standard_normal((m, k)).astype("float32")
    w = (rng.standard_normal((k, n)) * 0.1).astype("float32")
    b = rng.standard_normal(n).astype("float32")
    y = sym.relu(sym.broadcast_add(sym.matmul(sym.Variable("x"), sym.Variable("w")),
                                   sym.Variable("b")))
    _, got = run_weighted(y, x, {"w": w, "b": b}, threads)
    np.testing.assert_allclose(got, np.maximum(x @ w + b, 0), rtol=1e-4, atol=1e-4)


def test_row_tile_is_uneven_only_when_nothing_divides():
    from nnvm_llvm.compiler.schedules import ScheduleInfo, _dense_mr

    info = ScheduleInfo("dense")
    assert _dense_mr(197, 32, info) == 8   # prime: uneven tiles of 8
    assert _dense_mr(196, 32, info) == 4   # divisible: whole tiles
    assert _dense_mr(1, 32, info) == 1     # a GEMV stays one row
