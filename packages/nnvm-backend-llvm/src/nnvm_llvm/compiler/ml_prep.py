"""The ai.onnx.ml preprocessing ops compiled for llvm: ``binarizer``, ``imputer``, ``scaler``
(the forms the ONNX frontend does not already rewrite into core ops), ``feature_vectorizer``
and ``one_hot_encoder`` over integer categories.

Why: scikit-learn pipelines put these in front of the model (SimpleImputer, Binarizer,
ColumnTransformer's concatenation, OneHotEncoder); each was a NumPy host step between
compiled kernels, costing more than the kernels around it. They are plain elementwise TE
computes; per-feature constants (imputed values, offsets, scales, categories) are picked by
a balanced ``Select`` tree on the feature index, float32 or float64 as the reference
computes them.
"""

from __future__ import annotations

import numpy as np
from tvm import te, tirx

from nnvm.errors import NNVMError, format_error

from . import lowering
from .lowering import Lowering


def pick(values, index, dtype: str):
    """``values[index]`` for a constant list: a balanced ``Select`` tree (one constant when
    all values are equal)."""
    values = list(values)
    if all(v == values[0] or (v != v and values[0] != values[0]) for v in values):
        return tirx.const(values[0], dtype)

    def tree(lo, hi):
        if hi - lo == 1:
            return tirx.const(values[lo], dtype)
        mid = (lo + hi) // 2
        return tirx.Select(index < mid, tree(lo, mid), tree(mid, hi))
    return tree(0, len(values))


def _per_feature(values, f: int, default: float):
    """One value per feature from ``values`` (none: ``default``; one: broadcast), or None."""
    v = list(values) or [default]
    if len(v) == 1:
        return v * f
    return v if len(v) == f else None


def _features(shape) -> int:
    return int(shape[-1]) if shape else 1


def _binarizer(attrs, ins, outs, ctx):
    x = ins[0]
    one, zero = tirx.const(1, x.dtype), tirx.const(0, x.dtype)
    thr = tirx.const(attrs["threshold"], x.dtype)
    return te.compute(x.shape, lambda *i: tirx.Select(x[i] > thr, one, zero), name=ctx.name)


def _imputer_supports(attrs, shapes):
    x = shapes[0] if shapes else None
    if x is None:
        return "imputer with an unknown input shape"
    return None


def _imputer(attrs, ins, outs, ctx):
    x = ins[0]
    floats = "float" in str(x.dtype)
    f = _features(x.shape)
    values = attrs["imputed_value_floats"] if floats else attrs["imputed_value_int64s"]
    fill = _per_feature(values, f, 0.0) if values else None
    if fill is None:  # the reference raises at run time, onnxruntime when it loads the model
        raise NNVMError(format_error(
            f"llvm lowering of imputer '{ctx.name}'", f"imputed values for a {x.dtype} input",
            f"1 or {f} (one per feature)", len(values),
            fix="Fix the exporter output: imputed_value_floats for float inputs, "
                "imputed_value_int64s for integer ones"))
    replaced = attrs["replaced_value_float"] if floats else attrs["replaced_value_int64"]

    def compute(*i):
        v = x[i]
        hit = te.isnan(v) if floats and np.isnan(replaced) else \
            v == tirx.const(replaced, x.dtype)
        return tirx.Select(hit, pick(fill, i[-1] if x.shape else 0, x.dtype), v)
    return te.compute(x.shape, compute, name=ctx.name)


def _scaler_supports(attrs, shapes):
    x = shapes[0] if shapes else None
    if x is None:
        return "scaler with an unknown input shape"
    f = _features(x)
    if _per_feature(attrs["offset"], f, 0.0) is None or \
            _per_feature(attrs["scale"], f, 1.0) is None:
        return "scaler whose offset/scale do not match the features"
    return None


def _scaler(attrs, ins, outs, ctx):
    """``(float32(x) - offset) * scale`` in float32, as the reference."""
    x = ins[0]
    f = _features(x.shape)
    offset = np.asarray(_per_feature(attrs["offset"], f, 0.0), np.float32).tolist()
    scale = np.asarray(_per_feature(attrs["scale"], f, 1.0), np.float32).tolist()

    def compute(*i):
        k = i[-1] if x.shape else 0
        return (x[i].astype("float32") - pick(offset, k, "float32")) * pick(scale, k, "float32")
    return te.compute(x.shape, compute, name=ctx.name)


def _fv_supports(attrs, shapes):
    if any(s is None for s in shapes):
        return "feature_vectorizer with an unknown input shape"
    return None


def _feature_vectorizer(attrs, ins, outs, ctx):
    """Inputs as (N, -1) float32 columns, each cut or zero-padded to its dimension, side by
    side."""
    dims = [int(d) for d in attrs["inputdimensions"]]
    out_shape = outs[0][0]
    starts = np.concatenate([[0], np.cumsum(dims)]).tolist()

    def column(x, n, c):
        shape = [int(d) for d in x.shape]
        width = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        if c >= width:
            return None
        if len(shape) <= 1:
            return x[n].astype("float32")
        idx, rest = [], c
        for d in reversed(shape[1:]):
            idx.append(rest % d)
            rest = rest // d
        return x[(n, *reversed(idx))].astype("float32")

    def compute(n, j):
        out = tirx.const(0.0, "float32")
        for x, d, s in zip(ins, dims, starts):
            shape = [int(v) for v in x.shape]
            width = int(np.prod(shape[1:])) if len(shape) > 1 else 1
            for c in range(min(d, width)):
                out = tirx.Select(j == s + c, column(x, n, c), out)
        return out
    return te.compute(tuple(out_shape), compute, name=ctx.name)


def _ohe_supports(attrs, shapes):
    if attrs["cats_strings"]:
        return "one_hot_encoder over strings (llvm kernels take numbers)"
    if not attrs["zeros"]:
        return "one_hot_encoder with zeros=0 (an unknown value is an error, raised on the host)"
    return None


def _one_hot_encoder(attrs, ins, outs, ctx):
    x = ins[0]
    cats = [int(c) for c in attrs["cats_int64s"]]
    one, zero = tirx.const(1.0, "float32"), tirx.const(0.0, "float32")

    def compute(*i):
        v = x[i[:-1]].astype("int64")  # floats truncate, as int() in the reference
        return tirx.Select(v == pick(cats, i[-1], "int64"), one, zero)
    return te.compute(tuple(outs[0][0]), compute, name=ctx.name)


_RULES = {
    "binarizer": (_binarizer, None),
    "imputer": (_imputer, _imputer_supports),
    "scaler": (_scaler, _scaler_supports),
    "feature_vectorizer": (_feature_vectorizer, _fv_supports),
    "one_hot_encoder": (_one_hot_encoder, _ohe_supports),
}


def install() -> None:
    """Add the rules unless the table already lowers the ops (its own rule wins)."""
    for name, (rule, supports) in _RULES.items():
        if name not in lowering.LOWERINGS:
            lowering.LOWERINGS[name] = Lowering(rule, "injective", None, supports)

