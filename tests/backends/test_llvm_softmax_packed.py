"""Softmax and log-softmax over short rows in the kernel of explicit vectors
(``nnvm_llvm.compiler.softmax_packed``): rows packed several to a vector (rows dividing the
vector), rows spanning one to 16 vectors (a narrow or an overlapping tail vector), several
rows in flight at once, and longer rows in loops of independent accumulators.

Why: a butterfly step that crossed a row's lanes, an overlapping lane counted twice in the
sum, a row past the whole vectors (or past a group of interleaved rows) left out, or a NaN
leaking into the other rows of its vector shows up here as a wrong number against
onnxruntime (end to end) or NumPy (the kernel alone, at 4, 8 and 16 lanes: the CPU's lanes
decide which rows take which layout, so every layout is run on any machine)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from test_llvm_rows_softmax import _both  # noqa: E402  (one-node model, nnvm and the oracle)


def _reference(x: np.ndarray, log: bool) -> np.ndarray:
    x = x.astype(np.float64)
    shifted = x - x.max(axis=-1, keepdims=True)
    total = np.exp(shifted).sum(axis=-1, keepdims=True)
    return (shifted - np.log(total) if log else np.exp(shifted) / total).astype(np.float32)


def _kernel(shape, lanes: int, log: bool):
    """The extern kernel alone, built for the host CPU with ``lanes``-wide vectors."""
    import tvm
    from nnvm.backend import parse_target
    from nnvm_llvm.compiler.softmax_packed import softmax_rows
    from nnvm_llvm.compiler.target import tvm_target
    from tvm import te

    x = te.placeholder(shape, "float32", name="x")
    y = softmax_rows(x, lanes, log, "softmax_rows")
    mod = tvm.compile(te.create_prim_func([x, y]), target=tvm_target(parse_target("llvm")))

    def run(a: np.ndarray) -> np.ndarray:
        out = tvm.runtime.tensor(np.zeros(shape, "float32"))
        mod(tvm.runtime.tensor(a), out)
        return out.numpy()
    return run


def _edges(x: np.ndarray) -> np.ndarray:
    """Rows at the exponential's edges: -inf masks, huge spreads, one dominant logit."""
    x = x.copy()
    rows = x.reshape(-1, x.shape[-1])
    rows[0, ::3] = -np.inf           # masked (the row max stays finite)
    rows[1 % len(rows)] *= 1e4       # spread far beyond 88: most exponentials are 0
    rows[2 % len(rows)] += 3e4       # large, equal-scale logits
    rows[-1, -1] = 80.0              # a dominant logit in the last element of the last row
    return x


def _widths(lanes: int) -> list[int]:
    """Every packed width and spanned ones: whole vectors, tails of 1, 2, 3 (a 4-lane tail
    vector repeating one element), a quarter and a half vector, 5 (an 8-lane tail vector at
    16 lanes), and over half a vector (an overlapping whole last vector); long rows with
    and without a tail, whole vectors a multiple of the accumulators or not."""
    from nnvm_llvm.compiler.softmax_packed import SPANNED_VECTORS

    top = SPANNED_VECTORS * lanes
    packed = [n for n in range(2, lanes // 2 + 1) if lanes % n == 0]
    spanned = {lanes, lanes + 1, lanes + 2, lanes + 3, lanes + lanes // 4, 2 * lanes - 1,
               2 * lanes, 2 * lanes + 1, 2 * lanes + lanes // 2, 3 * lanes - 1, 3 * lanes + 1,
               4 * lanes, 5 * lanes + 5, 6 * lanes - 5, top - 1, top}
    return packed + sorted(spanned) + [top + 1, top + lanes, 20 * lanes + 3, 24 * lanes + 12]


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("lanes, n", [(lanes, n) for lanes in (4, 8, 16)
                                      for n in _widths(lanes)])
def test_kernel_matches_numpy(rng, lanes, n, log):
    """Row widths the kernel takes at ``lanes``, 29 rows: packed rows are left past the
    whole vectors, spanned rows past the interleaved groups."""
    from nnvm_llvm.compiler.softmax_packed import takes_rows

    assert takes_rows(n, lanes)
    x = _edges((rng.standard_normal((29, n)) * 4).astype("float32"))
    np.testing.assert_allclose(_kernel(x.shape, lanes, log)(x), _reference(x, log),
                               rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("lanes, n", [(16, 8), (16, 2), (8, 4), (16, 20), (8, 13), (16, 197),
                                      (16, 1500), (8, 131)])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_inf_stays_in_its_row(rng, lanes, n, bad):
    """A NaN or +inf gives NaN in its own row only: not in the rows sharing its vector
    (packed), whichever lane it sits in (the overlapping lanes of a spanned row included)."""
    x = rng.standard_normal((9, n)).astype("float32")
    x[4, -1] = bad
    got = _kernel(x.shape, lanes, False)(x)
    assert np.isnan(got[4]).all()
    others = [r for r in range(9) if r != 4]
    np.testing.assert_allclose(got[others], _reference(x[others], False), rtol=2e-5,
                               atol=1e-6)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape", [(1, 2, 8, 8), (10, 20), (1, 55, 75, 2), (3, 7, 4),
                                   (1, 2, 49, 49), (2, 3, 32), (5, 40), (3, 5, 17),
                                   (2, 128), (1, 37, 91), (1, 2, 13, 197), (2, 257),
                                   (1, 3, 1500), (2, 1024)])
def test_end_to_end_matches_onnxruntime(rng, op, shape):
    x = _edges((rng.standard_normal(shape) * 4).astype("float32"))
    got, want = _both(op, list(shape), -1, x)
    finite = np.isfinite(want)
    assert np.array_equal(finite, np.isfinite(got))
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("lanes, n, taken", [(16, 1, False), (16, 2, True), (16, 8, True),
                                             (16, 12, False), (16, 16, True), (16, 91, True),
                                             (16, 256, True), (16, 1500, True), (8, 8, True),
                                             (8, 6, False), (8, 4, True), (8, 7, False)])
def test_which_rows_take_the_kernel(lanes, n, taken):
    """Rows packed whole to a vector, or at least a vector long; the others keep the row
    template (rows of 9 to 15 at 16 lanes) or topi's rule (rows of 1, 3, 5, 6, 7)."""
    from nnvm_llvm.compiler.softmax_packed import takes_rows

    assert takes_rows(n, lanes) == taken
