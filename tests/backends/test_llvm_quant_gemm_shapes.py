"""GEMM and conv shapes the llvm templates fell off a cliff on (issue 14): weight panels as
wide as the register tile, activation matmuls whose N no vector divides (ViT's 197 tokens),
dilated convs whose outer taps read only padding (DeepLabV3's ASPP), softmax rows no vector
divides (Whisper's 1500 frames) and max/sum rows likewise (magika's GELU + global max
pool), concatenations of many inputs (DenseNet). The integer GEMMs and
convs of ``test_llvm_quant`` take the same paths.

Each case checks the result against NumPy; the panel test checks the packing against the
template's own choice of tile, the invariant whose breach made every vector load a gather.
"""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
import nnvm.symbol as sym

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
pytest.importorskip("nnvm_llvm", reason="llvm backend not installed")
pytest.importorskip("tvm", reason="the llvm compiler needs TVM (apache-tvm)")


@pytest.mark.parametrize("lanes", [8, 16])
def test_weight_panels_are_as_wide_as_the_dense_register_tile(lanes):
    """The integer and float GEMMs pack weights into panels of ``gemm_block`` columns; the
    ``dense`` template picks its register tile from the padded width alone. A tile wider
    than the panel turns every vector load into a gather (ddddocr's 8210 classes: 16-wide
    panels, padded to 8224 = 257 x 32, under 32-wide tiles ran at a quarter of the speed)."""
    from nnvm_llvm.compiler.gemm import gemm_block
    from nnvm_llvm.compiler.schedules import ScheduleInfo, _dense_nr

    for n in range(2, 600):
        bn = gemm_block(n, lanes)
        padded = -(-n // bn) * bn
        assert _dense_nr(padded, ScheduleInfo("dense", lanes)) == bn, (n, bn, padded)
    assert gemm_block(8210, 16) == 32


MATMULS = [((2, 197, 64), (2, 64, 197), False), ((3, 50, 8), (1, 8, 37), False),
           ((2, 64, 197), (2, 64, 197), True), ((2, 3, 50, 8), (3, 8, 45), False)]


@pytest.mark.parametrize("sa,sb,ta", MATMULS, ids=["vit-qk", "broadcast-b", "transpose-a",
                                                   "4d"])
def test_activation_matmul_with_odd_width_matches_numpy(rng, sa, sb, ta):
    """N zero-padded to whole vectors and M to whole row tiles, then sliced: the slice must
    write exactly the M x N outputs (an uneven row tile once wrote past the buffer)."""
    a = rng.standard_normal(sa).astype("float32")
    b = rng.standard_normal(sb).astype("float32")
    y = sym.matmul(sym.Variable("a"), sym.Variable("b"), transpose_a=ta)
    lib = nnvm.compiler.build(y, target="llvm", shape={"a": sa, "b": sb})
    assert lib.stats()["num_fallback_kernels"] == 0
    want = np.matmul(np.swapaxes(a, -1, -2) if ta else a, b)
    np.testing.assert_allclose(lib.run(a=a, b=b)[0], want, rtol=1e-5, atol=1e-5)


DILATED = [((1, 32, 16, 16), (16, 32, 3, 3), {"dilation": (36, 36), "padding": (36, 36)}),
           ((1, 32, 16, 16), (16, 32, 3, 3), {"dilation": (12, 12), "padding": (12, 12)}),
           ((1, 8, 10, 7), (24, 8, 3, 5), {"dilation": (6, 4), "padding": (6, 8),
                                           "strides": (2, 1)}),
           ((1, 8, 10, 7), (12, 8, 5, 5), {"dilation": (1, 9), "padding": (2, 18)})]


@pytest.mark.parametrize("xs,ws,attrs", DILATED, ids=["aspp36", "aspp12", "stride-mixed",
                                                      "one-axis"])
@pytest.mark.parametrize("packed", [True, False])
def test_conv_taps_reading_only_padding_are_dropped_exactly(rng, xs, ws, attrs, packed):
    """Dropping the dead taps (and the padding they alone read) changes nothing."""
    x = rng.standard_normal(xs).astype("float32")
    w = rng.standard_normal(ws).astype("float32")
    y = sym.conv2d(sym.Variable("x"), sym.Variable("w"), channels=ws[0], kernel_size=ws[2:],
                   use_bias=False, **attrs)
    params = {"w": w} if packed else {}
    feed = {"x": x} if packed else {"x": x, "w": w}
    lib, ref = (nnvm.compiler.build(y, target=t, shape={"x": xs, "w": ws}, params=dict(params))
                for t in ("llvm", "reference"))
    np.testing.assert_allclose(lib.run(**feed)[0], ref.run(**feed)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(2, 197, 197), (3, 40), (4, 5, 33)])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_rows_split_into_vectors_and_tail_match_reference(rng, shape, op):
    """Row max and sum taken over the whole vectors and the tail apart: same values, and a
    -inf or NaN in the tail or the vector part behaves as the one-piece reduction."""
    x = (rng.standard_normal(shape) * 4).astype("float32")
    x.reshape(-1, shape[-1])[0, 3] = -np.inf
    x.reshape(-1, shape[-1])[1, -1] = np.nan
    y = getattr(sym, op)(sym.Variable("x"), axis=-1)
    lib, ref = (nnvm.compiler.build(y, target=t, shape={"x": shape})
                for t in ("llvm", "reference"))
    np.testing.assert_allclose(lib.run(x=x)[0], ref.run(x=x)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n,axis", [(24, 1), (5, 2), (3, 3)])
def test_concatenate_of_many_inputs_with_fused_epilogue_matches_numpy(rng, n, axis):
    """Outer-axis concatenation picks its input by a tree of branches, the last axis by a
    select chain: every element still comes from the right input, at every boundary."""
    shapes = [tuple(4 + k if d == axis else (1, 6, 7, 9)[d] for d in range(4))
              for k in range(n)]
    xs = [rng.standard_normal(s).astype("float32") for s in shapes]
    y = sym.relu(sym.concatenate(*[sym.Variable(f"x{k}") for k in range(n)], axis=axis)
                 * 2.0 + 1.0)
    lib = nnvm.compiler.build(y, target="llvm", shape={f"x{k}": s for k, s in
                                                       enumerate(shapes)})
    got = lib.run(**{f"x{k}": x for k, x in enumerate(xs)})[0]
    np.testing.assert_allclose(got, np.maximum(np.concatenate(xs, axis=axis) * 2 + 1, 0),
                               rtol=1e-6)


@pytest.mark.parametrize("n", [508, 64, 20])
@pytest.mark.parametrize("op", ["max", "min", "sum", "mean"])
def test_row_reductions_in_vector_lanes_keep_nan_and_infinities(rng, n, op):
    """Row reductions (whole vectors and tail apart when the row needs it) over a fused
    GELU-like epilogue: a NaN anywhere gives NaN, an all -inf (max) or +inf (min) row
    gives that infinity, other rows the plain result."""
    x = rng.standard_normal((6, n)).astype("float32")
    x[1, n - 1] = np.nan
    x[2, 3] = np.nan
    x[3, :] = -np.inf if op == "max" else np.inf
    x[4, 0] = -np.inf
    v = sym.Variable("x")
    y = getattr(sym, op)(sym.tanh(v) * v if op in ("sum", "mean") else v * 1.5, axis=(-1,))
    lib, ref = (nnvm.compiler.build(y, target=t, shape={"x": x.shape})
                for t in ("llvm", "reference"))
    np.testing.assert_allclose(lib.run(x=x)[0], ref.run(x=x)[0], rtol=1e-5, atol=1e-5)
