"""Softmax's own exponential (``fastmath.exp_nonpositive``) compiled alone, scalar and vector.

Why: softmax's exp skips ``fast_exp``'s overflow side and its selects (its input is
``x - max(x) <= 0``): one clamp at -88, rounding by adding ``1.5 * 2^23 + 127``, ``2^n`` by a
shift into the exponent. What that must still get right: about 2 ulp over ``[-87.3, 0]``,
exactly 0 from -87.68 down to -inf, NaN kept NaN, in scalar and 16-lane vector code both
(softmax rows at those edges against onnxruntime: test_llvm_rows_softmax.py).
"""

from __future__ import annotations

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")

from tvm import te  # noqa: E402


def _exp_kernel(n: int, lanes: int):
    """``y = exp_nonpositive(x)`` compiled for llvm, vectorised ``lanes`` wide (1: scalar)."""
    import tvm.s_tir as s_tir
    from nnvm_llvm.compiler.fastmath import exp_nonpositive

    x = te.placeholder((n,), "float32", name="x")
    y = te.compute((n,), lambda i: exp_nonpositive(x[i]), name="y")
    sch = s_tir.Schedule(te.create_prim_func([x, y]))
    if lanes > 1:
        (loop,) = sch.get_loops(sch.get_sblock("y"))
        sch.vectorize(sch.split(loop, [None, lanes])[1])
    lib = tvm.compile(sch.mod, target="llvm")

    def run(v):
        out = tvm.runtime.tensor(np.zeros(n, "float32"))
        lib(tvm.runtime.tensor(v), out)
        return out.numpy()
    return run


@pytest.mark.parametrize("lanes", [1, 16])
def test_exp_nonpositive_accuracy_and_edges(lanes):
    dense = -np.linspace(0, 87.3, 200_000, dtype=np.float32)
    edges = np.array([0.0, -0.0, -1e-30, -1e-7, -0.3465736, -0.3465737, -87.3, -87.5,
                      -87.7, -88.0, -88.5, -100.0, -1e30, -np.inf, np.nan, np.nan],
                     np.float32)
    x = np.concatenate([dense, edges])
    got = _exp_kernel(x.size, lanes)(x)
    want = np.exp(x.astype(np.float64))
    d = slice(0, dense.size)
    # float32's own rounding is 0.5 ulp (6e-8 relative); the polynomial adds about 2 ulp
    np.testing.assert_allclose(got[d], want[d], rtol=3e-7, atol=0)
    tail = got[dense.size:]
    np.testing.assert_allclose(tail[:6], want[dense.size:dense.size + 6], rtol=3e-7)
    assert abs(tail[6] - want[dense.size + 6]) <= 1e-44  # -87.3: near the smallest normal
    assert np.all(tail[8:14] == 0.0) and np.all(np.isnan(tail[14:]))  # -87.7 ... -inf; NaN
    assert abs(tail[7] - want[dense.size + 7]) < 1.2e-38  # -87.5: 0 or close
