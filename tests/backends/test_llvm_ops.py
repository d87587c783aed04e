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


def test_every_lowering_rule_has_a_case():
    assert sorted(set(LOWERINGS) - set(CASES)) == []


def _build_both(op, shapes, attrs, param_idx, rng, value_range):
    names = [f"in{i}" for i in range(len(shapes))]
    lo, hi = value_range or (-2.0, 2.0)
    values = {n: rng.uniform(lo, hi, s).astype("float32") for n, s in zip(names, shapes)}
    dtype = {n: "float32" for n in names}
    if op == "where":
        values["in0"] = values["in0"] > 0
        dtype["in0"] = "bool"
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
    shapes, attrs, params, value_range = CASES[op]
    (got, want), _ = _build_both(op, shapes, attrs, params, rng, value_range)
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
], ids=["depthwise", "conv-stride2", "conv-1x1-runtime-weight", "conv-dilated",
        "dense-3d", "dense-runtime-weight", "avgpool-ceil"])
def test_op_variants(case, rng):
    op, shapes, attrs, params = case
    (got, want), _ = _build_both(op, shapes, attrs, params, rng, None)
    np.testing.assert_allclose(got[0], want[0], rtol=2e-5, atol=2e-5)


def test_grouped_conv_falls_back_and_is_reported(rng):
    (got, want), lib = _build_both(
        "conv2d", [(1, 4, 6, 6), (4, 2, 3, 3)],
        {"channels": 4, "kernel_size": (3, 3), "groups": 2, "use_bias": False}, (1,), rng, None)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    s = lib.stats()
    assert s["num_fallback_kernels"] == 1 and s["fallback_ops"] == ["conv2d"]
    assert "groups=2" in s["unsupported_ops"]["conv2d"]
