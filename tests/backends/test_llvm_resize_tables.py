"""``resize`` on llvm as one pass per resized axis reading per-axis index/weight tables
(``resize_interp``): every interpolation mode, up and down, odd sizes, against the
reference target (float64 tensordots of the op's own per-axis matrices)."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
import nnvm.symbol as sym

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
pytest.importorskip("nnvm_llvm", reason="llvm backend not installed")
pytest.importorskip("tvm", reason="the llvm compiler needs TVM (apache-tvm)")

CASES = [
    # (shape, attrs): up, down and mixed; odd and vector-wide rows; 2, 3 and 4 resized axes
    ((1, 3, 7, 9), {"mode": "linear", "sizes": (1, 3, 19, 33)}),
    ((1, 4, 16, 16), {"mode": "linear", "sizes": (1, 4, 256, 256)}),  # DeepLabV3's head
    ((2, 3, 13, 11), {"mode": "linear", "scales": (1, 1, 0.55, 0.4),
                      "coordinate_transformation_mode": "pytorch_half_pixel"}),
    ((1, 2, 9, 10), {"mode": "linear", "scales": (1, 1, 2.5, 0.7),
                     "coordinate_transformation_mode": "align_corners"}),
    ((1, 2, 5, 6), {"mode": "linear", "scales": (1, 1, 1.7, 3.1),
                    "coordinate_transformation_mode": "half_pixel_symmetric"}),
    ((1, 2, 6, 7), {"mode": "cubic", "scales": (1, 1, 2.3, 0.6), "cubic_coeff_a": -0.5}),
    ((1, 1, 9, 8), {"mode": "cubic", "sizes": (1, 1, 5, 21),
                    "coordinate_transformation_mode": "asymmetric"}),
    ((1, 3, 7, 5), {"mode": "nearest", "scales": (1, 1, 1.5, 0.6),
                    "nearest_mode": "round_prefer_ceil"}),
    ((1, 2, 5, 7), {"mode": "nearest", "sizes": (1, 2, 3, 17), "nearest_mode": "floor",
                    "coordinate_transformation_mode": "align_corners"}),
    ((1, 2, 6, 6), {"mode": "nearest", "scales": (1, 1, 1.75, 2.5), "nearest_mode": "ceil",
                    "coordinate_transformation_mode": "tf_half_pixel_for_nn"}),
    ((2, 3, 5, 4, 6), {"mode": "linear", "scales": (1, 1.5, 0.8, 1.75, 2.0)}),  # 4 axes
    ((1, 2, 6, 7), {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
                    "roi": (-0.2, 0.1, 1.1, 0.8), "axes": (2, 3), "sizes": (9, 5),
                    "extrapolation_value": -3.5}),
]


def _build(y, shape, dtype):
    lib = nnvm.compiler.build(y, target="llvm", shape={"x": shape}, dtype={"x": dtype})
    ref = nnvm.compiler.build(y, target="reference", shape={"x": shape}, dtype={"x": dtype})
    assert lib.stats()["num_fallback_kernels"] == 0, lib.stats()["unsupported_ops"]
    return lib, ref


@pytest.mark.parametrize("shape,attrs", CASES,
                         ids=[f"{a['mode']}-{i}" for i, (_, a) in enumerate(CASES)])
@pytest.mark.parametrize("threads", [1, 2])
def test_table_driven_resize_matches_reference(rng, shape, attrs, threads):
    x = rng.standard_normal(shape).astype("float32")
    lib, ref = _build(sym.resize(sym.Variable("x"), **attrs), shape, "float32")
    lib.set_num_threads(threads)
    np.testing.assert_allclose(lib.run(x=x)[0], ref.run(x=x)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float64", "float16", "uint8", "int32"])
def test_table_driven_resize_keeps_the_dtype(rng, dtype):
    """Integers blend in float64 and round half to even, then saturate; float16 blends in
    float32; float64 stays float64 through every pass."""
    shape = (1, 2, 7, 9)
    x = (rng.uniform(0, 255, shape) if dtype in ("uint8", "int32") else
         rng.standard_normal(shape)).astype(dtype)
    y = sym.resize(sym.Variable("x"), mode="cubic", scales=(1, 1, 1.6, 0.7))
    lib, ref = _build(y, shape, dtype)
    got, want = lib.run(x=x)[0], ref.run(x=x)[0]
    assert got.dtype == want.dtype == np.dtype(dtype)
    tol = {"float64": 1e-12, "float16": 2e-3}.get(dtype, 0)
    np.testing.assert_allclose(got.astype("float64"), want.astype("float64"), rtol=tol,
                               atol=tol)


def test_passes_read_per_axis_tables_innermost_axis_first():
    """The kernel's structure: one table per tap and axis, as long as that axis's output
    (not one coordinate per output element), and the contiguous axis resized first so the
    last pass blends whole rows."""
    from tvm import te

    from nnvm_llvm.compiler import resize_interp

    attrs = {"mode": "linear", "coordinate_transformation_mode": "half_pixel",
             "sizes": (1, 21, 256, 255), "scales": None, "roi": (), "axes": None,
             "keep_aspect_ratio_policy": "stretch", "nearest_mode": "round_prefer_floor",
             "cubic_coeff_a": -0.75, "exclude_outside": False, "antialias": False,
             "extrapolation_value": 0.0}
    x = te.placeholder((1, 21, 16, 17), "float32", "x")
    out = resize_interp.interpolate(attrs, x, (1, 21, 256, 255), "y")
    stage = out.op.input_tensors
    tables = sorted((t.op.name, tuple(int(d) for d in t.shape)) for t in stage
                    if t.op.name.startswith("resize_tab"))
    assert tables == [("resize_tab1_i0", (256,)), ("resize_tab1_i1", (256,)),
                      ("resize_tab1_w0", (256,)), ("resize_tab1_w1", (256,))]
    first = [t for t in stage if t.op.name.startswith("resize_stage")]
    assert [tuple(int(d) for d in t.shape) for t in first] == [(1, 21, 16, 255)]


@pytest.mark.parametrize("where", ["before", "after"])
def test_fused_elementwise_neighbour_keeps_the_passes(rng, where):
    """An elementwise op fused into the resize kernel: before it, it is inlined into the
    first pass's reads; after it, it masters the group and the last pass is inlined into
    its output while the earlier passes and the tables stay materialised (a table inlined
    with Let-bound terms made TVM reject the kernel, leaving the plain loop nest)."""
    shape = (1, 3, 9, 14)
    x = sym.Variable("x")
    attrs = {"mode": "linear", "sizes": (1, 3, 20, 32)}
    y = sym.resize(sym.relu(x), **attrs) if where == "before" else \
        sym.sigmoid(sym.resize(x, **attrs))
    lib, ref = _build(y, shape, "float32")
    feed = rng.standard_normal(shape).astype("float32")
    np.testing.assert_allclose(lib.run(x=feed)[0], ref.run(x=feed)[0], rtol=1e-5, atol=1e-6)
    assert lib.stats()["num_kernels"] == 1
    assert lib.stats()["schedule_fallbacks"] == []  # the scheduled kernel compiled
