"""Narrow row tails of the softmax kernel share one vector's exponential
(``softmax_packed._tail_exps``): rows of ``q * lanes + t`` with a tail of at most
``PACKED_TAIL_MAX_LANES`` lanes (``t`` rounded up to a power of two) compute the
exponentials of ``lanes / w`` rows' tails at once, stored over the first row's first output
vector and read back.

Why: a tail carried by the wrong row, a padding tail (a group whose count of rows is not a
power of two repeats its last tail) leaking into a real row, the scratch store clobbering an
output that is read later, or a NaN reaching its pack's other rows shows up here as a wrong
number against NumPy, at 4, 8 and 16 lanes (every packing runs on any machine)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from test_llvm_softmax_packed import _edges, _kernel, _reference  # noqa: E402

# (lanes, row width): tails of 1, 2, 3 (a 4-lane tail repeating an element) and 4 lanes,
# after one and after two whole vectors
PACKED = [(16, 17), (16, 18), (16, 19), (16, 20), (16, 35), (8, 9), (8, 11), (8, 12),
          (8, 18), (4, 5), (4, 7), (4, 10)]


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("rows", [1, 3, 5, 10])
@pytest.mark.parametrize("lanes, n", PACKED)
def test_packed_tails_match_numpy(rng, lanes, n, rows, log):
    x = (rng.standard_normal((rows, n)) * 4).astype("float32")
    if rows >= 3:
        x = _edges(x)
    np.testing.assert_allclose(_kernel(x.shape, lanes, log)(x), _reference(x, log),
                               rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("lanes, n", [(16, 19), (16, 20), (8, 9), (4, 7)])
@pytest.mark.parametrize("row", [0, 4, 6])
def test_a_nan_tail_stays_in_its_row(rng, lanes, n, row):
    """7 rows: row 6's tail is also the padding of its pack; a NaN in any tail is NaN in
    its own row only."""
    x = rng.standard_normal((7, n)).astype("float32")
    x[row, -1] = np.nan
    got = _kernel(x.shape, lanes, False)(x)
    assert np.isnan(got[row]).all()
    others = [r for r in range(7) if r != row]
    np.testing.assert_allclose(got[others], _reference(x[others], False), rtol=2e-5,
                               atol=1e-6)


def _exponentials(shape, lanes: int) -> int:
    """Vector exponentials the kernel stores (each is one ``T.Let`` chain in a store)."""
    from nnvm_llvm.compiler.softmax_packed import softmax_rows
    from tvm import te

    x = te.placeholder(shape, "float32", name="x")
    script = te.create_prim_func([x, softmax_rows(x, lanes, False, "sm")]).script()
    return script.count("] = T.Let(")


def test_narrow_tails_share_exponentials_and_wide_ones_do_not():
    # 10 rows of 20 at 16 lanes: 10 whole vectors, tails 4 to a vector (rows in groups of 6
    # and 4: 2 + 1 vectors), not one per row
    assert _exponentials((10, 20), 16) == 10 + 3
    assert _exponentials((10, 24), 16) == 10 + 10  # 8-lane tails keep their own
