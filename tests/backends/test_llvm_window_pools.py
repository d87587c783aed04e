"""2-D pooling on ``llvm`` through its three window kernels, checked against the
``reference`` target: channel-blocked on small unit-stride planes (``window_blocked``),
flattened for other unit strides (``flat_window``) and along the output rows otherwise.

The cases cover what each kernel could get wrong: padded lanes of a channel count no vector
divides, ``ceil_mode`` windows that hang past the input, asymmetric padding (the padded
value must never win a max or count in an average unless ``count_include_pad``), batches,
and integer max pools (padded with the dtype's minimum).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")
import nnvm  # noqa: E402
import nnvm.symbol as sym  # noqa: E402
from nnvm_llvm.compiler.flat_window import FlatPlane  # noqa: E402
from nnvm_llvm.compiler.lowering import POOL_BLOCKED_MIN_OUTPUTS  # noqa: E402
from nnvm_llvm.compiler.window_blocked import wants_blocked  # noqa: E402

CASES = {
    # id: (input shape, pool, strides, padding (top, left, bottom, right), ceil_mode)
    "blocked_7x7_s1": ((1, 40, 7, 7), (3, 3), (1, 1), (1, 1, 1, 1), False),
    "rows_small_ceil_s2": ((2, 48, 7, 7), (3, 3), (2, 2), (0, 0, 0, 0), True),
    "blocked_asym": ((1, 30, 7, 8), (2, 3), (1, 1), (1, 1, 0, 0), False),
    "flat_small_plane": ((1, 32, 5, 5), (3, 3), (1, 1), (1, 1, 1, 1), False),
    "flat_14x14_s1": ((1, 12, 14, 14), (3, 3), (1, 1), (1, 1, 1, 1), False),
    "flat_odd_s1_asym": ((2, 3, 19, 23), (5, 3), (1, 1), (2, 0, 1, 1), True),
    "rows_s2": ((1, 8, 28, 28), (3, 3), (2, 2), (1, 1, 1, 1), False),
    # the row kernel's pieces (pool_rows): non-overlapping windows in pieces of 4 outputs,
    # rows no vector divides (55 outputs: the whole row), a piece that is not a vector
    "rows_nonoverlap_2x2_s2": ((2, 5, 16, 24), (2, 2), (2, 2), (0, 0, 0, 0), False),
    "rows_odd_row_ceil_s2": ((1, 3, 111, 111), (3, 3), (2, 2), (0, 0, 0, 0), True),
    "rows_nonoverlap_odd_pad": ((1, 4, 9, 13), (2, 2), (2, 2), (1, 0, 0, 1), True),
}


def _takes_blocked(xs, pool, strides, padding, ceil) -> bool:
    """Whether the pool lowering picks the channel-blocked kernel for this case."""
    (kh, kw), (sh, sw), (pt, pl, pb, pr) = pool, strides, padding

    def out(size, k, s, lo, hi):
        span = size + lo + hi - k
        return (-(-span // s) if ceil else span // s) + 1
    oh, ow = out(xs[2], kh, sh, pt, pb), out(xs[3], kw, sw, pl, pr)
    g = FlatPlane(kh, kw, sh, sw, 1, 1, pt, pl, xs[2], xs[3], oh, ow, 16)
    return sh == sw == 1 and oh * ow >= POOL_BLOCKED_MIN_OUTPUTS and wants_blocked(g, xs[1])


def _check(kind, case, count_include_pad=False, dtype="float32"):
    xs, pool, strides, padding, ceil = CASES[case]
    assert _takes_blocked(*CASES[case]) == case.startswith("blocked"), "case names its kernel"
    x = sym.Variable("x")
    if kind == "max":
        y = sym.max_pool2d(x, pool_size=pool, strides=strides, padding=padding, ceil_mode=ceil)
    else:
        y = sym.avg_pool2d(x, pool_size=pool, strides=strides, padding=padding, ceil_mode=ceil,
                           count_include_pad=count_include_pad)
    rng = np.random.default_rng(17)
    xv = (rng.standard_normal(xs) * 50).astype(dtype)
    libs = [nnvm.compiler.build(y, target=t, shape={"x": xs}, dtype={"x": dtype})
            for t in ("llvm", "reference")]
    assert libs[0].stats()["schedule_fallbacks"] == []  # the window kernel, not plain loops
    got, want = [lib.run(x=xv)[0] for lib in libs]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", sorted(CASES))
def test_max_pool_matches_reference(case):
    _check("max", case)


@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize("case", sorted(CASES))
def test_avg_pool_matches_reference(case, count_include_pad):
    _check("avg", case, count_include_pad)


@pytest.mark.parametrize("case", ["blocked_7x7_s1", "flat_odd_s1_asym", "rows_s2"])
def test_int_max_pool_pads_with_the_dtype_minimum(case):
    _check("max", case, dtype="int32")
