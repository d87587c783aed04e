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
