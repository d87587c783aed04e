"""End-to-end smoke test of core: symbol -> build(reference) -> run equals NumPy."""

import numpy as np

import nnvm
from nnvm import sym


def test_elementwise_chain_matches_numpy(rng):
    x = sym.Variable("x")
    y = sym.tanh(sym.relu(x * 2.0 + 1.0)) - x
    lib = nnvm.compiler.build(y, target="reference", shape={"x": (2, 3)})
    a = rng.standard_normal((2, 3)).astype("float32")
    (out,) = lib.run(x=a)
    np.testing.assert_allclose(out, np.tanh(np.maximum(a * 2 + 1, 0)) - a, rtol=1e-6)
    assert out.dtype == np.float32
