"""Classical machine-learning ops: ONNX's ``ai.onnx.ml`` domain (what skl2onnx writes).

Why a family of its own: scikit-learn pipelines exported by skl2onnx are tree ensembles, linear
models, SVMs and preprocessing steps whose semantics (binary-class conventions, post
transforms, label lookup) are fixed by onnxruntime, the reference runtime of that domain.
Each op here is one ONNX ml op with the same attributes, and its NumPy kernel follows
onnxruntime where the ONNX text is vague (noted per op). They are host (NumPy) steps on the
native targets: the work is table lookups and tree walks over a few rows, not kernels.

Trees are held in the layout of ONNX ``TreeEnsemble`` (ai.onnx.ml opset 5): interior nodes
with a feature, a split, a comparison mode and two children, each child either a node or a
leaf; leaves as (leaf, target, weight) entries so a leaf may feed several targets (the legacy
TreeEnsembleClassifier's per-class weights). The frontend converts the legacy attribute lists
into this layout.

ZipMap has no op: its output (a sequence of maps) stays the (N, C) score tensor in the graph,
and the ONNX frontend regroups it into a list of ``{label: score}`` dicts at the boundary.
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError, TypeInferenceError
from ..op import OpPattern, OpSet
from ..params import Param

defs = OpSet("ml")

OPAQUE = OpPattern.OPAQUE
POST_TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")
MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ",
         "BRANCH_MEMBER")


# -- shared helpers -----------------------------------------------------------------------------

def _rows(x) -> np.ndarray:
    """Features as (N, F): onnxruntime treats a 1-D input as one row."""
    x = np.asarray(x)
    return x.reshape(1, -1) if x.ndim == 1 else x.reshape(x.shape[0], -1)


def _batch(s) -> int | None:
    if s is None:
        return None
    return 1 if len(s) <= 1 else s[0]


def _float_of(dtype: str | None) -> str:
    """Scores are float32 unless the features are float64 (onnxruntime's rule)."""
    return "float64" if dtype == "float64" else "float32"


def _probit(v):
    """onnxruntime's ComputeProbit: sqrt(2) * erfinv(2p - 1) by Winitzki's approximation."""
    x = 2.0 * v - 1.0
    sgn = np.where(x < 0, -1.0, 1.0)
    w = (1.0 - x) * (1.0 + x)
    with np.errstate(divide="ignore", invalid="ignore"):
        log = np.log(w)
        a = 2.0 / (np.pi * 0.147) + 0.5 * log
        r = sgn * np.sqrt(-a + np.sqrt(a * a - log / 0.147))
    return 1.41421356 * np.where(w == 0, 0.0, r)


def _softmax_zero(s):
    """SOFTMAX_ZERO: softmax that keeps exact zeros at zero (onnxruntime ComputeSoftmaxZero)."""
    out = np.empty_like(s)
    for i, row in enumerate(s):
        m = row.max()
        zero = np.abs(row) <= 1e-7
        v = np.where(zero, row * np.exp(-m), np.exp(row - m))
        total = v.sum()
        out[i] = 0.5 if total == 0 else v / total
    return out


def post_transform(scores: np.ndarray, mode: str) -> np.ndarray:
    """The ONNX ml post transforms on (N, C) scores, in float64."""
    s = np.asarray(scores, dtype=np.float64)
    if mode == "LOGISTIC":
        return 1.0 / (1.0 + np.exp(-s))
    if mode == "SOFTMAX":
        e = np.exp(s - s.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if mode == "SOFTMAX_ZERO":
        return _softmax_zero(s)
    if mode == "PROBIT":
        return _probit(s)
    return s


def write_scores(scores: np.ndarray, mode: str, add_second_class: int = -1) -> np.ndarray:
    """onnxruntime's ``write_scores``: the post transform on two or more columns; a single
    column is expanded to two by ``add_second_class`` (0/1: all weights positive,
    (1 - t, t) with t = sigmoid(s) for LOGISTIC, else s; 2/3: mixed weights, (-s, s), or
    (sigmoid(-s), sigmoid(s)) for LOGISTIC), and PROBIT keeps one column."""
    s = np.asarray(scores, dtype=np.float64)
    if s.shape[1] != 1:
        return post_transform(s, mode)
    if mode == "PROBIT":
        return _probit(s)
    if add_second_class in (0, 1):
        t = post_transform(s, mode) if mode == "LOGISTIC" else s
        return np.concatenate([1.0 - t, t], axis=1)
    if add_second_class in (2, 3):
        pair = np.concatenate([-s, s], axis=1)
        return post_transform(pair, mode) if mode == "LOGISTIC" else pair
    return s


def _labels(attrs) -> tuple[list, str]:
    """(class labels, label dtype) of a classifier: int64 ids or strings."""
    strs = attrs.get("classlabels_strings") or ()
    if strs:
        return list(strs), "string"
    return list(attrs.get("classlabels_ints") or ()), "int64"


def _label_array(labels: list, picks, dtype: str) -> np.ndarray:
    picked = [labels[int(i)] for i in np.asarray(picks).reshape(-1)]
    if dtype == "string":
        out = np.empty(len(picked), dtype=object)
        out[:] = picked
        return out
    return np.asarray(picked, dtype=np.int64).reshape(-1)


def _check_numeric(attrs, ins, outs, name: str):
    t = ins[0]
    if t is not None and t in ("string", "bool"):
        raise TypeInferenceError(f"{name} takes numeric features; got {t}")


def _label_info(attrs):
    labels, kind = _labels(attrs)
    if not labels:
        raise ShapeError("a classifier needs classlabels_ints or classlabels_strings; got "
                         "neither. Re-export the model with its class labels")
    return labels, kind


def _classifier_dtype(attrs, ins, outs):
    _check_numeric(attrs, ins, outs, "the classifier")
    return ins, [_labels(attrs)[1], "float32"]


def _classifier_shape(width):
    """Shape rule of classifiers: labels (N,) and scores (N, width(attrs, classes, F))."""
    def rule(attrs, ins, outs):
        labels, _ = _label_info(attrs)
        s = ins[0]
        if s is None:
            return ins, outs
        return ins, [(_batch(s),), (_batch(s), width(attrs, len(labels), s[-1] if s else 1))]
    return rule


def _same_rows_shape(width):
    """Shape rule for (N, F) -> (N, width(attrs, F)) ops (width None = unknown)."""
    def rule(attrs, ins, outs):
        s = ins[0]
        if s is None:
            return ins, outs
        if len(s) > 2:
            raise ShapeError(f"features must be (N, F) or (F,); got {s}")
        f = s[-1] if s else 1
        return ins, [(_batch(s), width(attrs, f))]
    return rule


# -- preprocessing ------------------------------------------------------------------------------

def _per_feature(values, f: int, what: str) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    if v.size not in (1, f):
        raise ShapeError(f"{what} has {v.size} values; expected 1 or one per feature ({f})")
    return v


def _scaler_ref(attrs, x):
    x = np.asarray(x)
    f = x.shape[-1] if x.ndim else 1
    offset = _per_feature(attrs["offset"] or (0.0,), f, "offset")
    scale = _per_feature(attrs["scale"] or (1.0,), f, "scale")
    return ((x.astype(np.float32) - offset.astype(np.float32)) *
            scale.astype(np.float32)).astype(np.float32)


defs.op("scaler", doc="ONNX ml Scaler: (x - offset) * scale per feature (one value or one "
            "per feature), output float32 whatever the input type.",
            params=[Param("offset", "floats", (), "subtracted first"),
                    Param("scale", "floats", (), "then multiplied")],
            shape=lambda attrs, ins, outs: (ins, [ins[0]]),
            dtype=lambda attrs, ins, outs: (ins, ["float32"]),
            reference=_scaler_ref, pattern=OPAQUE, support_level=6)


def _normalizer_ref(attrs, x):
    x = np.asarray(x)
    rows = _rows(x).astype(np.float64)
    norm = attrs["norm"]
    if norm == "MAX":  # onnxruntime divides by the signed maximum
        div = rows.max(axis=1, keepdims=True)
    elif norm == "L1":
        div = np.abs(rows).sum(axis=1, keepdims=True)
    else:
        div = np.sqrt(np.square(rows).sum(axis=1, keepdims=True))
    out = rows / np.where(div == 0, 1.0, div)
    return out.reshape(x.shape).astype(np.float32)


defs.op("normalizer", doc="ONNX ml Normalizer: each row divided by its maximum, L1 or L2 "
            "norm (a zero divisor leaves the row as it is); float32 output.",
            params=[Param("norm", "str", "MAX", "which norm", ("MAX", "L1", "L2"))],
            shape=lambda attrs, ins, outs: (ins, [ins[0]]),
            dtype=lambda attrs, ins, outs: (ins, ["float32"]),
            reference=_normalizer_ref, pattern=OPAQUE, support_level=6)


defs.op("binarizer", doc="ONNX ml Binarizer: 1 where x > threshold, else 0 (same dtype).",
            params=[Param("threshold", "float", 0.0, "strictly greater is 1")],
            shape=lambda attrs, ins, outs: (ins, [ins[0]]),
            dtype=lambda attrs, ins, outs: (ins, [ins[0]]),
            reference=lambda attrs, x: (np.asarray(x) > attrs["threshold"]).astype(
                np.asarray(x).dtype),
            pattern=OPAQUE, support_level=6)


def _imputer_ref(attrs, x):
    x = np.asarray(x)
    floats = x.dtype.kind == "f"
    values = attrs["imputed_value_floats"] if floats else attrs["imputed_value_int64s"]
    replaced = attrs["replaced_value_float"] if floats else attrs["replaced_value_int64"]
    f = x.shape[-1] if x.ndim else 1
    fill = np.broadcast_to(np.asarray(values, dtype=x.dtype), (f,)) if len(values) in (1, f) \
        else None
    if fill is None:
        raise ShapeError(f"imputer has {len(values)} imputed values for {f} features; expected "
                         "1 or one per feature")
    hit = np.isnan(x) if floats and np.isnan(replaced) else x == replaced
    return np.where(hit, fill, x).astype(x.dtype)


defs.op("imputer", doc="ONNX ml Imputer: replace `replaced_value` (NaN by default for "
            "floats) with the per-feature imputed value.",
            params=[Param("imputed_value_floats", "floats", (), "for float inputs"),
                    Param("imputed_value_int64s", "ints", (), "for integer inputs"),
                    Param("replaced_value_float", "float", float("nan"), "value to replace"),
                    Param("replaced_value_int64", "int", 0, "value to replace (integers)")],
            shape=lambda attrs, ins, outs: (ins, [ins[0]]),
            dtype=lambda attrs, ins, outs: (ins, [ins[0]]),
            reference=_imputer_ref, pattern=OPAQUE, support_level=6)


def _afe_shape(attrs, ins, outs):
    x, idx = ins
    if x is None or idx is None:
        return ins, outs
    k = int(np.prod(idx)) if idx else 1
    return ins, [(1, k) if len(x) <= 1 else (*x[:-1], k)]


def _afe_ref(attrs, x, indices):
    x = np.asarray(x)
    idx = np.asarray(indices, dtype=np.int64).reshape(-1)
    n = x.shape[-1] if x.ndim else 1
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ShapeError(f"array_feature_extractor: indices {idx.tolist()} out of range for "
                         f"a last axis of {n}")
    out = x[..., idx]
    return out.reshape((1, idx.size) if x.ndim <= 1 else (*x.shape[:-1], idx.size))


defs.op("array_feature_extractor", doc="ONNX ml ArrayFeatureExtractor: select `indices` "
            "along the last axis (a 1-D input gives one row, as in onnxruntime).",
            inputs=("data", "indices"), shape=_afe_shape,
            dtype=lambda attrs, ins, outs: (ins, [ins[0]]),
            reference=_afe_ref, pattern=OPAQUE, support_level=6)


def _fv_shape(attrs, ins, outs):
    dims = attrs["inputdimensions"]
    if len(dims) != len(ins):
        raise ShapeError(f"inputdimensions names {len(dims)} inputs; got {len(ins)}")
    if ins[0] is None:
        return ins, outs
    return ins, [(_batch(ins[0]), int(sum(dims)))]


def _fv_ref(attrs, *xs):
    cols = []
    for x, d in zip(xs, attrs["inputdimensions"]):
        a = np.asarray(x, dtype=np.float32)
        a = a.reshape(-1, 1) if a.ndim == 1 else a.reshape(a.shape[0], -1)
        b = np.zeros((a.shape[0], d), dtype=np.float32)
        b[:, :min(d, a.shape[1])] = a[:, :d]
        cols.append(b)
    return np.concatenate(cols, axis=1)


defs.op("feature_vectorizer", doc="ONNX ml FeatureVectorizer: concatenate inputs into "
            "(N, sum(inputdimensions)) float32, each cut or zero-padded to its dimension.",
            inputs=lambda attrs: [f"arg{i}" for i in range(attrs["num_args"])],
            params=[Param("num_args", "int", doc="number of inputs"),
                    Param("inputdimensions", "ints", doc="columns taken from each input")],
            shape=_fv_shape, dtype=lambda attrs, ins, outs: (ins, ["float32"]),
            reference=_fv_ref, pattern=OPAQUE, support_level=6)


def _categories(attrs) -> list:
    return list(attrs["cats_strings"]) if attrs["cats_strings"] else \
        list(attrs["cats_int64s"])


def _ohe_ref(attrs, x):
    x = np.asarray(x)
    cats = _categories(attrs)
    keys = [str(v) if isinstance(v, bytes) else v for v in x.reshape(-1).tolist()]
    if not attrs["cats_strings"]:
        keys = [int(k) for k in keys]
    pos = {c: i for i, c in enumerate(cats)}
    out = np.zeros((len(keys), len(cats)), dtype=np.float32)
    for r, k in enumerate(keys):
        j = pos.get(k)
        if j is not None:
            out[r, j] = 1.0
        elif not attrs["zeros"]:
            raise ShapeError(f"one_hot_encoder: value {k!r} is no category and zeros=0. "
                             "Set zeros=1 to encode unknown values as all zeros")
    return out.reshape(*x.shape, len(cats))


defs.op("one_hot_encoder", doc="ONNX ml OneHotEncoder: a trailing axis of one float per "
            "category (ints or strings); unknown values are all zeros when zeros=1.",
            params=[Param("cats_int64s", "ints", (), "integer categories"),
                    Param("cats_strings", "strs", (), "string categories"),
                    Param("zeros", "int", 1, "1: unknown values encode as zeros; 0: error")],
            shape=lambda attrs, ins, outs: (ins, [None if ins[0] is None else
                                                  (*ins[0], len(_categories(attrs)))]),
            dtype=lambda attrs, ins, outs: (ins, ["float32"]),
            reference=_ohe_ref, pattern=OPAQUE, support_level=6)


def _le_kind(values) -> str:
    if values and all(isinstance(v, str) for v in values):
        return "string"
    return "any"


def _le_dtype(attrs, ins, outs):
    return ins, [attrs["value_dtype"]]


def _le_ref(attrs, x):
    x = np.asarray(x)
    table = dict(zip(attrs["keys"], attrs["values"]))
    default = attrs["default"]
    flat = x.reshape(-1).tolist()
    if x.dtype.kind == "f":
        out = [table.get(v, default) if not np.isnan(v) else
               next((val for k, val in table.items() if isinstance(k, float) and np.isnan(k)),
                    default) for v in flat]
    else:
        out = [table.get(v.decode() if isinstance(v, bytes) else v, default) for v in flat]
    dt = attrs["value_dtype"]
    if dt == "string":
        arr = np.empty(len(out), dtype=object)
        arr[:] = out
        return arr.reshape(x.shape)
    return np.asarray(out, dtype=np.dtype(dt)).reshape(x.shape)


defs.op("label_encoder", doc="ONNX ml LabelEncoder: map each element through keys -> "
            "values (strings, ints or floats); unmapped elements get `default`.",
            params=[Param("keys", "any", doc="the keys (list)"),
                    Param("values", "any", doc="the values (list, same length)"),
                    Param("default", "any", doc="value of unmapped elements"),
                    Param("value_dtype", "dtype", doc="output dtype")],
            shape=lambda attrs, ins, outs: (ins, [ins[0]]), dtype=_le_dtype,
            reference=_le_ref, pattern=OPAQUE, support_level=6)


# -- linear models ------------------------------------------------------------------------------

def _coef_matrix(attrs, f: int) -> np.ndarray:
    c = np.asarray(attrs["coefficients"], dtype=np.float64)
    if c.size % f:
        raise ShapeError(f"{c.size} coefficients do not split into rows of {f} features")
    return c.reshape(-1, f)


def _linear_scores(attrs, x) -> np.ndarray:
    rows = _rows(x).astype(np.float64)
    w = _coef_matrix(attrs, rows.shape[1])
    s = rows @ w.T
    b = np.asarray(attrs["intercepts"], dtype=np.float64)
    return s + b if b.size else s


def _lin_reg_ref(attrs, x):
    s = _linear_scores(attrs, x)
    return post_transform(s, attrs["post_transform"]).astype(_float_of(np.asarray(x).dtype.name))


defs.op("linear_regressor", doc="ONNX ml LinearRegressor: x @ coefficients.T + intercepts "
            "for `targets` outputs, then the post transform.",
            params=[Param("coefficients", "floats", doc="targets x features, row-major"),
                    Param("intercepts", "floats", (), "one per target"),
                    Param("targets", "int", 1, "number of outputs"),
                    Param("post_transform", "str", "NONE", "applied to the scores",
                          POST_TRANSFORMS)],
            shape=_same_rows_shape(lambda attrs, f: attrs["targets"]),
            dtype=lambda attrs, ins, outs: (ins, [_float_of(ins[0])]),
            reference=_lin_reg_ref, pattern=OPAQUE, support_level=6)


def _lin_cls_ref(attrs, x):
    """onnxruntime: the label comes from the raw scores (arg-max; one column: s > 0 picks the
    second of two labels, else 1 / 0), then the scores are transformed; one column with two
    labels becomes (1 - t, t) (``write_scores``)."""
    labels, kind = _label_info(attrs)
    s = _linear_scores(attrs, x)
    add = 1 if len(labels) == 2 else -1
    if s.shape[1] > 1:
        picks = np.argmax(s, axis=1)
    else:
        picks = (s[:, 0] > 0).astype(np.int64)
        if len(labels) != 2:
            labels = ["0", "1"] if kind == "string" else [0, 1]
    mode = attrs["post_transform"]
    if add == 1 and s.shape[1] == 1 and mode == "PROBIT":
        # onnxruntime's binary PROBIT scores are unusable (overlapping buffer writes): here
        # they are (1 - probit(s), probit(s))
        s, mode = post_transform(s, mode), "NONE"
    z = write_scores(s, mode, add)
    return _label_array(labels, picks, kind), z.astype(np.float32)


def _lin_cls_width(attrs, n_cls, f):
    rows = len(attrs["intercepts"])
    if not rows:
        raise ShapeError("linear_classifier needs one intercept per class (onnxruntime counts "
                         "the classes by them); got none")
    return 2 if rows == 1 and n_cls == 2 else rows


defs.op("linear_classifier", doc="ONNX ml LinearClassifier: per-class scores x @ W.T + b, "
            "the post transform, and the arg-max label. With one coefficient row and two "
            "labels the scores are (-s, s), as in onnxruntime.",
            outputs=("label", "scores"),
            params=[Param("coefficients", "floats", doc="classes x features, row-major"),
                    Param("intercepts", "floats", (), "one per class"),
                    Param("classlabels_ints", "ints", (), "integer labels"),
                    Param("classlabels_strings", "strs", (), "string labels"),
                    Param("multi_class", "int", 0, "accepted (onnxruntime ignores it)"),
                    Param("post_transform", "str", "NONE", "applied to the scores",
                          POST_TRANSFORMS)],
            shape=_classifier_shape(_lin_cls_width), dtype=_classifier_dtype, reference=_lin_cls_ref,
            pattern=OPAQUE, support_level=6)


# -- support vector machines --------------------------------------------------------------------

def _kernel(attrs, x, sv) -> np.ndarray:
    """(N, V) kernel values of rows x against support vectors sv."""
    params = list(attrs["kernel_params"]) + [0.0, 0.0, 0.0]
    gamma, coef0, degree = params[0], params[1], params[2]
    kind = attrs["kernel_type"]
    if kind == "RBF":
        d = (x * x).sum(1)[:, None] - 2 * x @ sv.T + (sv * sv).sum(1)[None, :]
        return np.exp(-gamma * np.maximum(d, 0.0))
    dot = x @ sv.T
    if kind == "POLY":
        return (gamma * dot + coef0) ** int(degree)
    if kind == "SIGMOID":
        return np.tanh(gamma * dot + coef0)
    return dot


def _svm_reg_ref(attrs, x):
    rows = _rows(x).astype(np.float64)
    coef = np.asarray(attrs["coefficients"], dtype=np.float64)
    if attrs["n_supports"] > 0:
        sv = np.asarray(attrs["support_vectors"], dtype=np.float64).reshape(
            attrs["n_supports"], -1)
        s = _kernel(attrs, rows, sv) @ coef
    else:
        s = rows @ coef
    s = s + attrs["rho"][0]
    if attrs["one_class"]:
        s = np.where(s > 0, 1.0, -1.0)
    s = post_transform(s[:, None], attrs["post_transform"])
    return s.astype(np.float32)


_SVM_PARAMS = [Param("coefficients", "floats", doc="dual coefficients (or linear weights)"),
               Param("kernel_type", "str", "LINEAR", "kernel",
                     ("LINEAR", "POLY", "RBF", "SIGMOID")),
               Param("kernel_params", "floats", (), "gamma, coef0, degree"),
               Param("rho", "floats", doc="intercepts"),
               Param("support_vectors", "floats", (), "support vectors, row-major"),
               Param("post_transform", "str", "NONE", "applied to the scores",
                     POST_TRANSFORMS)]

defs.op("svm_regressor", doc="ONNX ml SVMRegressor: sum of coefficient * kernel(x, sv) + "
            "rho (one_class: the sign as +-1).",
            params=_SVM_PARAMS + [Param("n_supports", "int", 0, "number of support vectors"),
                                  Param("one_class", "int", 0, "one-class SVM output")],
            shape=_same_rows_shape(lambda attrs, f: 1),
            dtype=lambda attrs, ins, outs: (ins, ["float32"]),
            reference=_svm_reg_ref, pattern=OPAQUE, support_level=6)


def _pairwise_probability(k: int, r: np.ndarray) -> np.ndarray:
    """libsvm's multiclass_probability (pairwise coupling), as onnxruntime runs it."""
    q = np.empty((k, k))
    for t in range(k):
        q[t, t] = (r[:t, t] ** 2).sum() + (r[t + 1:, t] ** 2).sum()
        q[t, :t] = q[:t, t]
        q[t, t + 1:] = -r[t + 1:, t] * r[t, t + 1:]
    p = np.full(k, 1.0 / k)
    eps = 0.005 / k
    for _ in range(max(100, k)):
        qp = q @ p
        pqp = float(p @ qp)
        if np.abs(qp - pqp).max() < eps:
            break
        for t in range(k):
            diff = (-qp[t] + pqp) / q[t, t]
            p[t] += diff
            pqp = (pqp + diff * (diff * q[t, t] + 2 * qp[t])) / (1 + diff) ** 2
            p /= 1 + diff
            qp = (qp + diff * q[t, :]) / (1 + diff)
    return p


def _svm_ovo(attrs, rows, n_cls):
    """(votes (N, C), pairwise scores (N, C(C-1)/2)) of a one-vs-one SVC."""
    per_class = list(attrs["vectors_per_class"])
    starts = np.concatenate([[0], np.cumsum(per_class)[:-1]]).astype(int)
    n_sv = int(sum(per_class))
    sv = np.asarray(attrs["support_vectors"], dtype=np.float64).reshape(n_sv, -1)
    coefs = np.asarray(attrs["coefficients"], dtype=np.float64).reshape(-1, n_sv)
    k = _kernel(attrs, rows, sv)
    votes = np.zeros((rows.shape[0], n_cls))
    scores = []
    pair = 0
    for i in range(n_cls):
        si, ci = starts[i], per_class[i]
        for j in range(i + 1, n_cls):
            sj, cj = starts[j], per_class[j]
            s = (k[:, si:si + ci] @ coefs[j - 1, si:si + ci] +
                 k[:, sj:sj + cj] @ coefs[i, sj:sj + cj] + attrs["rho"][pair])
            votes[:, i] += s > 0
            votes[:, j] += s <= 0
            scores.append(s)
            pair += 1
    return votes, np.stack(scores, axis=1)


def _svm_cls_ref(attrs, x):
    """onnxruntime's SVMClassifier: features as float32; the label is the class with the
    most one-vs-one votes (a linear SVC: the best score, with its binary rule); scores are
    the pairwise decision values, or Platt-coupled probabilities."""
    labels, kind = _label_info(attrs)
    rows = _rows(x).astype(np.float32).astype(np.float64)
    n_cls = len(labels)
    mode = attrs["post_transform"]
    coef = np.asarray(attrs["coefficients"], dtype=np.float64)
    if not attrs["vectors_per_class"]:  # linear SVC: one weight row per class
        scores = rows @ coef.reshape(n_cls, -1).T + attrs["rho"][0]
        picks = np.argmax(scores, axis=1)
        if n_cls == 2:
            best = scores.max(axis=1)
            second = (best >= 0.5) if coef.min() >= 0 else (best > 0)
            picks = np.where(second, 1, picks)
        return _label_array(labels, picks, kind), write_scores(scores, mode).astype(np.float32)
    votes, scores = _svm_ovo(attrs, rows, n_cls)
    picks = np.argmax(votes, axis=1)
    if attrs["prob_a"]:
        pa, pb = attrs["prob_a"], attrs["prob_b"]
        probs = np.empty((rows.shape[0], n_cls))
        for n in range(rows.shape[0]):
            r = np.zeros((n_cls, n_cls))
            pair = 0
            for i in range(n_cls):
                for j in range(i + 1, n_cls):
                    v = 1.0 / (1.0 + np.exp(scores[n, pair] * pa[pair] + pb[pair]))
                    r[i, j] = min(max(v, 1e-7), 1 - 1e-7)
                    r[j, i] = 1 - r[i, j]
                    pair += 1
            probs[n] = _pairwise_probability(n_cls, r)
        return _label_array(labels, picks, kind), write_scores(probs, mode).astype(np.float32)
    add = (2 if mode == "NONE" else 0) if n_cls <= 2 else -1
    return _label_array(labels, picks, kind), write_scores(scores, mode, add).astype(np.float32)


def _svm_cls_width(attrs, c, f):
    if attrs["prob_a"] or not attrs["vectors_per_class"]:
        return c
    pairs = c * (c - 1) // 2
    return 2 if pairs == 1 and attrs["post_transform"] != "PROBIT" else pairs


defs.op("svm_classifier", doc="ONNX ml SVMClassifier: one-vs-one SVC (votes decide the "
            "label; scores are the pairwise decision values, or Platt-coupled probabilities "
            "when prob_a/prob_b are given) or a linear SVC (one score per class).",
            outputs=("label", "scores"),
            params=_SVM_PARAMS + [
                Param("vectors_per_class", "ints", (), "support vectors of each class"),
                Param("prob_a", "floats", (), "Platt scaling slopes, one per class pair"),
                Param("prob_b", "floats", (), "Platt scaling offsets"),
                Param("classlabels_ints", "ints", (), "integer labels"),
                Param("classlabels_strings", "strs", (), "string labels")],
            shape=_classifier_shape(_svm_cls_width), dtype=_classifier_dtype, reference=_svm_cls_ref,
            pattern=OPAQUE, support_level=6)


# -- tree ensembles -----------------------------------------------------------------------------

_TREE_PARAMS = [
    Param("nodes_featureids", "ints", doc="feature compared at each interior node"),
    Param("nodes_splits", "floats", doc="threshold of each interior node"),
    Param("nodes_modes", "ints", doc="comparison: 0 <=, 1 <, 2 >=, 3 >, 4 ==, 5 !=, 6 member"),
    Param("nodes_truenodeids", "ints", doc="child taken when the comparison holds"),
    Param("nodes_trueleafs", "ints", doc="1 when that child is a leaf index"),
    Param("nodes_falsenodeids", "ints", doc="child taken otherwise"),
    Param("nodes_falseleafs", "ints", doc="1 when that child is a leaf index"),
    Param("nodes_missing_value_tracks_true", "ints", (), "NaN takes the true branch"),
    Param("membership_values", "floats", (), "member sets of mode-6 nodes, NaN-separated"),
    Param("tree_roots", "ints", doc="root of each tree: an interior node, or a leaf when "
          "the root is a leaf (root_is_leaf)"),
    Param("roots_are_leaves", "ints", (), "per tree: 1 when tree_roots names a leaf"),
    Param("leaf_entries", "ints", doc="for each (leaf, target, weight) entry: its leaf"),
    Param("leaf_targetids", "ints", doc="...its target"),
    Param("leaf_weights", "floats", doc="...its weight"),
    Param("n_targets", "int", 1, "number of output columns (regression)"),
    Param("aggregate_function", "str", "SUM", "over trees", ("AVERAGE", "SUM", "MIN", "MAX")),
    Param("base_values", "floats", (), "added per target before the post transform"),
    Param("post_transform", "str", "NONE", "applied last", POST_TRANSFORMS),
    Param("single_precision", "bool", True, "compare in float32 (float thresholds)"),
]


def _member_sets(attrs) -> dict[int, np.ndarray]:
    modes = attrs["nodes_modes"]
    values = np.asarray(attrs["membership_values"], dtype=np.float64)
    sets, cur, it = {}, [], iter(np.nonzero(np.asarray(modes) == 6)[0].tolist())
    for v in values:
        if np.isnan(v):
            node = next(it, None)
            if node is None:
                raise ShapeError("membership_values holds more sets than there are member "
                                 "nodes")
            sets[node] = np.asarray(cur)
            cur = []
        else:
            cur.append(v)
    node = next(it, None)
    if node is not None:
        sets[node] = np.asarray(cur)
        if next(it, None) is not None:
            raise ShapeError("membership_values holds fewer sets than there are member nodes")
    return sets


_COMPARE = (np.less_equal, np.less, np.greater_equal, np.greater, np.equal, np.not_equal)
#: id-keyed cache of the arrays a node's tree attributes describe (see ``_prepared``)
_PREPARED: dict[tuple, tuple] = {}


def _prepared(attrs, n_targets: int) -> dict:
    """The tree attributes as NumPy arrays, built once per node: converting thousands of
    attribute values on every run cost ~50x onnxruntime's time on a 20-tree forest. Keyed by
    the identity of the attribute tuples (kept alive by the cache, so ids stay unique)."""
    parts = (attrs["nodes_featureids"], attrs["nodes_splits"], attrs["leaf_weights"],
             attrs["leaf_entries"])
    key = tuple(id(p) for p in parts) + (n_targets, attrs["aggregate_function"])
    hit = _PREPARED.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], parts)):
        return hit[1]
    mode = np.asarray(attrs["nodes_modes"], dtype=np.int64)
    feat = np.asarray(attrs["nodes_featureids"], dtype=np.int64)
    split = np.asarray(attrs["nodes_splits"], dtype=np.float64)
    prep = {"feat": feat, "split64": split, "split32": split.astype(np.float32),
            "mode": mode, "modes": sorted(set(mode.tolist()) - {6}),
            "tid": np.asarray(attrs["nodes_truenodeids"], dtype=np.int64),
            "tleaf": np.asarray(attrs["nodes_trueleafs"]) != 0,
            "fid": np.asarray(attrs["nodes_falsenodeids"], dtype=np.int64),
            "fleaf": np.asarray(attrs["nodes_falseleafs"]) != 0,
            "miss": np.asarray(attrs["nodes_missing_value_tracks_true"] or
                               [0] * len(feat)) != 0,
            "members": _member_sets(attrs) if (mode == 6).any() else {},
            "roots": np.asarray(attrs["tree_roots"], dtype=np.int64),
            "root_leaf": np.asarray(attrs["roots_are_leaves"] or [0] * len(attrs["tree_roots"]),
                                    bool)}
    prep["weight"], prep["has"] = _leaf_table(attrs, n_targets)
    if len(_PREPARED) > 256:
        _PREPARED.clear()
    _PREPARED[key] = (parts, prep)
    return prep


def _leaf_table(attrs, n_targets):
    """(weight, has) per (leaf, target): entries of one leaf combined by the aggregate."""
    entries = attrs["leaf_entries"]
    nleaf = max(max(entries, default=-1), max(attrs["tree_roots"], default=-1),
                max(attrs["nodes_truenodeids"], default=-1),
                max(attrs["nodes_falsenodeids"], default=-1)) + 1
    weight = np.zeros((nleaf, n_targets))
    has = np.zeros((nleaf, n_targets), bool)
    agg = attrs["aggregate_function"]
    if agg in ("MIN", "MAX"):
        weight[:] = np.inf if agg == "MIN" else -np.inf
    for leaf, t, w in zip(entries, attrs["leaf_targetids"], attrs["leaf_weights"]):
        if agg == "MIN":
            weight[leaf, t] = min(weight[leaf, t], w)
        elif agg == "MAX":
            weight[leaf, t] = max(weight[leaf, t], w)
        else:
            weight[leaf, t] += w
        has[leaf, t] = True
    return weight, has


def _tree_leaves(attrs, prep, x) -> np.ndarray:
    """(N, trees) leaf index reached by every row in every tree (vectorised walk)."""
    single = attrs["single_precision"] and x.dtype != np.float64
    rows = _rows(x).astype(np.float32 if single else np.float64)
    split = prep["split32"] if single else prep["split64"]
    feat, mode = prep["feat"], prep["mode"]
    if feat.size and (feat.max() >= rows.shape[1] or feat.min() < 0):
        raise ShapeError(f"the trees read feature {int(feat.max())}; the input has "
                         f"{rows.shape[1]} features")
    n, trees = rows.shape[0], len(prep["roots"])
    if prep["modes"] in ([0], []) and not prep["members"]:
        return _walk_unified(_unified(prep), rows, single)
    pos = np.tile(prep["roots"], (n, 1))
    at_leaf = np.tile(prep["root_leaf"], (n, 1))
    r_idx = np.repeat(np.arange(n)[:, None], trees, axis=1)
    for _ in range(len(feat) + 1):
        live = ~at_leaf
        if not live.any():
            return pos
        node, r = pos[live], r_idx[live]
        v, s = rows[r, feat[node]], split[node]
        if prep["modes"] == [0] and not prep["members"]:
            cond = v <= s
        else:
            m = mode[node]
            cond = np.zeros(node.shape, bool)
            for code in prep["modes"]:
                sel = m == code
                cond[sel] = _COMPARE[code](v[sel], s[sel])
            for k in np.unique(node[m == 6]):
                sel = node == k
                cond[sel] = np.isin(v[sel], prep["members"].get(int(k), np.empty(0)))
        cond |= prep["miss"][node] & np.isnan(v)
        pos[live] = np.where(cond, prep["tid"][node], prep["fid"][node])
        at_leaf[live] = np.where(cond, prep["tleaf"][node], prep["fleaf"][node])
    raise ShapeError("the trees have a cycle (a walk visited more nodes than there are)")


def _unified(prep) -> dict:
    """One node table for interior nodes and leaves (leaf k is node ``n + k``, looping to
    itself with a threshold of +inf), and the number of interior levels. Why: the masked walk
    re-selected the rows still inside a tree at every level (a dozen NumPy calls per level);
    with leaves that loop, every level is the same four calls on all rows and trees, and the
    walk stops after the deepest tree's depth (a 1-tree classifier: ~110 -> ~35 us)."""
    got = prep.get("unified")
    if got is not None:
        return got
    feat, n = prep["feat"], len(prep["feat"])
    leaves = prep["weight"].shape[0]
    here = n + np.arange(leaves)
    child = {k: np.concatenate([np.where(prep[k[0] + "leaf"], n + prep[k], prep[k]), here])
             for k in ("tid", "fid")}
    u = {"feat": np.concatenate([feat, np.zeros(leaves, np.int64)]),
         "split64": np.concatenate([prep["split64"], np.full(leaves, np.inf)]),
         "split32": np.concatenate([prep["split32"], np.full(leaves, np.inf, np.float32)]),
         "tid": child["tid"], "fid": child["fid"],
         "miss": np.concatenate([prep["miss"], np.zeros(leaves, bool)]) if prep["miss"].any()
         else None,
         "start": np.where(prep["root_leaf"], n + prep["roots"], prep["roots"]), "n": n}
    level, depth = np.unique(u["start"][u["start"] < n]), 0
    while level.size:  # interior levels, breadth first, every tree at once
        depth += 1
        if depth > n:
            raise ShapeError("the trees have a cycle (a walk visited more nodes than there are)")
        nxt = np.concatenate([u["tid"][level], u["fid"][level]])
        level = np.unique(nxt[nxt < n])
    u["depth"] = depth
    prep["unified"] = u
    return u


def _walk_unified(u, rows, single: bool) -> np.ndarray:
    """(N, trees) leaf index of every row in every tree over the unified table (LEQ splits)."""
    split = u["split32"] if single else u["split64"]
    pos = np.broadcast_to(u["start"], (rows.shape[0], len(u["start"])))
    r = np.arange(rows.shape[0])[:, None]
    for _ in range(u["depth"]):
        v = rows[r, u["feat"][pos]]
        cond = v <= split[pos]
        if u["miss"] is not None:
            cond |= u["miss"][pos] & np.isnan(v)
        pos = np.where(cond, u["tid"][pos], u["fid"][pos])
    return pos - u["n"]


def _tree_raw(attrs, x, n_targets):
    """(sums (N, T), has-a-score mask (N, T)) aggregated over the trees."""
    prep = _prepared(attrs, n_targets)
    leaves = _tree_leaves(attrs, prep, x)
    trees = leaves.shape[1]
    agg = attrs["aggregate_function"]
    got, seen = prep["weight"][leaves], prep["has"][leaves]  # (N, trees, T)
    if agg == "MIN":
        out = np.where(seen, got, np.inf).min(axis=1)
    elif agg == "MAX":
        out = np.where(seen, got, -np.inf).max(axis=1)
    else:
        out = np.where(seen, got, 0.0).sum(axis=1)
        if agg == "AVERAGE":
            out = out / max(trees, 1)
    any_seen = seen.any(axis=1)
    return np.where(any_seen, out, 0.0), any_seen


def _add_base(attrs, scores):
    base = np.asarray(attrs["base_values"], dtype=np.float64)
    return scores + base[: scores.shape[1]] if base.size else scores


def _tree_ensemble_ref(attrs, x):
    x = np.asarray(x)
    s, _ = _tree_raw(attrs, x, attrs["n_targets"])
    out = post_transform(_add_base(attrs, s), attrs["post_transform"])
    return out.astype(attrs["dtype"])


def _tree_check(attrs):
    n = len(attrs["nodes_featureids"])
    for name in ("nodes_splits", "nodes_modes", "nodes_truenodeids", "nodes_trueleafs",
                 "nodes_falsenodeids", "nodes_falseleafs"):
        if len(attrs[name]) != n:
            raise ShapeError(f"{name} has {len(attrs[name])} entries; nodes_featureids has "
                             f"{n}: every interior-node list must have one per node")
    k = len(attrs["leaf_entries"])
    if len(attrs["leaf_targetids"]) != k or len(attrs["leaf_weights"]) != k:
        raise ShapeError(f"leaf_entries, leaf_targetids and leaf_weights must have equal "
                         f"lengths; got {k}, {len(attrs['leaf_targetids'])}, "
                         f"{len(attrs['leaf_weights'])}")


def _tree_shape(attrs, ins, outs):
    _tree_check(attrs)
    s = ins[0]
    return ins, [None if s is None else (_batch(s), attrs["n_targets"])]


defs.op("tree_ensemble", doc="Tree ensemble regression (ONNX ml TreeEnsemble and "
            "TreeEnsembleRegressor): walk every tree, aggregate the leaf weights per target "
            "(SUM, AVERAGE, MIN, MAX), add base_values, post transform.",
            params=_TREE_PARAMS + [Param("dtype", "dtype", "float32", "output dtype")],
            shape=_tree_shape, dtype=lambda attrs, ins, outs: (ins, [attrs["dtype"]]),
            reference=_tree_ensemble_ref, pattern=OPAQUE, support_level=6)


def _tree_cls_ref(attrs, x):
    """onnxruntime's TreeEnsembleClassifier. Three or more classes: base values are added,
    the label is the best class among those with a score (raw, before the transform). Two
    classes follow its TreeAggregatorClassifier (``_two_classes``)."""
    labels, kind = _label_info(attrs)
    n_cls = len(labels)
    s, seen = _tree_raw(attrs, np.asarray(x), n_cls)
    base = np.asarray(attrs["base_values"], dtype=np.float64)
    mode = attrs["post_transform"]
    if n_cls > 2:
        if base.size:
            s, seen = s + base[:n_cls], seen | (np.arange(n_cls) < base.size)
        picks = np.argmax(np.where(seen, s, -np.inf), axis=1)
        return _label_array(labels, picks, kind), post_transform(s, mode).astype(np.float32)
    binary = len(set(attrs["leaf_targetids"])) == 1  # one class column carries every weight
    positive = min(attrs["leaf_weights"], default=0.0) >= 0
    picks, z = _two_classes(s, seen, base, mode, binary, positive)
    if not binary and kind == "int64":  # onnxruntime returns 1 / 0 here, not the labels
        labels = [0, 1]
    return _label_array(labels, picks, kind), z.astype(np.float32)


def _two_classes(s, seen, base, mode, binary, positive):
    """(label indices, (N, 2) scores) of a two-class tree ensemble, as onnxruntime 1.31
    computes them (checked case by case against it): which base values exist and whether
    class 1 got a leaf weight decide, per row, between a (class 0, class 1) pair and a
    single score expanded by ``write_scores``; a class no leaf weight reached scores 0."""
    s0, s1 = s[:, 0].copy(), s[:, 1].copy()
    h0, h1 = seen[:, 0], seen[:, 1]
    add = np.full(len(s0), -1)
    single = np.zeros(len(s0), bool)
    if base.size == 2:
        moved = base[1] + s0
        s0, s1 = np.where(h1, -moved, s0 + base[0]), np.where(h1, moved, s1 + base[1])
    elif base.size == 1:
        s0, single = s0 + base[0], ~h1
    else:
        add[:], single = 3, ~h1
    pos = np.where(~single & h1, s1, np.where(h0, s0, 0.0))
    if binary:
        win = pos > (0.5 if positive else 0.0)
        add = np.where(win, 0, 1) if positive else np.where(win, 2, 3)
    else:
        win = pos > 0
    s0 = np.where(h0, s0, 0.0)
    z = post_transform(np.stack([s0, np.where(h1, s1, 0.0)], axis=1), mode)
    for code in np.unique(add[single]):
        rows = single & (add == code)
        one = write_scores(s0[rows, None], mode, int(code))
        z[rows] = 0.0  # a PROBIT single column leaves the second one zero
        z[rows, :one.shape[1]] = one  # (np.pad here cost more than the tree walk)
    return win.astype(np.int64), z


def _tree_cls_width(attrs, n_cls, f):
    _tree_check(attrs)
    return n_cls


defs.op("tree_ensemble_classifier", doc="ONNX ml TreeEnsembleClassifier: per-class sums "
            "of leaf weights over the trees plus base_values, the post transform, and the "
            "arg-max label (onnxruntime's binary conventions for a single score column).",
            outputs=("label", "scores"),
            params=_TREE_PARAMS + [Param("classlabels_ints", "ints", (), "integer labels"),
                                   Param("classlabels_strings", "strs", (), "string labels")],
            shape=_classifier_shape(_tree_cls_width), dtype=_classifier_dtype,
            reference=_tree_cls_ref, pattern=OPAQUE, support_level=6)
