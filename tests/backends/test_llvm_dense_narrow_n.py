"""Linear layers on llvm whose N is narrower than one vector and divided only by a smaller
power of two (a 10-class head, N = 6, 12, 15): the weight is one panel as wide as N
(``gemm.panel_width``), its tile one odd-width vector. Checked against NumPy for MatMul
with a weight, Gemm-style ``dense`` with a bias, the GEMV row, and 1 and 2 threads; and
GEMMs with one output column (``matmul_dot``: vector partial sums along K)."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm.symbol as sym
from llvm_probe import run_weighted, skip_without_llvm

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

skip_without_llvm()


@pytest.mark.parametrize("m,k,n", [(64, 128, 10), (1, 128, 10), (17, 40, 6), (9, 33, 12),
                                   (20, 64, 15), (3, 16, 5)])
@pytest.mark.parametrize("threads", [1, 2])
def test_narrow_matmul_with_weight_matches_numpy(rng, m, k, n, threads):
    x = rng.standard_normal((m, k)).astype("float32")
    w = (rng.standard_normal((k, n)) * 0.1).astype("float32")
    lib, got = run_weighted(sym.relu(sym.matmul(sym.Variable("x"), sym.Variable("w"))),
                            x, {"w": w}, threads)
    assert any(p["layout"] == "matmul" for p in lib._plan["packed"].values())
    np.testing.assert_allclose(got, np.maximum(x @ w, 0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m,n", [(1, 10), (33, 10), (8, 7)])
def test_narrow_dense_with_bias_matches_numpy(rng, m, n):
    x = rng.standard_normal((m, 96)).astype("float32")
    w = (rng.standard_normal((n, 96)) * 0.1).astype("float32")
    b = rng.standard_normal(n).astype("float32")
    y = sym.dense(sym.Variable("x"), units=n, name="fc")
    _, got = run_weighted(y, x, {"fc_weight": w, "fc_bias": b}, 2)
    np.testing.assert_allclose(got, x @ w.T + b, rtol=1e-4, atol=1e-4)


def test_panel_is_as_wide_as_a_narrow_row_only_when_no_vector_divides_it():
    from nnvm_llvm.compiler.gemm import panel_width

    assert panel_width(10, 16) == 10
    assert panel_width(15, 16) == 15
    assert panel_width(8, 16) == 8      # half a vector divides it
    assert panel_width(4, 16) == 4
    assert panel_width(3, 16) == 1      # too narrow: not packed
    assert panel_width(48, 16) == 16    # wider than a vector: gemm_block's choice


@pytest.mark.parametrize("m,k", [(1, 128), (64, 256), (1000, 512), (5, 40), (3, 33)])
@pytest.mark.parametrize("threads", [1, 2])
def test_one_column_matmul_matches_numpy(rng, m, k, threads):
    # K a whole number of vectors: vector partial sums (``matmul_dot``); 40, 33: the tile
    x = rng.standard_normal((m, k)).astype("float32")
    w = rng.standard_normal((k, 1)).astype("float32")
    _, got = run_weighted(sym.matmul(sym.Variable("x"), sym.Variable("w")), x, {"w": w},
                          threads)
    np.testing.assert_allclose(got, x @ w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m", [1, 7])
def test_one_unit_dense_with_bias_matches_numpy(rng, m):
    x = rng.standard_normal((m, 128)).astype("float32")
    w = rng.standard_normal((1, 128)).astype("float32")
    b = rng.standard_normal(1).astype("float32")
    y = sym.relu(sym.dense(sym.Variable("x"), units=1, name="fc"))
    _, got = run_weighted(y, x, {"fc_weight": w, "fc_bias": b}, 1)
    np.testing.assert_allclose(got, np.maximum(x @ w.T + b, 0), rtol=1e-4, atol=1e-4)


def test_batched_one_column_matmul_matches_numpy(rng):
    import nnvm

    a = rng.standard_normal((2, 3, 10, 64)).astype("float32")
    b = rng.standard_normal((2, 3, 64, 1)).astype("float32")
    lib = nnvm.compiler.build(sym.matmul(sym.Variable("a"), sym.Variable("b")), target="llvm",
                              opt_level=3, shape={"a": a.shape, "b": b.shape})
    np.testing.assert_allclose(lib.run(a=a, b=b)[0], a @ b, rtol=1e-4, atol=1e-4)
