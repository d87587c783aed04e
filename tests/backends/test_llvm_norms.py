"""The llvm normalisation kernels match the reference interpreter on the shapes of the
roofline sweep (odd widths included) and keep IEEE behaviour (a NaN poisons its row's
statistics and only them). Instance and group norm compute their statistics once per
(n, group) row rather than once per output line; batch norm is a per-channel scale and
shift vectorised along W whatever its width divides by."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
from nnvm import sym
from nnvm.backend import get_backend

REASON = get_backend("llvm", require_available=False).compiler_available()
pytestmark = [pytest.mark.llvm, pytest.mark.skipif(REASON is not None, reason=str(REASON))]


def _both(y, shape, params, xv):
    """(llvm, reference) outputs of ``y`` for ``x = xv``."""
    kw = {"shape": {"x": shape}, "params": params}
    got = nnvm.compiler.build(y, target="llvm", opt_level=3, **kw).run(x=xv)[0]
    want = nnvm.compiler.build(y, target="reference", **kw).run(x=xv)[0]
    return np.asarray(got), np.asarray(want)


def _channel_params(rng, c, names):
    return {n: (rng.random(c) + 0.5).astype("float32") for n in names}


def _instance_norm(rng, c, groups=None):
    x, g, b = sym.Variable("x"), sym.Variable("g"), sym.Variable("b")
    y = (sym.instance_norm(x, g, b, epsilon=1e-5) if groups is None else
         sym.group_norm(x, g, b, num_groups=groups, epsilon=1e-5))
    return y, _channel_params(rng, c, "gb")


def _batch_norm(rng, c):
    names = "gbmv"
    y = sym.batch_norm(*(sym.Variable(n) for n in "x" + names))
    return y, _channel_params(rng, c, names)


SHAPES = [(1, 64, 128, 128), (1, 512, 3199), (2, 16, 13, 19), (1, 3, 7, 152), (1, 8, 5, 4, 3)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_instance_norm_matches_reference(rng, shape):
    y, params = _instance_norm(rng, shape[1])
    xv = (rng.standard_normal(shape) * 3 + 1).astype("float32")
    got, want = _both(y, shape, params, xv)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape,groups", [((2, 32, 20, 24), 8), ((1, 6, 9, 11), 3),
                                          ((1, 4, 37), 2)])
def test_group_norm_matches_reference(rng, shape, groups):
    y, params = _instance_norm(rng, shape[1], groups)
    xv = rng.standard_normal(shape).astype("float32")
    got, want = _both(y, shape, params, xv)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(1, 64, 200, 152), (1, 16, 400, 304), (2, 5, 9, 13),
                                   (1, 3, 7)], ids=lambda s: "x".join(map(str, s)))
def test_batch_norm_matches_reference(rng, shape):
    y, params = _batch_norm(rng, shape[1])
    xv = rng.standard_normal(shape).astype("float32")
    got, want = _both(y, shape, params, xv)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("axis", [1, 2, -1])
def test_layer_norm_over_trailing_axes_matches_reference(rng, axis):
    shape = (2, 6, 10, 24)
    x, s, b = sym.Variable("x"), sym.Variable("s"), sym.Variable("b")
    y = sym.layer_norm(x, s, b, axis=axis, epsilon=1e-5)
    norm = shape[axis % 4:]
    params = {"s": (rng.random(norm) + 0.5).astype("float32"),
              "b": rng.random(norm).astype("float32")}
    xv = rng.standard_normal(shape).astype("float32")
    got, want = _both(y, shape, params, xv)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", ["instance", "group", "batch"])
def test_nan_poisons_only_its_statistics(rng, kind):
    shape = (1, 4, 6, 20)
    y, params = (_batch_norm(rng, 4) if kind == "batch" else
                 _instance_norm(rng, 4, 2 if kind == "group" else None))
    xv = rng.standard_normal(shape).astype("float32")
    xv[0, 1, 2, 3] = np.nan
    got, want = _both(y, shape, params, xv)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(want).any() and not np.isnan(want).all()
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("other", [(1, 1, 9, 1), (1, 4, 1, 1), (1, 1, 1, 13), (9, 13)])
def test_odd_width_planes_broadcast_along_any_axis(rng, other):
    """Elementwise kernels over planes whose rows no vector divides run one loop per plane:
    operands broadcast along rows, channels or columns still line up."""
    shape = (2, 4, 9, 13)
    x = sym.Variable("x")
    y = sym.relu(x * sym.Variable("w") + 1.0)
    params = {"w": rng.standard_normal(other).astype("float32")}
    xv = rng.standard_normal(shape).astype("float32")
    got, want = _both(y, shape, params, xv)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_global_mean_partials_stay_within_one_vector():
    """A global mean to (n, c) (ShuffleNet's 1024 x 7 x 7 head) has no row loop above its
    partial sums: vectorising them made a 1024-lane vector of gathers that took LLVM more
    than 15 minutes to compile. Every vectorised loop of the scheduled kernel is at most
    ``MAX_PARTIAL_LANES`` wide, except the plain division of the output row."""
    import re

    from nnvm_llvm.compiler.codegen import kernel_lowerings
    from nnvm_llvm.compiler.rows_schedule import MAX_PARTIAL_LANES
    from nnvm_llvm.compiler.schedules import schedule

    y = sym.mean(sym.Variable("x"), axis=(2, 3))
    graph, params = nnvm.compiler.optimize(y, shape={"x": (1, 1024, 7, 7)})
    (gl,) = kernel_lowerings(graph, params, 16)
    text = schedule(gl.primfunc(16), gl.schedule_info(16)).script()
    wide = [int(w) for w in re.findall(r"T\.vectorized\((\d+)\)", text)
            if int(w) > MAX_PARTIAL_LANES]
    assert len(wide) <= 1, text  # the output row's division only, no wide partial sums
    # each (n, c) is one whole reduction under the fused output loop, its 49 elements summed
    # in 7 vector lanes (a scalar strided sum over all channels at once was 10x slower)
    assert "T.vectorized(7)" in text, text
    xv = np.random.default_rng(0).standard_normal((1, 1024, 7, 7)).astype("float32")
    got = nnvm.compiler.build(y, target="llvm", shape={"x": xv.shape}).run(x=xv)[0]
    np.testing.assert_allclose(got, xv.mean(axis=(2, 3)), rtol=1e-5, atol=1e-6)
