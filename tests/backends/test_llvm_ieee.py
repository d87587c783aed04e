"""IEEE special values on ``llvm`` propagate exactly as on ``reference`` (NumPy): NaN stays NaN,
+-inf saturates where NumPy's does. LLVM's min/max, TVM's clamped tanh and a range-clamped
``exp`` used to turn NaN into numbers (a CNN fed NaN returned zeros) and ``exp(inf)`` into
2.4e38. Each op is compared on NaN/inf positions exactly and on finite values closely."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
from nnvm import sym
from nnvm.backend import get_backend
from nnvm.errors import BackendUnavailableError
from nnvm.testing.models import small_cnn


def _reason():
    try:
        backend = get_backend("llvm", require_available=False)
    except BackendUnavailableError as exc:
        return str(exc)
    return backend.is_available() or getattr(backend, "compiler_available", lambda: None)()


REASON = _reason()
pytestmark = [pytest.mark.llvm,
              pytest.mark.skipif(REASON is not None, reason=f"llvm unavailable: {REASON}")]

SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, 1.0, -1.0, 100.0, -100.0,
                    -0.5, 3.0, 1e-3, -90.0, 89.0, 0.25, -7.0, 20.0], "float32")

x = sym.Variable("x")
y = sym.Variable("y")
UNARY = {
    "relu": sym.relu(x), "sigmoid": sym.sigmoid(x), "tanh": sym.tanh(x), "exp": sym.exp(x),
    "softplus": sym.softplus(x), "elu": sym.elu(x), "selu": sym.selu(x),
    "celu": sym.celu(x), "hard_sigmoid": sym.hard_sigmoid(x), "mish": sym.mish(x),
    "gelu": sym.gelu(x), "erf": sym.erf(x), "log": sym.log(x), "sqrt": sym.sqrt(x),
    "swish": sym.swish(x), "hard_swish": sym.hard_swish(x), "leaky_relu": sym.leaky_relu(x),
    "softmax": sym.softmax(x), "log_softmax": sym.log_softmax(x),
    "max": sym.max(x, axis=1), "min": sym.min(x, axis=1),
}


def _compare(net, feed, shapes):
    ref = nnvm.compiler.build(net, target="reference", shape=shapes).run(**feed)
    got = nnvm.compiler.build(net, target="llvm", shape=shapes).run(**feed)
    for r, g in zip(ref, got):
        np.testing.assert_array_equal(np.isnan(g), np.isnan(r), err_msg="NaN positions")
        np.testing.assert_array_equal(np.isposinf(g), np.isposinf(r), err_msg="+inf positions")
        np.testing.assert_array_equal(np.isneginf(g), np.isneginf(r), err_msg="-inf positions")
        fin = np.isfinite(r)
        np.testing.assert_allclose(g[fin], r[fin], rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_special_values(name):
    # each row holds one NaN or inf at most, so row-wise ops (softmax, max) see each alone,
    # plus one all-finite row
    rows = [np.roll(SPECIAL, k) for k in range(3)] + [SPECIAL[3:].tolist() + [0.5, 2, -2]]
    data = np.array(rows, "float32")
    with np.errstate(all="ignore"):
        _compare(UNARY[name], {"x": data}, {"x": data.shape})


@pytest.mark.parametrize("op", ["broadcast_maximum", "broadcast_minimum"])
def test_binary_min_max_propagate_nan_from_either_side(op):
    a = np.array([np.nan, 1.0, np.nan, -np.inf, 2.0, 0.0, 5.0, -1.0] * 2, "float32")
    b = np.array([1.0, np.nan, np.nan, 3.0, np.inf, -0.0, -5.0, -1.0] * 2, "float32")
    net = getattr(sym, op)(x, y)
    _compare(net, {"x": a, "y": b}, {"x": a.shape, "y": b.shape})


def test_max_pool_propagates_nan():
    data = np.arange(2 * 8 * 8, dtype="float32").reshape(1, 2, 8, 8)
    data[0, 0, 1, 1] = np.nan
    data[0, 1, 4, 5] = np.inf
    net = sym.max_pool2d(x, pool_size=(2, 2), strides=(2, 2))
    _compare(net, {"x": data}, {"x": data.shape})


def test_cnn_fed_nan_returns_nan():
    """The issue's case: a CNN (conv-bn-relu, max pool, residual, dense) fed one NaN pixel
    returned finite numbers on llvm where reference and onnxruntime return NaN."""
    net, params, shapes = small_cnn()
    data = np.random.default_rng(0).standard_normal(shapes["data"]).astype("float32")
    data[0, 0, 5, 5] = np.nan
    ref = nnvm.compiler.build(net, target="reference", shape=shapes, params=params,
                              opt_level=3).run(data=data)[0]
    got = nnvm.compiler.build(net, target="llvm", shape=shapes, params=params,
                              opt_level=3).run(data=data)[0]
    assert np.isnan(ref).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))


def test_softmax_of_fully_masked_rows():
    """Attention masks a row completely with -inf: its row max must be -inf (not the lowest
    finite float, which the max reducer's identity used to be), so ``where(max == -inf, 0,
    softmax)`` zeroes the row as onnxruntime does; softmax itself gives NaN there, as NumPy."""
    scores = np.array([[-np.inf] * 4, [0.5, -np.inf, 1.0, -2.0], [-np.inf, 3.0, -np.inf, 0.0],
                       [-np.inf] * 4], "float32")
    row_max = sym.max(x, axis=1, keepdims=True)
    masked = sym.broadcast_equal(row_max, sym.full(shape=(4, 1), fill_value=-np.inf))
    safe = sym.where(sym.broadcast_to(masked, shape=scores.shape),
                     sym.zeros_like(x), sym.softmax(x))
    with np.errstate(all="ignore"):
        _compare(sym.Group([row_max, sym.softmax(x), safe]), {"x": scores},
                 {"x": scores.shape})
        got = nnvm.compiler.build(safe, target="llvm", shape={"x": scores.shape}).run(
            x=scores)[0]
    np.testing.assert_array_equal(got[[0, 3]], 0.0)
