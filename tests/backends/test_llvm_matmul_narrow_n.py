"""Activation x activation matmuls on llvm whose N is narrower than two vectors and divided
by none: below one vector (attention's 15-wide heads) the register tile is one odd-width
vector over the whole row (``schedules._matmul_tile``), between one and two vectors N is
zero-padded to whole vectors and sliced after (``gemm.pads_narrow_n``). Checked against
NumPy on the shapes that take each path (odd M, K and N, broadcast batches, a fused
epilogue) and on the neighbours that do not."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
import nnvm.symbol as sym
from llvm_probe import skip_without_llvm

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

skip_without_llvm()


def _run(y, feed: dict, threads: int) -> np.ndarray:
    lib = nnvm.compiler.build(y, target="llvm", opt_level=3,
                              shape={k: v.shape for k, v in feed.items()})
    lib.set_num_threads(threads)
    return np.asarray(lib.run(**feed)[0])


@pytest.mark.parametrize("a_shape,b_shape", [
    ((1, 8, 40, 40), (1, 8, 40, 15)),   # the sweep's 8.5x cliff: N = 15
    ((2, 3, 37, 21), (2, 3, 21, 13)),   # odd M, K, N
    ((1, 4, 9, 5), (1, 4, 5, 9)),       # N = 9, M not a multiple of the row tile
    ((3, 33, 17), (1, 17, 24)),         # broadcast batch, N = 24 (padded to 32)
    ((2, 16, 31), (2, 31, 31)),         # N = 31
    ((2, 19, 12), (2, 12, 17)),         # N = 17, M = 19 (uneven row tiles)
    ((2, 7, 12), (2, 12, 8)),           # N = 8: half a vector divides it
    ((2, 7, 12), (2, 12, 7)),           # N = 7: a 7-lane tile
    ((2, 7, 12), (2, 12, 5)),           # N = 5
    ((2, 7, 12), (2, 12, 3)),           # N = 3: too narrow, scalar
])
@pytest.mark.parametrize("threads", [1, 2])
def test_narrow_n_matmul_matches_numpy(rng, a_shape, b_shape, threads):
    feed = {"a": rng.standard_normal(a_shape).astype("float32"),
            "b": rng.standard_normal(b_shape).astype("float32")}
    got = _run(sym.matmul(sym.Variable("a"), sym.Variable("b")), feed, threads)
    np.testing.assert_allclose(got, feed["a"] @ feed["b"], rtol=1e-4, atol=1e-4)


def test_narrow_n_matmul_with_epilogue_matches_numpy(rng):
    feed = {"a": rng.standard_normal((1, 8, 40, 40)).astype("float32"),
            "b": rng.standard_normal((1, 8, 40, 15)).astype("float32")}
    got = _run(sym.relu(sym.matmul(sym.Variable("a"), sym.Variable("b")) * 0.5), feed, 2)
    np.testing.assert_allclose(got, np.maximum(feed["a"] @ feed["b"] * 0.5, 0),
                               rtol=1e-4, atol=1e-4)


def test_only_widths_between_one_and_two_vectors_are_padded():
    from nnvm_llvm.compiler.gemm import pads_narrow_n

    two_d = [(40, 40), (40, 24)]
    assert pads_narrow_n({}, two_d, 24, 16)
    assert pads_narrow_n({}, two_d, 17, 16)
    assert not pads_narrow_n({}, two_d, 15, 16)    # one odd-width vector tile instead
    assert not pads_narrow_n({}, two_d, 16, 16)    # a whole vector
    assert not pads_narrow_n({}, two_d, 33, 16)    # the plain lowering pads it
    assert not pads_narrow_n({"transpose_b": True}, two_d, 24, 16)
    assert not pads_narrow_n({}, [(40,), (40, 24)], 24, 16)  # a 1-D operand


def test_rows_narrower_than_a_vector_take_one_tile_as_wide_as_the_row():
    from nnvm_llvm.compiler.schedules import ScheduleInfo, _matmul_tile

    info = ScheduleInfo("matmul")
    assert _matmul_tile(40, 15, info)[1] == 15
    assert _matmul_tile(40, 7, info)[1] == 7
    assert _matmul_tile(40, 8, info)[1] == 8     # half a vector divides it
    assert _matmul_tile(40, 3, info)[1] == 1     # too narrow for a vector
    assert _matmul_tile(40, 16, info)[1] == 16
    assert _matmul_tile(40, 15, ScheduleInfo("matmul", knobs={"nr": 5}))[1] == 5  # tuned
