"""ONNX-semantics elementwise math and indexing ops against the ONNX node test data."""

from __future__ import annotations

import numpy as np
import pytest

from test_ops_onnx_util import case_params, const, run_case


def _same(name, **fixed):
    """Adapter: the ONNX attributes map 1:1 (after renaming) onto op ``name``."""
    def adapt(attrs, ins):
        a = {fixed.get(k, k): v for k, v in attrs.items() if fixed.get(k, k) is not None}
        return name, a, [x for x in ins if x is not None]
    return adapt


def _mod(attrs, ins):
    return ("broadcast_fmod" if attrs.get("fmod") else "broadcast_mod"), {}, ins


def _bitshift(attrs, ins):
    return f"broadcast_{attrs['direction'].lower()}_shift", {}, ins


def _isinf(attrs, ins):
    return "isinf", {k: bool(v) for k, v in attrs.items()}, ins


MATH = {m: (t, _same(n)) for m, t, n in [
    ("erf", "Erf", "erf"), ("floor", "Floor", "floor"), ("ceil", "Ceil", "ceil"),
    ("round", "Round", "round"), ("sin", "Sin", "sin"), ("cos", "Cos", "cos"),
    ("tan", "Tan", "tan"), ("asin", "Asin", "asin"), ("acos", "Acos", "acos"),
    ("atan", "Atan", "atan"), ("sinh", "Sinh", "sinh"), ("cosh", "Cosh", "cosh"),
    ("asinh", "Asinh", "asinh"), ("acosh", "Acosh", "acosh"), ("atanh", "Atanh", "atanh"),
    ("reciprocal", "Reciprocal", "reciprocal"), ("softplus", "Softplus", "softplus"),
    ("softsign", "Softsign", "softsign"), ("hardswish", "HardSwish", "hard_swish"),
    ("mish", "Mish", "mish"), ("elu", "Elu", "elu"), ("selu", "Selu", "selu"),
    ("celu", "Celu", "celu"), ("hardsigmoid", "HardSigmoid", "hard_sigmoid"),
    ("thresholdedrelu", "ThresholdedRelu", "thresholded_relu"), ("gelu", "Gelu", "gelu"),
    ("swish", "Swish", "swish"), ("shrink", "Shrink", "shrink"), ("prelu", "PRelu", "prelu"),
    ("isnan", "IsNaN", "isnan"), ("and_", "And", "logical_and"), ("or_", "Or", "logical_or"),
    ("xor", "Xor", "logical_xor"), ("not_", "Not", "logical_not"),
    ("bitwiseand", "BitwiseAnd", "bitwise_and"), ("bitwiseor", "BitwiseOr", "bitwise_or"),
    ("bitwisexor", "BitwiseXor", "bitwise_xor"), ("bitwisenot", "BitwiseNot", "bitwise_not"),
    ("det", "Det", "det")]}
MATH.update({"mod": ("Mod", _mod), "bitshift": ("BitShift", _bitshift),
             "isinf": ("IsInf", _isinf)})


def _gather(name):
    return _same(name)


def _topk(attrs, ins):
    return "topk", {**attrs, "k": int(const(ins[1])[0])}, [ins[0]]


def _cum(name):
    def adapt(attrs, ins):
        return name, {**attrs, "axis": int(const(ins[1])[0])}, [ins[0]]
    return adapt


def _one_hot(attrs, ins):
    return "one_hot", {**attrs, "depth": int(const(ins[1])[0])}, [ins[0], ins[2]]


def _range(attrs, ins):
    return "range", {}, ins


def _tile(attrs, ins):
    return "tile", {"reps": const(ins[1])}, [ins[0]]


def _expand(attrs, ins):
    return "expand", {"shape": const(ins[1])}, [ins[0]]


def _trilu(attrs, ins):
    k = int(const(ins[1])[0]) if len(ins) > 1 and ins[1] is not None else 0
    return "trilu", {"upper": bool(attrs.get("upper", 1)), "k": k}, [ins[0]]


def _eye(attrs, ins):
    import onnx
    dt = attrs.get("dtype")
    name = "" if dt is None else np.dtype(onnx.helper.tensor_dtype_to_np_dtype(dt)).name
    return "eye_like", {"k": attrs.get("k", 0), "dtype": name}, ins


def _scatter(name):
    def adapt(attrs, ins):
        return name, attrs, ins
    return adapt


INDEXING = {
    "gather": ("Gather", _same("gather")),
    "gatherelements": ("GatherElements", _same("gather_elements")),
    "gathernd": ("GatherND", _same("gather_nd")),
    "scatterelements": ("ScatterElements", _scatter("scatter_elements")),
    "scatter": ("Scatter", _scatter("scatter_elements")),
    "scatternd": ("ScatterND", _scatter("scatter_nd")),
    "topk": ("TopK", _topk), "cumsum": ("CumSum", _cum("cumsum")),
    "cumprod": ("CumProd", _cum("cumprod")), "onehot": ("OneHot", _one_hot),
    "rangeop": ("Range", _range), "tile": ("Tile", _tile), "expand": ("Expand", _expand),
    "trilu": ("Trilu", _trilu), "eyelike": ("EyeLike", _eye),
    "reversesequence": ("ReverseSequence", _same("reverse_sequence")),
    "nonzero": ("NonZero", _same("non_zero")), "compress": ("Compress", _same("compress")),
    "unique": ("Unique", _same("unique")),
}


@pytest.mark.parametrize("case, adapter", case_params(MATH))
def test_math_matches_onnx(case, adapter):
    run_case(case, adapter)


@pytest.mark.parametrize("case, adapter", case_params(INDEXING))
def test_indexing_matches_onnx(case, adapter):
    run_case(case, adapter)


@pytest.mark.parametrize("dshape, ishape", [((300, 4), (50, 1)), ((5, 6, 7), (4, 3, 2)),
                                            ((4, 5, 6), (3, 3)), ((4, 5), (2,))])
def test_gather_nd_without_batch_dims_matches_elementwise_indexing(dshape, ishape):
    """The batch_dims=0 path (one fancy index) against indexing one tuple at a time, with
    negative indices."""
    from nnvm.ops.indexing import _gather_nd_ref

    rng = np.random.default_rng(len(dshape) + len(ishape))
    d = rng.standard_normal(dshape).astype("float32")
    m = ishape[-1]
    i = np.stack([rng.integers(-dshape[k], dshape[k], ishape[:-1]) for k in range(m)], -1)
    want = np.array([d[tuple(ix)] for ix in i.reshape(-1, m)]).reshape(
        i.shape[:-1] + d.shape[m:])
    np.testing.assert_array_equal(_gather_nd_ref({"batch_dims": 0}, d, i), want)
