"""``ai.onnx.ml`` converters (what skl2onnx writes) onto the ops of ``nnvm/ops/ml.py``.

The legacy TreeEnsembleClassifier/Regressor attribute lists (nodes addressed by (tree id,
node id), a LEAF mode, per-leaf class weights) are rewritten into the TreeEnsemble (opset 5)
layout the core op takes: interior nodes and leaves numbered separately, children flagged as
leaf or node. ZipMap becomes a ``MapSeqValue``: the score tensor plus its keys, regrouped
into ``[{label: score}, ...]`` where the model's outputs leave the graph.
"""

from __future__ import annotations

import numpy as np

from ..errors import OnnxImportError, format_error
from ..registry import converter

ML = "ai.onnx.ml"
_MODES = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4,
          "BRANCH_NEQ": 5, "BRANCH_MEMBER": 6}
_POST = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")
_AGGREGATE = ("AVERAGE", "SUM", "MIN", "MAX")


def _floats(ctx, name: str, default=()):
    """A float list attribute, or its ``*_as_tensor`` (opset 3) twin (double precision)."""
    if ctx.has_attr(name + "_as_tensor"):
        return [float(v) for v in np.asarray(ctx.attr(name + "_as_tensor")).reshape(-1)]
    return list(ctx.attr(name, list(default)))


def _labels(ctx, ints: str, strings: str) -> dict:
    return {"classlabels_ints": tuple(ctx.attr(ints, [])),
            "classlabels_strings": tuple(ctx.attr(strings, []))}


@converter("Scaler", since=1, requires=("scaler",), domain=ML)
def _scaler(ctx, node):
    """float32 features: (x - offset) * scale as broadcast ops, which the native targets
    compile (the same float32 arithmetic as onnxruntime); other dtypes: the scaler op."""
    x, offset, scale = ctx.input(0), ctx.attr("offset", []), ctx.attr("scale", [])
    if x.dtype != "float32" or x.rank is None or x.rank == 0:
        return [ctx.op("scaler", x, offset=tuple(offset), scale=tuple(scale))]
    y = ctx.op("broadcast_sub", x, ctx.constant(np.asarray(offset or [0.0], np.float32)))
    return [ctx.op("broadcast_mul", y, ctx.constant(np.asarray(scale or [1.0], np.float32)))]


@converter("Normalizer", since=1, requires=("normalizer",), domain=ML)
def _normalizer(ctx, node):
    return [ctx.op("normalizer", ctx.input(0), norm=ctx.attr("norm", "MAX"))]


@converter("Binarizer", since=1, requires=("binarizer",), domain=ML)
def _binarizer(ctx, node):
    return [ctx.op("binarizer", ctx.input(0), threshold=float(ctx.attr("threshold", 0.0)))]


@converter("Imputer", since=1, requires=("imputer",), domain=ML)
def _imputer(ctx, node):
    return [ctx.op("imputer", ctx.input(0),
                   imputed_value_floats=tuple(_floats(ctx, "imputed_value_floats")),
                   imputed_value_int64s=tuple(ctx.attr("imputed_value_int64s", [])),
                   replaced_value_float=float(ctx.attr("replaced_value_float", 0.0)),
                   replaced_value_int64=int(ctx.attr("replaced_value_int64", 0)))]


@converter("ArrayFeatureExtractor", since=1, requires=("array_feature_extractor",), domain=ML)
def _array_feature_extractor(ctx, node):
    """Constant indices into a (..., F) tensor: a ``take`` on the last axis (compiled on the
    native targets); otherwise the op, which also covers onnxruntime's 1-D case."""
    x = ctx.input(0)
    if not ctx.is_const(1) or x.shape is None or len(x.shape) < 2:
        return [ctx.op("array_feature_extractor", x, ctx.input(1))]
    idx = np.asarray(ctx.const(1), np.int64).reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= x.shape[-1]):
        raise OnnxImportError(format_error(ctx.where, "ArrayFeatureExtractor indices out of "
                                           "range", f"in [0, {x.shape[-1]})", idx.tolist(),
                                           fix="Fix the exporter output"))
    return [ctx.op("take", x, ctx.constant(idx), axis=len(x.shape) - 1)]


@converter("FeatureVectorizer", since=1, requires=("feature_vectorizer",), domain=ML)
def _feature_vectorizer(ctx, node):
    xs = [ctx.input(i) for i in range(ctx.num_inputs)]
    return [ctx.op("feature_vectorizer", *xs,
                   inputdimensions=tuple(ctx.attr("inputdimensions")))]


@converter("OneHotEncoder", since=1, requires=("one_hot_encoder",), domain=ML)
def _one_hot_encoder(ctx, node):
    return [ctx.op("one_hot_encoder", ctx.input(0), cats_int64s=tuple(ctx.attr("cats_int64s", [])),
                   cats_strings=tuple(ctx.attr("cats_strings", [])),
                   zeros=int(ctx.attr("zeros", 1)))]


_LE_DEFAULTS = {"string": "_Unused", "int64": -1, "float32": -0.0}


def _le_kind(values) -> str:
    if isinstance(values, np.ndarray):
        return "string" if values.dtype.kind in "OUS" else values.dtype.name
    return "string" if values and isinstance(values[0], str) else \
        ("int64" if values and isinstance(values[0], int) else "float32")


@converter("LabelEncoder", since=1, requires=("label_encoder",), domain=ML)
def _label_encoder_v1(ctx, node):
    """Opset 1: strings -> their index in classes_strings, or indices -> strings."""
    classes = list(ctx.attr("classes_strings", []))
    if ctx.dtype(0) == "string":
        return [ctx.op("label_encoder", ctx.input(0), keys=classes,
                       values=list(range(len(classes))),
                       default=int(ctx.attr("default_int64", -1)), value_dtype="int64")]
    return [ctx.op("label_encoder", ctx.input(0), keys=list(range(len(classes))),
                   values=classes, default=ctx.attr("default_string", "_Unused"),
                   value_dtype="string")]


@converter("LabelEncoder", since=2, requires=("label_encoder",), domain=ML)
def _label_encoder(ctx, node):
    keys = values = None
    for suffix in ("strings", "int64s", "floats"):
        keys = keys if keys is not None else ctx.attr(f"keys_{suffix}", None)
        values = values if values is not None else ctx.attr(f"values_{suffix}", None)
    keys = keys if keys is not None else ctx.attr("keys_tensor", None)
    values = values if values is not None else ctx.attr("values_tensor", None)
    if keys is None or values is None or len(keys) != len(values):
        raise OnnxImportError(format_error(ctx.where, "LabelEncoder needs keys_* and values_* "
                                           "of equal length", got=(keys, values),
                              fix="Fix the exporter output"))
    kind = _le_kind(values)
    if ctx.has_attr("default_tensor"):
        default = np.asarray(ctx.attr("default_tensor")).reshape(-1)[0].item()
    else:
        name = {"string": "default_string", "int64": "default_int64"}.get(kind,
                                                                          "default_float")
        default = ctx.attr(name, _LE_DEFAULTS.get(kind, -0.0))
    as_list = [(v.decode() if isinstance(v, bytes) else v) for v in
               (keys.tolist() if isinstance(keys, np.ndarray) else list(keys))]
    vals = [(v.decode() if isinstance(v, bytes) else v) for v in
            (values.tolist() if isinstance(values, np.ndarray) else list(values))]
    if isinstance(default, bytes):
        default = default.decode()
    return [ctx.op("label_encoder", ctx.input(0), keys=as_list, values=vals, default=default,
                   value_dtype=kind)]


# -- linear models and SVMs ---------------------------------------------------------------------

@converter("LinearRegressor", since=1, requires=("linear_regressor",), domain=ML)
def _linear_regressor(ctx, node):
    """float32 (N, F) features, no post transform: a ``dense`` layer (compiled on the native
    targets, float32 as onnxruntime's GEMM); otherwise the op."""
    x, coef = ctx.input(0), ctx.attr("coefficients")
    targets, intercepts = int(ctx.attr("targets", 1)), list(ctx.attr("intercepts", []))
    if x.dtype == "float32" and x.shape is not None and len(x.shape) == 2 and \
            ctx.attr("post_transform", "NONE") == "NONE" and len(coef) == targets * x.shape[1]:
        w = np.asarray(coef, np.float32).reshape(targets, x.shape[1])
        b = np.broadcast_to(np.asarray(intercepts or [0.0], np.float32), (targets,))
        return [ctx.op("dense", x, ctx.constant(w), ctx.constant(np.array(b)), units=targets)]
    return [ctx.op("linear_regressor", ctx.input(0),
                   coefficients=tuple(ctx.attr("coefficients")),
                   intercepts=tuple(ctx.attr("intercepts", [])),
                   targets=int(ctx.attr("targets", 1)),
                   post_transform=ctx.attr("post_transform", "NONE"))]


@converter("LinearClassifier", since=1, requires=("linear_classifier",), domain=ML)
def _linear_classifier(ctx, node):
    return ctx.op_multi("linear_classifier", ctx.input(0),
                        coefficients=tuple(ctx.attr("coefficients")),
                        intercepts=tuple(ctx.attr("intercepts", [])),
                        multi_class=int(ctx.attr("multi_class", 0)),
                        post_transform=ctx.attr("post_transform", "NONE"),
                        **_labels(ctx, "classlabels_ints", "classlabels_strings"))


def _svm_attrs(ctx) -> dict:
    return {"coefficients": tuple(ctx.attr("coefficients", [])),
            "kernel_type": ctx.attr("kernel_type", "LINEAR"),
            "kernel_params": tuple(ctx.attr("kernel_params", [])),
            "rho": tuple(ctx.attr("rho", [])),
            "support_vectors": tuple(ctx.attr("support_vectors", [])),
            "post_transform": ctx.attr("post_transform", "NONE")}


@converter("SVMRegressor", since=1, requires=("svm_regressor",), domain=ML)
def _svm_regressor(ctx, node):
    return [ctx.op("svm_regressor", ctx.input(0), n_supports=int(ctx.attr("n_supports", 0)),
                   one_class=int(ctx.attr("one_class", 0)), **_svm_attrs(ctx))]


@converter("SVMClassifier", since=1, requires=("svm_classifier",), domain=ML)
def _svm_classifier(ctx, node):
    return ctx.op_multi("svm_classifier", ctx.input(0),
                        vectors_per_class=tuple(ctx.attr("vectors_per_class", [])),
                        prob_a=tuple(ctx.attr("prob_a", [])),
                        prob_b=tuple(ctx.attr("prob_b", [])),
                        **_labels(ctx, "classlabels_ints", "classlabels_strings"),
                        **_svm_attrs(ctx))


# -- tree ensembles -----------------------------------------------------------------------------

def _legacy_trees(ctx, prefix: str) -> dict:
    """TreeEnsembleClassifier/Regressor lists -> the core op's TreeEnsemble layout."""
    tree_ids = ctx.attr("nodes_treeids")
    node_ids = ctx.attr("nodes_nodeids")
    modes = ctx.attr("nodes_modes")
    feats = ctx.attr("nodes_featureids")
    values = _floats(ctx, "nodes_values", [0.0] * len(tree_ids))
    trues, falses = ctx.attr("nodes_truenodeids"), ctx.attr("nodes_falsenodeids")
    missing = ctx.attr("nodes_missing_value_tracks_true", [0] * len(tree_ids))
    interior, leaf = {}, {}
    for k, (t, n, m) in enumerate(zip(tree_ids, node_ids, modes)):
        (leaf if m == "LEAF" else interior)[(t, n)] = len(leaf if m == "LEAF" else interior)
    out = {name: [] for name in ("nodes_featureids", "nodes_splits", "nodes_modes",
                                 "nodes_truenodeids", "nodes_trueleafs", "nodes_falsenodeids",
                                 "nodes_falseleafs", "nodes_missing_value_tracks_true")}

    def child(t, n):
        if (t, n) in leaf:
            return leaf[(t, n)], 1
        if (t, n) in interior:
            return interior[(t, n)], 0
        raise OnnxImportError(format_error(ctx.where, f"tree {t} names node {n}, which it "
                                           "does not define", fix="Fix the exporter output"))

    for k, (t, n, m) in enumerate(zip(tree_ids, node_ids, modes)):
        if m == "LEAF":
            continue
        if m not in _MODES:
            raise OnnxImportError(format_error(ctx.where, f"unknown node mode '{m}'",
                                               "one of " + ", ".join(_MODES) + " or LEAF", m))
        tc, tl = child(t, trues[k])
        fc, fl = child(t, falses[k])
        for name, v in (("nodes_featureids", feats[k]), ("nodes_splits", values[k]),
                        ("nodes_modes", _MODES[m]), ("nodes_truenodeids", tc),
                        ("nodes_trueleafs", tl), ("nodes_falsenodeids", fc),
                        ("nodes_falseleafs", fl),
                        ("nodes_missing_value_tracks_true", missing[k] if k < len(missing)
                         else 0)):
            out[name].append(v)
    roots, root_leaf, seen = [], [], set()
    for t, n in zip(tree_ids, node_ids):  # a tree's root is its first node (onnxruntime)
        if t in seen:
            continue
        seen.add(t)
        idx, is_leaf = child(t, n)
        roots.append(idx)
        root_leaf.append(is_leaf)
    w_trees, w_nodes = ctx.attr(f"{prefix}_treeids"), ctx.attr(f"{prefix}_nodeids")
    w_ids = ctx.attr(f"{prefix}_ids")
    weights = _floats(ctx, f"{prefix}_weights")
    entries = []
    for t, n in zip(w_trees, w_nodes):
        idx, is_leaf = child(t, n)
        if not is_leaf:
            raise OnnxImportError(format_error(ctx.where, f"{prefix} weight on node {n} of "
                                               f"tree {t}, which is not a LEAF",
                                               fix="Fix the exporter output"))
        entries.append(idx)
    out = {k: tuple(v) for k, v in out.items()}
    double = ctx.has_attr("nodes_values_as_tensor") or ctx.dtype(0) == "float64"
    out.update(tree_roots=tuple(roots), roots_are_leaves=tuple(root_leaf),
               leaf_entries=tuple(entries), leaf_targetids=tuple(w_ids),
               leaf_weights=tuple(weights), base_values=tuple(_floats(ctx, "base_values")),
               post_transform=ctx.attr("post_transform", "NONE"),
               single_precision=not double)
    return out


@converter("TreeEnsembleRegressor", since=1, requires=("tree_ensemble",), domain=ML)
def _tree_ensemble_regressor(ctx, node):
    attrs = _legacy_trees(ctx, "target")
    return [ctx.op("tree_ensemble", ctx.input(0), n_targets=int(ctx.attr("n_targets", 1)),
                   aggregate_function=ctx.attr("aggregate_function", "SUM"),
                   dtype="float32", **attrs)]


@converter("TreeEnsembleClassifier", since=1, requires=("tree_ensemble_classifier",),
           domain=ML)
def _tree_ensemble_classifier(ctx, node):
    attrs = _legacy_trees(ctx, "class")
    return ctx.op_multi("tree_ensemble_classifier", ctx.input(0),
                        **_labels(ctx, "classlabels_int64s", "classlabels_strings"), **attrs)


def _tensor_list(ctx, name: str, default=None) -> list:
    if not ctx.has_attr(name):
        if default is None:
            raise OnnxImportError(format_error(ctx.where, f"required attribute '{name}' is "
                                               "missing", fix="Fix the exporter output"))
        return default
    return np.asarray(ctx.attr(name)).reshape(-1).tolist()


@converter("TreeEnsemble", since=5, requires=("tree_ensemble",), domain=ML)
def _tree_ensemble(ctx, node):
    """Opset 5: already the core layout; a root whose two children are the same leaf is a
    leaf root (the spec's encoding of a single-leaf tree)."""
    trues, falses = ctx.attr("nodes_truenodeids"), ctx.attr("nodes_falsenodeids")
    tleaf, fleaf = ctx.attr("nodes_trueleafs"), ctx.attr("nodes_falseleafs")
    roots, root_leaf = [], []
    for r in ctx.attr("tree_roots"):
        single = tleaf[r] and fleaf[r] and trues[r] == falses[r]
        roots.append(trues[r] if single else r)
        root_leaf.append(1 if single else 0)
    n_leaf = len(ctx.attr("leaf_targetids"))
    dtype = ctx.dtype(0)
    return [ctx.op("tree_ensemble", ctx.input(0),
                   nodes_featureids=tuple(ctx.attr("nodes_featureids")),
                   nodes_splits=tuple(_tensor_list(ctx, "nodes_splits")),
                   nodes_modes=tuple(int(m) for m in _tensor_list(ctx, "nodes_modes")),
                   nodes_truenodeids=tuple(trues), nodes_trueleafs=tuple(tleaf),
                   nodes_falsenodeids=tuple(falses), nodes_falseleafs=tuple(fleaf),
                   nodes_missing_value_tracks_true=tuple(
                       _tensor_list(ctx, "nodes_missing_value_tracks_true", [])),
                   membership_values=tuple(_tensor_list(ctx, "membership_values", [])),
                   tree_roots=tuple(roots), roots_are_leaves=tuple(root_leaf),
                   leaf_entries=tuple(range(n_leaf)),
                   leaf_targetids=tuple(ctx.attr("leaf_targetids")),
                   leaf_weights=tuple(_tensor_list(ctx, "leaf_weights")),
                   n_targets=int(ctx.attr("n_targets")),
                   aggregate_function=_AGGREGATE[int(ctx.attr("aggregate_function", 1))],
                   post_transform=_POST[int(ctx.attr("post_transform", 0))],
                   single_precision=dtype != "float64",
                   dtype=dtype if dtype in ("float32", "float64", "float16") else "float32")]


# -- ZipMap -------------------------------------------------------------------------------------

@converter("ZipMap", since=1, domain=ML)
def _zipmap(ctx, node):
    """A sequence of {label: score} maps, one per row: kept as the (N, C) tensor and its
    keys; the importer regroups it into dicts where it leaves the graph."""
    from ..importer import MapSeqValue

    keys = list(ctx.attr("classlabels_int64s", [])) or list(ctx.attr("classlabels_strings", []))
    x = ctx.input(0)
    shape = x.shape
    if shape is not None and (len(shape) != 2 or shape[1] != len(keys)):
        raise OnnxImportError(format_error(ctx.where, "ZipMap takes (N, classes) scores",
                                           f"(N, {len(keys)})", shape,
                                           fix="Give as many class labels as score columns"))
    return [MapSeqValue(node.output[0], x, keys)]
