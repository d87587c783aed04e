"""The batch-axis analysis (``nnvm.compiler.batch_axis``) splits a symbolic batch only where
samples stay independent, and ``BatchedModule`` puts the batch back on each output's axis."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import nnvm
import nnvm.symbol as sym
from nnvm.runtime.batching import BatchedModule, PerShapeModule


def _build(out, shape, **kw):
    return nnvm.compiler.build(out, "reference", shape=shape, **kw)


def _x(n, *rest):
    return np.arange(n * int(np.prod(rest)), dtype="float32").reshape(n, *rest) / 7 - 1


def test_transpose_moves_the_batch_and_outputs_follow_it():
    x = sym.Variable("x")
    lib = _build(sym.relu(sym.transpose(x, axes=(1, 0))), {"x": ("N", 4)})
    assert isinstance(lib, BatchedModule) and lib.plan.outputs == (1,)
    assert lib.output_shapes == [(4, "N")]
    for n in (1, 3, 8):
        np.testing.assert_array_equal(lib.run(x=_x(n, 4))[0], np.maximum(_x(n, 4).T, 0))


def test_reduction_away_from_the_batch_is_split():
    x = sym.Variable("x")
    lib = _build(sym.sum(x, axis=(1,), keepdims=True), {"x": ("B", 3, 2)}, batch_bucket=2)
    assert isinstance(lib, BatchedModule)
    np.testing.assert_allclose(lib.run(x=_x(5, 3, 2))[0], _x(5, 3, 2).sum(1, keepdims=True))
    assert lib.runs == 3  # 2 + 2 + 1 padded


@pytest.mark.parametrize("make, reason", [
    (lambda x: sym.sum(x, axis=(0,)), "reduces over the batch"),
    (lambda x: sym.reshape(x, shape=(-1, 2)), "folded into other dimensions"),
    (lambda x: sym.softmax(x, axis=0), "is the batch axis"),
])
def test_samples_that_mix_fall_back_to_one_build_per_size(caplog, make, reason):
    x = sym.Variable("x")
    with caplog.at_level(logging.WARNING, logger="nnvm.compiler"):
        lib = _build(make(x), {"x": ("N", 4)})
    assert isinstance(lib, PerShapeModule) and reason in caplog.text
    ref = {n: _build(make(x), {"x": (n, 4)}).run(x=_x(n, 4))[0] for n in (2, 3)}
    for n in (2, 3, 2):
        np.testing.assert_allclose(lib.run(x=_x(n, 4))[0], ref[n])
    assert lib.builds == 2


def test_batched_inputs_must_agree_and_two_symbols_are_not_one_batch():
    a, b = sym.Variable("a"), sym.Variable("b")
    lib = _build(a + b, {"a": ("N", 3), "b": ("N", 3)})
    with pytest.raises(nnvm.NNVMError, match="disagree on the batch size"):
        lib.run(a=_x(2, 3), b=_x(3, 3))
    assert isinstance(_build(a + b, {"a": ("N", 3), "b": ("M", 3)}), PerShapeModule)


def test_a_batched_module_says_how_to_export():
    lib = _build(sym.relu(sym.Variable("x")), {"x": ("N", 2)})
    with pytest.raises(nnvm.NNVMError, match="bucket_module"):
        lib.export("never.nnvm")


def test_slices_away_from_the_batch_split_and_a_reversed_batch_does_not(caplog):
    x = sym.Variable("x")
    kept = _build(sym.strided_slice(x, begin=(0, 1), end=(1 << 30, 3)), {"x": ("N", 4)})
    assert isinstance(kept, BatchedModule)
    np.testing.assert_array_equal(kept.run(x=_x(3, 4))[0], _x(3, 4)[:, 1:3])
    with caplog.at_level(logging.WARNING, logger="nnvm.compiler"):
        rev = _build(sym.strided_slice(x, begin=(-1,), end=(-(1 << 30),), stride=(-1,)),
                     {"x": ("N", 4)})
    assert isinstance(rev, PerShapeModule) and "strides along the batch axis" in caplog.text
    np.testing.assert_array_equal(rev.run(x=_x(3, 4))[0], _x(3, 4)[::-1])


def test_threads_with_different_batch_sizes_each_get_their_own_outputs():
    from concurrent.futures import ThreadPoolExecutor

    x = sym.Variable("x")
    lib = _build(sym.relu(x) * 2.0, {"x": ("N", 3)}, batch_bucket=2)
    sizes = [1, 2, 3, 5, 8] * 8
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda n: lib.run(x=_x(n, 3))[0], sizes))
    for n, out in zip(sizes, outs):
        np.testing.assert_array_equal(out, np.maximum(_x(n, 3), 0) * 2.0)
