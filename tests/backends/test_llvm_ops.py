"""Conformance of every op the llvm backend lowers: single-op graphs, llvm vs reference.

Each lowering rule needs a case below (a test fails when a rule has none), so a new rule
cannot land untested. Cases use small shapes; weights are params so the packed-weight
paths (dense panels, blocked conv2d filters) are exercised.
"""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
import nnvm.symbol as sym
from nnvm.backend import get_backend

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _reason():
    try:
        return get_backend("llvm", require_available=False).compiler_available()
    except Exception as exc:  # noqa: BLE001
        return f"llvm backend not installed ({exc})"


REASON = _reason()
if REASON is not None:
    pytest.skip(REASON, allow_module_level=True)

from nnvm_llvm.compiler.lowering import LOWERINGS  # noqa: E402

X = (2, 3, 4, 5)
UNARY_POS = ("log", "sqrt", "reciprocal")
# op -> (input shapes, attrs, params: names of inputs that are params, value range)
CASES: dict[str, tuple] = {
    "dense": ([(3, 16), (32, 16), (32,)], {"units": 32}, (1, 2), None),
    "matmul": ([(2, 4, 5), (2, 5, 3)], {}, (), None),
    "conv2d": ([(1, 3, 9, 9), (16, 3, 3, 3), (16,)],
               {"channels": 16, "kernel_size": (3, 3), "padding": (1, 1)}, (1, 2), None),
    "max_pool2d": ([(1, 4, 9, 9)], {"pool_size": (3, 3), "strides": (2, 2),
                                    "padding": (1, 1), "ceil_mode": True}, (), None),
    "avg_pool2d": ([(1, 4, 8, 8)], {"pool_size": (3, 3), "strides": (2, 2),
                                    "padding": (1, 1)}, (), None),
    "global_max_pool2d": ([(2, 4, 5, 6)], {}, (), None),
    "global_avg_pool2d": ([(2, 4, 5, 6)], {}, (), None),
    "softmax": ([(4, 33)], {"axis": -1}, (), None),
    "log_softmax": ([(3, 4, 5)], {"axis": 1}, (), None),
    "sum": ([X], {"axis": (1, 3)}, (), None),
    "mean": ([X], {"axis": (2,), "keepdims": True}, (), None),
    "max": ([X], {"axis": (0,), "exclude": True}, (), None),
    "min": ([X], {}, (), None),
    "prod": ([(3, 4)], {"axis": (1,)}, (), (0.5, 1.5)),
    "reshape": ([X], {"shape": (6, -1)}, (), None),
    "flatten": ([X], {}, (), None),
    "expand_dims": ([(3, 4)], {"axis": 1, "num_newaxis": 2}, (), None),
    "squeeze": ([(3, 1, 4, 1)], {}, (), None),
    "reshape_like": ([(3, 4), (2, 6)], {}, (), None),
    "transpose": ([X], {"axes": (0, 2, 3, 1)}, (), None),
    "concatenate": ([(2, 3), (2, 5)], {"axis": 1, "num_args": 2}, (), None),
    "broadcast_to": ([(3, 1)], {"shape": (3, 4)}, (), None),
    "pad": ([(2, 3)], {"pad_width": ((1, 0), (2, 1)), "pad_value": 1.5}, (), None),
    "leaky_relu": ([X], {"alpha": 0.1}, (), None),
    "clip": ([X], {"a_min": -0.5, "a_max": 0.5}, (), None),
    "cast": ([X], {"dtype": "float64"}, (), None),
    "elemwise_sum": ([X, X, X], {"num_args": 3}, (), None),
    "where": ([(3, 4), (3, 4), (3, 4)], {}, (), None),
}
for _op in ("elemwise_add", "elemwise_sub", "elemwise_mul", "elemwise_div"):
    CASES[_op] = ([X, X], {}, (), (0.5, 2.0))
for _op in ("broadcast_add", "broadcast_sub", "broadcast_mul", "broadcast_div",
            "broadcast_pow", "broadcast_maximum", "broadcast_minimum"):
    CASES[_op] = ([(2, 3, 4), (3, 1)], {}, (), (0.5, 2.0))
for _op in ("__add_scalar__", "__sub_scalar__", "__rsub_scalar__", "__mul_scalar__",
            "__div_scalar__", "__rdiv_scalar__", "__pow_scalar__", "__rpow_scalar__"):
    CASES[_op] = ([X], {"scalar": 1.5}, (), (0.5, 2.0))
for _op in ("relu", "tanh", "sigmoid", "exp", "log", "sqrt", "erf", "sin", "cos", "floor",
            "ceil", "round", "trunc", "negative", "abs", "reciprocal", "sign", "softplus",
            "softsign", "copy", "block_grad", "dropout", "zeros_like", "ones_like"):
    CASES[_op] = ([X], {}, (), (0.1, 3.0) if _op in UNARY_POS else None)

# -- ONNX-family elementwise ops (lowering_math) ---------------------------------------------
for _op in ("tan", "atan", "sinh", "cosh", "asinh", "hard_swish", "mish", "elu", "selu",
            "celu", "swish", "isnan", "isinf"):
    CASES[_op] = ([X], {}, (), (-3.0, 3.0))
for _op in ("asin", "acos", "atanh"):
    CASES[_op] = ([X], {}, (), (-0.9, 0.9))
CASES["acosh"] = ([X], {}, (), (1.1, 3.0))
CASES["hard_sigmoid"] = ([X], {"alpha": 0.3, "beta": 0.4}, (), (-4.0, 4.0))
CASES["thresholded_relu"] = ([X], {"alpha": 0.5}, (), None)
CASES["shrink"] = ([X], {"bias": 0.2, "lambd": 0.6}, (), None)
CASES["gelu"] = ([X], {}, (), (-3.0, 3.0))
CASES["prelu"] = ([X, (3, 1, 1)], {}, (1,), None)
CASES["logical_not"] = ([X], {}, (), None, {0: "bool"})
CASES["bitwise_not"] = ([X], {}, (), (-50, 50), {0: "int32"})
for _op in ("broadcast_equal", "broadcast_not_equal", "broadcast_greater",
            "broadcast_greater_equal", "broadcast_less", "broadcast_less_equal"):
    CASES[_op] = ([(2, 3, 4), (3, 1)], {}, (), (0, 3), {0: "int32", 1: "int32"})
for _op in ("logical_and", "logical_or", "logical_xor"):
    CASES[_op] = ([(2, 3, 4), (3, 1)], {}, (), None, {0: "bool", 1: "bool"})
for _op in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    CASES[_op] = ([(2, 3, 4), (3, 1)], {}, (), (-100, 100), {0: "int32", 1: "int32"})
for _op in ("broadcast_left_shift", "broadcast_right_shift"):
    CASES[_op] = ([(2, 3, 4), (3, 1)], {}, (), (0, 8), {0: "uint32", 1: "uint32"})
CASES["broadcast_mod"] = ([(2, 3, 4), (3, 1)], {}, (), (-4.0, 4.0))
CASES["broadcast_fmod"] = ([(2, 3, 4), (3, 1)], {}, (), (-4.0, 4.0))

# -- indexing and data movement (lowering_transform) -----------------------------------------
CASES["take"] = ([(4, 5), (2, 3)], {"axis": 1}, (), (-2, 7), {1: "int32"})
CASES["gather"] = ([(4, 5, 2), (3,)], {"axis": 0}, (), (-4, 4), {1: "int64"})
CASES["gather_elements"] = ([(3, 4), (3, 2)], {"axis": 1}, (), (-4, 4), {1: "int64"})
CASES["gather_nd"] = ([(3, 4, 2), (5, 2)], {}, (), (0, 3), {1: "int64"})
CASES["strided_slice"] = ([(5, 6, 3)], {"begin": (1, -1), "end": (4, 0), "stride": (2, -2)},
                          (), None)
CASES["split"] = ([(2, 6, 3)], {"indices_or_sections": (1, 4), "axis": 1}, (), None)
CASES["_split_like"] = ([(2, 6), (2, 2), (2, 4)], {"num_outputs": 2, "axis": 1}, (), None)
CASES["tile"] = ([(2, 3)], {"reps": (2, 3)}, (), None)
CASES["expand"] = ([(3, 1)], {"shape": (2, 1, 4)}, (), None)
CASES["expand_like"] = ([(3,), (3, 4)], {"axis": (1,)}, (), None)
CASES["trilu"] = ([(2, 4, 5)], {"upper": False, "k": 1}, (), None)
CASES["one_hot"] = ([(2, 3), (2,)], {"depth": 5, "axis": 1}, (), (-5, 5),
                    {0: "int64", 1: "float32"})
CASES["depth_to_space"] = ([(1, 8, 2, 3)], {"blocksize": 2, "mode": "CRD"}, (), None)
CASES["space_to_depth"] = ([(1, 2, 4, 6)], {"blocksize": 2}, (), None)
CASES["arange"] = ([], {"start": 1.0, "stop": 7.0, "step": 1.5}, (), None)
CASES["eye_like"] = ([(3, 5)], {"k": 1}, (), None)
CASES["cast_like"] = ([X, (2,)], {}, (), (-3.0, 3.0), {1: "int32"})
CASES["collapse_sum_like"] = ([(2, 3, 4), (3, 1)], {}, (), None)
CASES["argmax"] = ([X], {"axis": (2,), "keepdims": True}, (), (0, 3), {0: "int32"})
CASES["argmin"] = ([X], {"axis": (1,)}, (), None)
CASES["cumsum"] = ([(3, 5)], {"axis": 1, "exclusive": True}, (), None)
CASES["cumprod"] = ([(3, 5)], {"axis": 0, "reverse": True}, (), (0.5, 1.5))

# -- neural-network ops in ONNX form (lowering_nn) -------------------------------------------
CASES["conv"] = ([(1, 4, 7, 6), (6, 2, 3, 2), (6,)],
                 {"strides": (2, 1), "pads": (1, 0, 1, 1), "dilations": (1, 2), "groups": 2,
                  "use_bias": True}, (1, 2), None)
CASES["conv_transpose"] = ([(1, 4, 3, 4), (4, 3, 3, 2)],
                           {"strides": (2, 3), "pads": (1, 0, 0, 1), "groups": 2}, (1,), None)
CASES["max_pool"] = ([(1, 3, 7, 8)], {"kernel_shape": (3, 2), "strides": (2, 2),
                                      "pads": (1, 0, 1, 1), "ceil_mode": True}, (), None)
CASES["avg_pool"] = ([(1, 3, 7, 8)], {"kernel_shape": (3, 3), "strides": (2, 2),
                                      "pads": (1, 1, 1, 1)}, (), None)
CASES["lp_pool"] = ([(1, 2, 9)], {"kernel_shape": (3,), "strides": (2,), "p": 3}, (), None)
CASES["global_max_pool"] = ([(2, 3, 4, 2, 3)], {}, (), None)
CASES["global_avg_pool"] = ([(2, 3, 7)], {}, (), None)
CASES["global_lp_pool"] = ([(2, 3, 4, 5)], {"p": 2}, (), None)
CASES["batch_norm"] = ([(2, 3, 4, 5), (3,), (3,), (3,), (3,)], {"epsilon": 1e-3}, (1, 2, 3, 4),
                       (0.5, 2.0))
CASES["layer_norm"] = ([(2, 3, 8), (3, 8), (3, 8)], {"axis": 1}, (1, 2), None)
CASES["rms_norm"] = ([(2, 3, 8), (8,)], {"axis": -1}, (1,), None)
CASES["instance_norm"] = ([(2, 3, 4, 5), (3,), (3,)], {}, (1, 2), None)
CASES["group_norm"] = ([(2, 4, 3, 5), (4,), (4,)], {"num_groups": 2}, (1, 2), None)
CASES["lp_normalization"] = ([(3, 4, 5)], {"axis": 1, "p": 1}, (), None)
CASES["mean_variance_normalization"] = ([X], {}, (), None)
CASES["lrn"] = ([(2, 5, 3, 3)], {"size": 3, "alpha": 0.01}, (), None)
CASES["hardmax"] = ([(3, 4, 5)], {"axis": 1}, (), (0, 3), {0: "int32"})


#: Rules whose attribute variants need cases of their own (recurrent layers, resize modes) are
#: checked against the reference and onnxruntime in test_llvm_recurrent.py.
COVERED_IN_RECURRENT = {"resize", "lstm", "gru", "rnn"}


def test_every_lowering_rule_has_a_case():
    assert sorted(set(LOWERINGS) - set(CASES) - COVERED_IN_RECURRENT) == []


def _value(rng, shape, dtype, lo, hi):
    if dtype == "bool":
        return rng.uniform(-1, 1, shape) > 0
    if dtype.startswith(("int", "uint")):
        return rng.integers(int(lo), int(hi), shape).astype(dtype)
    return rng.uniform(lo, hi, shape).astype(dtype)


def _build_both(op, shapes, attrs, param_idx, rng, value_range, dtypes=None):
    names = [f"in{i}" for i in range(len(shapes))]
    lo, hi = value_range or (-2.0, 2.0)
    dtypes = dict(dtypes or {})
    if op == "where":
        dtypes[0] = "bool"
    dtype = {n: dtypes.get(i, "float32") for i, n in enumerate(names)}
    values = {n: _value(rng, s, dtype[n], lo, hi) for n, s in zip(names, shapes)}
    params = {names[i]: values[names[i]] for i in param_idx}
    inputs = {n: v for n, v in values.items() if n not in params}
    y = getattr(sym, op)(*[sym.Variable(n) for n in names], **attrs)
    shape = {n: v.shape for n, v in values.items()}
    lib = nnvm.compiler.build(y, target="llvm", shape=shape, params=params, dtype=dtype)
    ref = nnvm.compiler.build(y, target="reference", shape=shape, params=params, dtype=dtype)
    inputs = {n: v for n, v in inputs.items() if n in lib.input_names}
    return (lib.run(**inputs), ref.run(**inputs)), lib


@pytest.mark.parametrize("op", sorted(CASES))
def test_op_matches_reference(op, rng):
    if op not in LOWERINGS:
        pytest.skip(f"{op}: no lowering rule in this version")
    shapes, attrs, params, value_range, *dtypes = CASES[op]
    (got, want), lib = _build_both(op, shapes, attrs, params, rng, value_range, *dtypes)
    assert lib.stats()["num_fallback_kernels"] == 0, lib.stats()["unsupported_ops"]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("case", [
    ("conv2d", [(1, 8, 10, 12), (8, 1, 3, 3)], {"channels": 8, "kernel_size": (3, 3),
                                                 "groups": 8, "padding": (1, 1),
                                                 "use_bias": False}, (1,)),
    ("conv2d", [(2, 5, 11, 11), (24, 5, 3, 3), (24,)], {"channels": 24, "kernel_size": (3, 3),
                                                         "strides": (2, 2)}, (1, 2)),
    ("conv2d", [(1, 4, 8, 8), (8, 4, 1, 1)], {"channels": 8, "kernel_size": (1, 1),
                                               "use_bias": False}, ()),
    ("conv2d", [(1, 4, 9, 9), (8, 4, 3, 3)], {"channels": 8, "kernel_size": (3, 3),
                                               "dilation": (2, 2), "use_bias": False}, (1,)),
    ("dense", [(2, 3, 16), (20, 16)], {"units": 20, "use_bias": False}, (1,)),
    ("dense", [(5, 16), (48, 16), (48,)], {"units": 48}, ()),
    ("avg_pool2d", [(1, 2, 7, 7)], {"pool_size": (2, 2), "strides": (2, 2),
                                    "ceil_mode": True, "count_include_pad": True}, ()),
    ("conv2d", [(1, 4, 6, 6), (4, 2, 3, 3)], {"channels": 4, "kernel_size": (3, 3),
                                               "groups": 2, "use_bias": False}, (1,)),
    ("matmul", [(5,), (2, 5, 3)], {}, ()),
    ("matmul", [(2, 4, 5), (5,)], {}, ()),
    ("matmul", [(5,), (5,)], {}, ()),
    ("conv", [(2, 3, 9), (4, 3, 3)], {"pads": (2, 1), "strides": (2,)}, (1,)),
    ("conv", [(1, 2, 4, 5, 4), (3, 2, 2, 3, 2)], {"pads": (1, 0, 1, 0, 1, 0)}, ()),
    ("conv_transpose", [(1, 2, 5), (2, 3, 3), (3,)],
     {"strides": (2,), "output_padding": (1,), "use_bias": True}, (1, 2)),
    ("max_pool", [(1, 2, 5, 6, 4)], {"kernel_shape": (2, 2, 2), "dilations": (2, 1, 1)}, ()),
    ("avg_pool", [(1, 3, 7, 8)], {"kernel_shape": (3, 3), "strides": (2, 2),
                                  "pads": (1, 1, 1, 1), "count_include_pad": True,
                                  "ceil_mode": True}, ()),
    ("gelu", [(3, 7)], {"approximate": "tanh"}, ()),
    ("take", [(4, 5), (3,)], {"axis": None}, ()),
    ("split", [(2, 6, 3)], {"indices_or_sections": 3, "axis": -2}, ()),
    ("argmax", [(4, 7)], {"axis": (-1,)}, ()),
    ("broadcast_mod", [(2, 3), (2, 3)], {}, ()),
    ("layer_norm", [(4, 6), (6,)], {"axis": -1, "use_bias": False}, (1,)),
], ids=["depthwise", "conv-stride2", "conv-1x1-runtime-weight", "conv-dilated",
        "dense-3d", "dense-runtime-weight", "avgpool-ceil", "conv2d-grouped",
        "matmul-1d-left", "matmul-1d-right", "matmul-dot", "conv-1d", "conv-3d",
        "conv-transpose-1d", "maxpool-3d-dilated", "avgpool-include-pad-ceil", "gelu-tanh",
        "take-flat", "split-sections", "argmax-last", "mod-int", "layer-norm-no-bias"])
def test_op_variants(case, rng):
    op, shapes, attrs, params = case
    dtypes = {"take": {1: "int32"}, "argmax": {0: "int32"},
              "broadcast_mod": {0: "int32", 1: "int32"}}.get(op)
    (got, want), lib = _build_both(op, shapes, attrs, params, rng, (-6, 6) if dtypes else None,
                                   dtypes)
    assert lib.stats()["num_fallback_kernels"] == 0, lib.stats()["unsupported_ops"]
    np.testing.assert_allclose(got[0], want[0], rtol=2e-5, atol=2e-5)


def test_op_without_rule_falls_back_and_is_reported(rng):
    (got, want), lib = _build_both("det", [(2, 3, 3)], {}, (), rng, None)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    s = lib.stats()
    assert s["num_fallback_kernels"] == 1 and s["fallback_ops"] == ["det"]
    assert "no llvm lowering rule" in s["unsupported_ops"]["det"]


def _llvm_and_reference(y, values, dtype):
    shape = {n: v.shape for n, v in values.items()}
    lib = nnvm.compiler.build(y, target="llvm", shape=shape, dtype=dtype)
    ref = nnvm.compiler.build(y, target="reference", shape=shape, dtype=dtype)
    return lib, lib.run(**values)[0], ref.run(**values)[0]


@pytest.mark.parametrize("case", ["clip-nan", "left-shift-range", "right-shift-range",
                                  "fmod-inf", "tanh-tiny"])
def test_numpy_edge_semantics(case):
    """Inputs where C/LLVM semantics differ from NumPy's (the reference): NaN through clip,
    shifts by a negative amount or >= the bit width, fmod by infinity, tanh near 0."""
    a, b = sym.Variable("a"), sym.Variable("b")
    f32 = np.array([np.nan, -np.nan, 1e6, -3.0, 0.5], "float32")
    ints = np.array([-8, 4, -1, 7, -5], "int32")
    shifts = np.array([-1, 32, 100, -64, 3], "int32")
    y, values, dtype = {
        "clip-nan": (sym.clip(a, a_min=-448.0, a_max=448.0), {"a": f32}, "float32"),
        "left-shift-range": (sym.broadcast_left_shift(a, b), {"a": ints, "b": shifts}, "int32"),
        "right-shift-range": (sym.broadcast_right_shift(a, b), {"a": ints, "b": shifts},
                              "int32"),
        "fmod-inf": (sym.broadcast_fmod(a, b), {"a": np.array([3, -1, np.inf, 2, 0], "float32"),
                                                "b": np.array([np.inf, -np.inf, 2, 0, 5],
                                                              "float32")}, "float32"),
        "tanh-tiny": (sym.tanh(a), {"a": np.array([4.6e-4, -1e-6, 0.06, -0.07, 3.0],
                                                  "float32")}, "float32"),
    }[case]
    lib, got, want = _llvm_and_reference(y, values, {k: dtype for k in values})
    assert lib.stats()["num_fallback_kernels"] == 0
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)


def test_string_tensors_stay_on_reference_kernels():
    """Strings have no DLPack type: their ops run reference kernels and their buffers are
    object arrays, while the numeric ops of the same graph still compile."""
    a, b = sym.Variable("a"), sym.Variable("b")
    y = sym.cast(sym.broadcast_equal(a, b), dtype="float32") * 2.0
    values = {"a": np.array(["x", "yz", ""], dtype=object),
              "b": np.array(["x", "y", ""], dtype=object)}
    lib, got, want = _llvm_and_reference(y, values, {"a": "string", "b": "string"})
    np.testing.assert_array_equal(got, [2.0, 0.0, 2.0])
    np.testing.assert_array_equal(got, want)
    s = lib.stats()
    assert s["fallback_ops"] == ["broadcast_equal"] and "string" in \
        s["unsupported_ops"]["broadcast_equal"]


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_half_softmax_accumulates_in_float32(op):
    """float16 softmax sums its row in float32 and rounds each elementwise step to float16,
    as the reference (NumPy) and the ONNX suite's expected outputs do. topi's rule summed in
    float16: fp16 attention was an ulp off on 1-10% of its elements, a 256-wide row worse."""
    data = np.random.default_rng(3).uniform(-4, 4, (8, 256)).astype("float16")
    lib, got, want = _llvm_and_reference(getattr(sym, op)(sym.Variable("a")), {"a": data},
                                         {"a": "float16"})
    assert got.dtype == np.float16 and lib.stats()["num_fallback_kernels"] == 0
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                               rtol=1e-3, atol=1e-3 if op == "log_softmax" else 0)


def test_concat_of_rotated_halves_stays_in_bounds():
    """RotaryEmbedding's tail: two halves of a head, each a broadcast product of a (b, s, 1, d)
    cache and a slice, concatenated then reshaped, all one kernel. topi's concat loaded the
    untaken branch at a negative index; on AVX-512 (znver4) LLVM then returned garbage
    (1e23). Each branch now reads a clamped, in-bounds index."""
    x, c, s = sym.Variable("x"), sym.Variable("c"), sym.Variable("s")
    x4 = sym.reshape(x, shape=(2, 3, 4, 8))
    lo = sym.strided_slice(x4, begin=(0, 0, 0, 0), end=(2, 3, 4, 4))
    hi = sym.strided_slice(x4, begin=(0, 0, 0, 4), end=(2, 3, 4, 8))
    real = sym.broadcast_sub(sym.broadcast_mul(c, lo), sym.broadcast_mul(s, hi))
    imag = sym.broadcast_add(sym.broadcast_mul(s, lo), sym.broadcast_mul(c, hi))
    y = sym.reshape(sym.concatenate(real, imag, axis=3), shape=(2, 3, 32))
    rng = np.random.default_rng(0)
    values = {"x": rng.standard_normal((2, 3, 32)).astype("float32"),
              "c": rng.standard_normal((2, 3, 1, 4)).astype("float32"),
              "s": rng.standard_normal((2, 3, 1, 4)).astype("float32")}
    lib, got, want = _llvm_and_reference(y, values, {k: "float32" for k in values})
    assert lib.stats()["num_fallback_kernels"] == 0
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
