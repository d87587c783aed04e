"""Strict input dtypes: a NumPy array of another dtype is refused with a message that names
the input, the expected and the given dtype and the fix, unless the caller opts into casting
with ``module.allow_cast = True``; Python scalars and lists (no dtype of their own) are
still converted when that keeps their kind."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
import nnvm.symbol as sym
from nnvm.backend import get_backend
from nnvm.errors import ExecutionError


def _llvm_reason():
    return get_backend("llvm", require_available=False).compiler_available()


TARGETS = ["reference",
           pytest.param("llvm", marks=pytest.mark.skipif(_llvm_reason() is not None,
                                                         reason=str(_llvm_reason())))]


def _build(target):
    x = sym.Variable("x")
    y = sym.relu(sym.dense(x, units=3, name="fc"))
    params = {"fc_weight": np.arange(12, dtype="float32").reshape(3, 4) / 10,
              "fc_bias": np.zeros(3, "float32")}
    return nnvm.compiler.build(y, target=target, shape={"x": (2, 4)}, params=params)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("given", ["float64", "int32", "float16"])
def test_numpy_array_of_another_dtype_is_refused(target, given):
    lib = _build(target)
    with pytest.raises(ExecutionError) as err:
        lib.run(x=np.ones((2, 4), dtype=given))
    msg = str(err.value)
    assert msg.startswith("input 'x': wrong dtype")
    assert f"expected float32, got {given}" in msg
    assert "astype('float32')" in msg and "allow_cast = True" in msg
    with pytest.raises(ExecutionError, match="wrong dtype"):
        lib.set_input("x", np.ones((2, 4), dtype=given))


@pytest.mark.parametrize("target", TARGETS)
def test_allow_cast_opts_into_conversion(target):
    lib = _build(target)
    want = lib.run(x=np.ones((2, 4), "float32"))[0]
    lib.allow_cast = True
    for given in ("float64", "int32"):
        got = lib.run(x=np.ones((2, 4), dtype=given))[0]
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ExecutionError, match="wrong dtype"):
        lib.run(x=np.ones((2, 4), dtype="complex64"))  # would drop the imaginary part
    assert _build(target).allow_cast is False, "the opt-in is per module"


@pytest.mark.parametrize("target", TARGETS)
def test_python_lists_are_still_converted(target):
    lib = _build(target)
    want = lib.run(x=np.ones((2, 4), "float32"))[0]
    np.testing.assert_array_equal(lib.run(x=[[1.0] * 4] * 2)[0], want)
    np.testing.assert_array_equal(lib.run(x=[[1] * 4] * 2)[0], want)


def test_python_values_that_would_change_kind_are_refused():
    x = sym.Variable("i", dtype="int32")
    lib = nnvm.compiler.build(x + 1, target="reference", shape={"i": (2,)},
                              dtype={"i": "int32"})
    np.testing.assert_array_equal(lib.run(i=[1, 2])[0], np.array([2, 3], "int32"))
    with pytest.raises(ExecutionError, match="without changing its kind"):
        lib.run(i=[1.5, 2.0])
