"""Concatenations on llvm are cut into one loop nest per input (``schedules._schedule_pieces``).

Checked against the reference on the shapes that matter: DenseNet's many-input channel
concatenations fused with BatchNorm and ReLU, every axis, batch > 1, inputs of unequal and
odd sizes, an empty input; and that the cut is found only where the branches test one
index against constants (not on padding, not on a data-dependent select)."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
import nnvm.symbol as sym
from llvm_probe import skip_without_llvm

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

skip_without_llvm()


def _concat_bn_relu(shapes, axis, threads, rng):
    names = [f"x{i}" for i in range(len(shapes))]
    cat = sym.concatenate(*[sym.Variable(n) for n in names], axis=axis)
    out_shape = list(shapes[0])
    out_shape[axis] = sum(s[axis] for s in shapes)
    bshape = [1] * len(out_shape)
    bshape[axis] = out_shape[axis]
    y = sym.relu(sym.broadcast_add(sym.broadcast_mul(cat, sym.Variable("scale")),
                                   sym.Variable("shift")))
    values = {n: rng.standard_normal(s).astype("float32") for n, s in zip(names, shapes)}
    params = {"scale": rng.uniform(0.5, 2, bshape).astype("float32"),
              "shift": rng.uniform(-0.5, 0.5, bshape).astype("float32")}
    shape = {**{n: v.shape for n, v in values.items()}, "scale": tuple(bshape),
             "shift": tuple(bshape)}
    lib = nnvm.compiler.build(y, target="llvm", shape=shape, params=params)
    lib.set_num_threads(threads)
    got = lib.run(**values)
    got = got[0] if isinstance(got, (list, tuple)) else got
    want = np.maximum(np.concatenate([values[n] for n in names], axis=axis) * params["scale"]
                      + params["shift"], 0)
    return lib, np.asarray(got), want


@pytest.mark.parametrize("shapes,axis", [
    ([(1, 32, 14, 14)] * 32, 1),                                  # DenseNet block 3
    ([(1, 64, 56, 56)] + [(1, 32, 56, 56)] * 6, 1),               # block 1, parallel pieces
    ([(2, 3, 7, 5), (2, 5, 7, 5), (2, 1, 7, 5)], 1),              # batch 2, odd channels
    ([(3, 4, 6), (1, 4, 6), (5, 4, 6)], 0),                       # outermost axis
    ([(2, 3, 5, 7), (2, 3, 4, 7)], 2),                            # a middle axis
    ([(2, 3, 5), (2, 3, 11), (2, 3, 1)], 2),                      # the last axis
    ([(1, 8, 4, 4), (1, 0, 4, 4), (1, 8, 4, 4)], 1),              # an empty input
])
@pytest.mark.parametrize("threads", [1, 2])
def test_concat_with_epilogue_matches_numpy(shapes, axis, threads, rng):
    lib, got, want = _concat_bn_relu(shapes, axis, threads, rng)
    if all(all(shape) for shape in shapes):  # (a zero-size input is a host step)
        assert lib.stats()["num_fallback_kernels"] == 0
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def _block_of(func_builder):
    import tvm.s_tir as s_tir

    from nnvm_llvm.compiler import schedules

    sch = s_tir.Schedule(func_builder())
    schedules.inline_all(sch, sch.mod["main"], ())
    (block,) = [b for b in schedules._blocks(sch)]
    return schedules, sch, block


def test_pieces_found_for_concat_not_for_padding():
    from tvm import te, tirx, topi

    from nnvm_llvm.compiler import lowering

    class Ctx:
        name = "cat"

    def concat_relu():
        xs = [te.placeholder((1, c, 4, 4), name=f"x{i}") for i, c in enumerate((3, 5, 2))]
        cat = lowering._concatenate({"axis": 1}, xs, [((1, 10, 4, 4), "float32")], Ctx())
        y = te.compute(cat.shape, lambda *i: tirx.Select(cat[i] < 0, tirx.const(0, "float32"),
                                                        cat[i]), name="y")
        return te.create_prim_func(xs + [y])

    def padded():
        x = te.placeholder((1, 3, 4, 4), name="x")
        y = topi.nn.pad(x, [0, 0, 1, 1], [0, 0, 1, 1], name="y")
        return te.create_prim_func([x, y])

    schedules, sch, block = _block_of(concat_relu)
    assert schedules._piece_bounds(sch, block) == (1, [3, 8])
    assert schedules._schedule_pieces(sch, block, 16)
    schedules, sch, block = _block_of(padded)
    assert schedules._piece_bounds(sch, block) is None
