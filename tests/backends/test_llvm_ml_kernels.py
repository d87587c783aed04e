"""ai.onnx.ml ops compiled on llvm (``compiler/ml_trees.py``, ``ml_linear.py``): no host step.

Every case builds a model with ``onnx.helper``, builds it for ``llvm``, asserts the ml node
became a kernel (no fallback), and compares the outputs with the reference target (the
NumPy kernels of ``nnvm.ops.ml``, which follow onnxruntime case by case: labels exactly,
scores to float32 rounding) and with onnxruntime itself when it is installed. Random
forests reach every branch mode, NaN with and without missing-value tracking, every
aggregate and post transform, several targets, batch 1 and 1000 and float64 input; ops
that stay on the host (BRANCH_MEMBER, string labels) must still run, with their reason in
``stats()``.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

import nnvm  # noqa: E402
from nnvm.backend import get_backend  # noqa: E402

REASON = get_backend("llvm", require_available=False).compiler_available()
if REASON is not None:
    pytest.skip(REASON, allow_module_level=True)

ML = "ai.onnx.ml"
MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]
POSTS = ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"]


# -- harness ------------------------------------------------------------------------------------

def _model(op_type, x_type, outputs, n_features, ml_opset=3, **attrs):
    node = helper.make_node(op_type, ["X"], [o[0] for o in outputs], domain=ML, **attrs)
    graph = helper.make_graph(
        [node], "ml", [helper.make_tensor_value_info("X", x_type, [None, n_features])],
        [helper.make_tensor_value_info(*o) for o in outputs])
    model = helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 21 if ml_opset >= 5 else 17), helper.make_opsetid(ML, ml_opset)])
    model.ir_version = 9 if ml_opset >= 4 else 8
    onnx.checker.check_model(model)
    return model


def _build(model, x, target):
    graph, params = nnvm.frontend.from_onnx(model, shape={"X": x.shape})
    return nnvm.compiler.build(graph, target=target, shape={"X": x.shape},
                               dtype={"X": x.dtype.name}, params=params)


def check(model, x, compiled=True, rtol=1e-5, atol=1e-5, oracle=True):
    """llvm against the reference target and (``oracle``) onnxruntime; returns the llvm
    build's stats."""
    lib = _build(model, x, "llvm")
    stats = lib.stats()
    if compiled:
        assert stats["num_fallback_kernels"] == 0, stats["unsupported_ops"]
    got = [np.asarray(v) for v in lib.run(X=x)]
    want = [np.asarray(v) for v in _build(model, x, "reference").run(X=x)]
    _same(got, want, rtol, atol)
    try:
        import onnxruntime as ort
    except ImportError:
        return stats  # onnxruntime absent: the reference comparison above still holds
    if not oracle:
        return stats
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    _same(got, [np.asarray(v) for v in sess.run(None, {"X": x})], rtol, atol)
    return stats


def _same(got, want, rtol, atol):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        if w.dtype.kind in "iuOUS":
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def forest(rng, n_trees, depth, n_features, prefix, n_out, modes=("BRANCH_LEQ",),
           missing=False, integer_splits=False, weights=(-1.0, 1.0), one_column=None):
    """Legacy TreeEnsemble* attribute lists of ``n_trees`` random, unbalanced trees: each
    leaf weights ``n_out`` columns (or only column ``one_column``)."""
    a = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes",
                         "nodes_values", "nodes_truenodeids", "nodes_falsenodeids",
                         "nodes_missing_value_tracks_true", f"{prefix}_treeids",
                         f"{prefix}_nodeids", f"{prefix}_ids", f"{prefix}_weights")}
    for tree in range(n_trees):
        count = [0]

        def grow(level):
            nid = count[0]
            count[0] += 1
            row = len(a["nodes_nodeids"])
            for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes",
                      "nodes_values", "nodes_truenodeids", "nodes_falsenodeids",
                      "nodes_missing_value_tracks_true"):
                a[k].append(0)
            a["nodes_treeids"][row], a["nodes_nodeids"][row] = tree, nid
            if level == depth or (level > 1 and rng.random() < 0.25):
                a["nodes_modes"][row] = "LEAF"
                cols = [one_column] if one_column is not None else range(n_out)
                for c in cols:
                    a[f"{prefix}_treeids"].append(tree)
                    a[f"{prefix}_nodeids"].append(nid)
                    a[f"{prefix}_ids"].append(int(c))
                    a[f"{prefix}_weights"].append(float(rng.uniform(*weights)))
                return nid
            a["nodes_modes"][row] = str(rng.choice(modes))
            a["nodes_featureids"][row] = int(rng.integers(n_features))
            a["nodes_values"][row] = float(rng.integers(-2, 3) if integer_splits else
                                           rng.normal())
            a["nodes_missing_value_tracks_true"][row] = int(missing and rng.random() < 0.5)
            a["nodes_truenodeids"][row] = grow(level + 1)
            a["nodes_falsenodeids"][row] = grow(level + 1)
            return nid
        grow(0)
    return a


def rows(rng, n, f, integers=False, nan=0.0, dtype=np.float32):
    x = rng.integers(-2, 3, (n, f)).astype(dtype) if integers else \
        rng.standard_normal((n, f)).astype(dtype)
    x[rng.random((n, f)) < nan] = np.nan
    return x


def regressor(rng, f, n_targets=1, dtype=TensorProto.FLOAT, **kw):
    trees = forest(rng, kw.pop("n_trees", 5), kw.pop("depth", 4), f, "target", n_targets,
                   **{k: kw.pop(k) for k in list(kw) if k in ("modes", "missing",
                                                              "integer_splits")})
    return _model("TreeEnsembleRegressor", dtype, [("Y", TensorProto.FLOAT, [None, n_targets])],
                  f, n_targets=n_targets, **trees, **kw)


def classifier(rng, f, labels, n_trees=5, depth=4, one_column=None, weights=(0.0, 1.0), **kw):
    trees = forest(rng, n_trees, depth, f, "class", len(labels), weights=weights,
                   one_column=one_column, **{k: kw.pop(k) for k in list(kw)
                                             if k in ("modes", "missing")})
    return _model("TreeEnsembleClassifier", TensorProto.FLOAT,
                  [("L", TensorProto.INT64, [None]),
                   ("S", TensorProto.FLOAT, [None, len(labels)])],
                  f, classlabels_int64s=list(labels), **trees, **kw)


@pytest.fixture
def rng():
    return np.random.default_rng(14)


@pytest.fixture(params=["code", "table"])
def walk(request, monkeypatch, tmp_path):
    """Run a tree test with each walk: trees as code (``CodeWalk``, small ensembles) and the
    constant node table (``TableWalk``, forced here by a code limit of 0; a private kernel
    cache, as the two kernels share their cache key)."""
    if request.param == "code":
        yield "code"
        return
    from nnvm_llvm.compiler import cache, ml_trees

    monkeypatch.setattr(ml_trees, "MAX_NODES", 0)
    monkeypatch.setenv("NNVM_CACHE_DIR", str(tmp_path))
    cache.clear_memory()
    yield "table"
    cache.clear_memory()


# -- the corpus's scikit-learn models ----------------------------------------------------------

def _corpus():
    """benchmarks/corpus/corpus.py (manifest, cache folder, input generators)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "corpus" / "corpus.py"
    spec = importlib.util.spec_from_file_location("nnvm_corpus_for_ml_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


CORPUS = _corpus()
SKL = [e for e in CORPUS.models() if e["id"].startswith("skl-")]


def _table(value):
    """ZipMap outputs (a list of {label: score}) as a (rows, labels) array."""
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return np.array([[d[k] for k in sorted(d)] for d in value], np.float32)
    return np.asarray(value)


@pytest.mark.parametrize("entry", SKL, ids=[e["id"] for e in SKL])
def test_corpus_skl_model_compiles_and_matches(entry):
    """Every ml op of the cached skl2onnx models is a kernel, and its outputs match the
    reference target and onnxruntime on the manifest's inputs."""
    path = CORPUS.model_path(entry)
    if not path.exists():
        pytest.skip(f"{entry['id']} is not in the corpus cache (run benchmarks/corpus/fetch.py)")
    from nnvm.runtime.structured_outputs import regroup, structure_of

    model = onnx.load(str(path))
    feed = CORPUS.make_inputs(entry)
    outs = {}
    for target in ("llvm", "reference"):
        graph, params = nnvm.frontend.from_onnx(model, shape=CORPUS.input_shapes(feed))
        lib = nnvm.compiler.build(graph, target=target, shape=CORPUS.input_shapes(feed),
                                  params=params)
        if target == "llvm":
            assert lib.stats()["num_fallback_kernels"] == 0, lib.stats()["unsupported_ops"]
        got = lib.run(**{k: v for k, v in feed.items() if k in lib.input_names})
        structure = structure_of(graph)
        outs[target] = [_table(v) for v in (regroup(structure, got) if structure else got)]
    _same(outs["llvm"], outs["reference"], 1e-5, 1e-5)
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    _same(outs["llvm"], [_table(v) for v in sess.run(None, feed)], 1e-5, 1e-4)


# -- tree ensembles -----------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_regressor_each_compare_mode(rng, walk, mode):
    model = regressor(rng, 4, modes=(mode,), integer_splits=True, base_values=[0.5])
    check(model, rows(rng, 64, 4, integers=True))


def test_regressor_nan_inputs_with_and_without_missing_tracking(rng, walk):
    model = regressor(rng, 5, n_trees=8, depth=5, modes=MODES, missing=True)
    check(model, rows(rng, 200, 5, nan=0.2))


@pytest.mark.parametrize("agg", ["SUM", "AVERAGE", "MIN", "MAX"])
def test_regressor_aggregates_over_several_targets(rng, walk, agg):
    model = regressor(rng, 6, n_targets=3, n_trees=7, aggregate_function=agg,
                      base_values=[0.1, -0.2, 0.3])
    check(model, rows(rng, 50, 6))


@pytest.mark.parametrize("post", POSTS)
def test_regressor_post_transforms(rng, walk, post):
    targets = 1 if post == "PROBIT" else 3
    model = regressor(rng, 4, n_targets=targets, post_transform=post)
    x = rows(rng, 40, 4)
    check(model, x, atol=1e-4 if post == "PROBIT" else 1e-5)


@pytest.mark.parametrize("n", [1, 1000])
def test_regressor_batch_sizes(rng, walk, n):
    """Batch 1000 over 30 trees is enough work to split rows over the thread pool."""
    model = regressor(rng, 8, n_trees=30 if n > 1 else 3, depth=6, modes=MODES, missing=True)
    check(model, rows(rng, n, 8, nan=0.05))


def test_regressor_float64_input_and_thresholds(rng, walk):
    trees = forest(rng, 4, 4, 3, "target", 2, missing=True)
    values = trees.pop("nodes_values")
    model = _model("TreeEnsembleRegressor", TensorProto.DOUBLE,
                   [("Y", TensorProto.FLOAT, [None, 2])], 3, n_targets=2,
                   nodes_values_as_tensor=helper.make_tensor(
                       "v", TensorProto.DOUBLE, [len(values)], values), **trees)
    check(model, rows(rng, 30, 3, nan=0.1, dtype=np.float64))


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("base", [None, [0.1, 0.0, -0.1, 0.2]])
def test_classifier_multiclass(rng, walk, post, base):
    extra = {"base_values": base} if base else {}
    model = classifier(rng, 5, [10, 20, 30, 40], n_trees=6, post_transform=post,
                       modes=MODES[:4], missing=True, **extra)
    check(model, rows(rng, 100, 5, nan=0.1))


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC"])
@pytest.mark.parametrize("column,weights,base", [
    (1, (0.0, 1.0), None), (1, (0.0, 1.0), [0.2]), (1, (-1.0, 1.0), [0.1]),
    (0, (0.0, 1.0), None), (0, (-1.0, 1.0), [0.3]), (0, (-1.0, 1.0), [0.1, 0.2]),
    (None, (0.0, 1.0), None), (None, (-1.0, 1.0), [0.1, 0.2])])
def test_classifier_two_classes(rng, walk, post, column, weights, base):
    """onnxruntime's two-class conventions: one weighted column (binary, positive or mixed
    weights) or both columns, with no, one or two base values."""
    extra = {"base_values": base} if base else {}
    model = classifier(rng, 4, [3, 7], one_column=column, weights=weights,
                       post_transform=post, **extra)
    check(model, rows(rng, 120, 4))


def test_classifier_two_classes_where_a_leaf_has_no_weight(walk):
    """A row reaching a leaf without weights: its scores come from write_scores' single
    column rules (the reference's case table). PROBIT only against the reference target:
    onnxruntime returns probit(0) = -inf there and leaves the second score unwritten."""
    attrs = {"nodes_treeids": [0, 0, 0], "nodes_nodeids": [0, 1, 2],
             "nodes_featureids": [0, 0, 0], "nodes_modes": ["BRANCH_LEQ", "LEAF", "LEAF"],
             "nodes_values": [0.0, 0.0, 0.0], "nodes_truenodeids": [1, 0, 0],
             "nodes_falsenodeids": [2, 0, 0], "class_treeids": [0], "class_nodeids": [1],
             "class_ids": [1], "class_weights": [0.3]}
    for base in ([], [0.1], [0.1, 0.2]):
        for post in ("NONE", "LOGISTIC", "PROBIT"):
            model = _model("TreeEnsembleClassifier", TensorProto.FLOAT,
                           [("L", TensorProto.INT64, [None]), ("S", TensorProto.FLOAT, [None, 2])],
                           1, classlabels_int64s=[3, 7], post_transform=post,
                           **attrs, **({"base_values": base} if base else {}))
            check(model, np.array([[-1.0], [1.0], [0.0]], np.float32),
                  oracle=post != "PROBIT")


def test_skl_shaped_forest_batch_1000(rng, walk):
    """A random-forest classifier as skl2onnx writes it (AVERAGE-like weights, 3 classes)."""
    model = classifier(rng, 13, [0, 1, 2], n_trees=20, depth=6)
    check(model, rows(rng, 1000, 13))
    check(model, rows(rng, 1, 13))


def test_membership_stays_on_host_and_runs():
    node = helper.make_node(
        "TreeEnsemble", ["X"], ["Y"], domain=ML, n_targets=1, aggregate_function=1,
        nodes_featureids=[0], nodes_modes=helper.make_tensor("m", TensorProto.UINT8, [1], [6]),
        nodes_splits=helper.make_tensor("s", TensorProto.FLOAT, [1], [0.0]),
        nodes_truenodeids=[0], nodes_trueleafs=[1], nodes_falsenodeids=[1],
        nodes_falseleafs=[1], membership_values=helper.make_tensor(
            "mv", TensorProto.FLOAT, [2], [1.0, 3.0]),
        tree_roots=[0], leaf_targetids=[0, 0],
        leaf_weights=helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, -2.0]))
    graph = helper.make_graph([node], "ml",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 1])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid(ML, 5)])
    model.ir_version = 9
    stats = check(model, np.array([[1.0], [2.0], [3.0]], np.float32), compiled=False)
    assert "BRANCH_MEMBER" in stats["unsupported_ops"]["tree_ensemble"]


def test_forest_over_the_code_limit_stays_on_host_and_runs(rng, monkeypatch):
    """Trees are compiled up to ``MAX_TABLE_NODES``; a larger ensemble keeps the host walk
    (the limit lowered here so the test builds a small one)."""
    from nnvm_llvm.compiler import ml_trees

    monkeypatch.setattr(ml_trees, "MAX_TABLE_NODES", 20)
    stats = check(regressor(rng, 4, n_trees=6), rows(rng, 10, 4), compiled=False)
    assert "nodes and leaves" in stats["unsupported_ops"]["tree_ensemble"]


def test_string_labels_stay_on_host_and_run(rng):
    trees = forest(rng, 3, 3, 2, "class", 2, weights=(0.0, 1.0))
    model = _model("TreeEnsembleClassifier", TensorProto.FLOAT,
                   [("L", TensorProto.STRING, [None]), ("S", TensorProto.FLOAT, [None, 2])],
                   2, classlabels_strings=["no", "yes"], **trees)
    stats = check(model, rows(rng, 20, 2), compiled=False)
    assert "tree_ensemble_classifier" in stats["unsupported_ops"]


# -- linear models, normalizer, SVMs ------------------------------------------------------------

def _linear_classifier(rng, n_cls, rows_, post, labels):
    return _model("LinearClassifier", TensorProto.FLOAT,
                  [("L", TensorProto.INT64, [None]),
                   ("S", TensorProto.FLOAT, [None, 2 if rows_ == 1 and n_cls == 2 else rows_])],
                  4, coefficients=rng.standard_normal(rows_ * 4).tolist(),
                  intercepts=rng.standard_normal(rows_).tolist(), classlabels_ints=labels,
                  post_transform=post)


@pytest.mark.parametrize("post", POSTS)
@pytest.mark.parametrize("n_rows", [1, 3])
def test_linear_classifier(rng, post, n_rows):
    """One coefficient row and PROBIT: against the reference only (onnxruntime's binary
    PROBIT scores overlap in its buffer; the reference documents its own choice)."""
    labels = [4, 9] if n_rows == 1 else [4, 9, 11]
    check(_linear_classifier(rng, len(labels), n_rows, post, labels), rows(rng, 30, 4),
          atol=1e-4 if post == "PROBIT" else 1e-5, oracle=not (post == "PROBIT" and n_rows == 1))


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
def test_normalizer(rng, norm):
    model = _model("Normalizer", TensorProto.FLOAT, [("Y", TensorProto.FLOAT, [None, 5])], 5,
                   norm=norm)
    x = rows(rng, 20, 5)
    x[3] = 0.0
    check(model, x)


@pytest.mark.parametrize("post", ["LOGISTIC", "SOFTMAX"])
def test_linear_regressor_with_post_transform(rng, post):
    model = _model("LinearRegressor", TensorProto.FLOAT, [("Y", TensorProto.FLOAT, [None, 2])],
                   3, coefficients=rng.standard_normal(6).tolist(), intercepts=[0.5, -0.5],
                   targets=2, post_transform=post)
    check(model, rows(rng, 10, 3))


SVM_KERNELS = [("LINEAR", [0.0, 0.0, 0.0]), ("POLY", [0.3, 1.0, 3.0]), ("RBF", [0.5, 0.0, 0.0]),
               ("SIGMOID", [0.2, 0.1, 0.0])]


@pytest.mark.parametrize("kernel,params", SVM_KERNELS)
@pytest.mark.parametrize("n_cls,post", [(3, "NONE"), (2, "NONE"), (2, "LOGISTIC")])
def test_svm_classifier_one_vs_one(rng, kernel, params, n_cls, post):
    per_class = [3, 4, 2][:n_cls]
    n_sv = sum(per_class)
    model = _model("SVMClassifier", TensorProto.FLOAT,
                   [("L", TensorProto.INT64, [None]),
                    ("S", TensorProto.FLOAT, [None, 3 if n_cls == 3 else 2])],
                   4, kernel_type=kernel, kernel_params=params,
                   support_vectors=rng.standard_normal(n_sv * 4).tolist(),
                   vectors_per_class=per_class,
                   coefficients=rng.standard_normal((n_cls - 1) * n_sv).tolist(),
                   rho=rng.standard_normal(n_cls * (n_cls - 1) // 2).tolist(),
                   classlabels_ints=[5, 6, 8][:n_cls], post_transform=post)
    check(model, rows(rng, 40, 4), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n_cls,post", [(3, "NONE"), (4, "SOFTMAX"), (2, "NONE")])
def test_svm_classifier_probabilities(rng, n_cls, post):
    """prob_a/prob_b: Platt sigmoids of the pairwise decision values coupled into class
    probabilities by libsvm's iteration, inside the kernel."""
    per_class = [3, 4, 2, 3][:n_cls]
    n_sv, pairs = sum(per_class), n_cls * (n_cls - 1) // 2
    model = _model("SVMClassifier", TensorProto.FLOAT,
                   [("L", TensorProto.INT64, [None]), ("S", TensorProto.FLOAT, [None, n_cls])],
                   4, kernel_type="RBF", kernel_params=[0.4, 0.0, 0.0],
                   support_vectors=rng.standard_normal(n_sv * 4).tolist(),
                   vectors_per_class=per_class,
                   coefficients=rng.standard_normal((n_cls - 1) * n_sv).tolist(),
                   rho=rng.standard_normal(pairs).tolist(),
                   prob_a=(-rng.uniform(0.5, 3, pairs)).tolist(),
                   prob_b=rng.normal(0, 0.3, pairs).tolist(),
                   classlabels_ints=list(range(n_cls)), post_transform=post)
    check(model, rows(rng, 40, 4), rtol=1e-4, atol=1e-4)


def test_svm_classifier_linear_svc(rng):
    """A linear SVC (no support vectors): against the reference only, as onnxruntime 1.31
    refuses an SVMClassifier without support-vector attributes."""
    model = _model("SVMClassifier", TensorProto.FLOAT,
                   [("L", TensorProto.INT64, [None]), ("S", TensorProto.FLOAT, [None, 3])],
                   4, kernel_type="LINEAR", coefficients=rng.standard_normal(12).tolist(),
                   rho=[0.2], classlabels_ints=[0, 1, 2])
    check(model, rows(rng, 40, 4), oracle=False)


@pytest.mark.parametrize("kernel,params", SVM_KERNELS)
def test_svm_regressor(rng, kernel, params):
    model = _model("SVMRegressor", TensorProto.FLOAT, [("Y", TensorProto.FLOAT, [None, 1])],
                   3, kernel_type=kernel, kernel_params=params, n_supports=5,
                   support_vectors=rng.standard_normal(15).tolist(),
                   coefficients=rng.standard_normal(5).tolist(), rho=[0.3])
    check(model, rows(rng, 25, 3), rtol=1e-4, atol=1e-4)


# -- preprocessing ------------------------------------------------------------------------------

def test_binarizer(rng):
    model = _model("Binarizer", TensorProto.FLOAT, [("Y", TensorProto.FLOAT, [None, 4])], 4,
                   threshold=0.3)
    check(model, rows(rng, 20, 4))


@pytest.mark.parametrize("values", [[1.5], [1.0, -2.0, 3.0, 0.5]])
def test_imputer_replaces_nan(rng, values):
    model = _model("Imputer", TensorProto.FLOAT, [("Y", TensorProto.FLOAT, [None, 4])], 4,
                   imputed_value_floats=values, replaced_value_float=float("nan"))
    check(model, rows(rng, 30, 4, nan=0.3))


def test_imputer_replaces_a_value(rng):
    model = _model("Imputer", TensorProto.FLOAT, [("Y", TensorProto.FLOAT, [None, 3])], 3,
                   imputed_value_floats=[7.0, 8.0, 9.0], replaced_value_float=1.0)
    check(model, rows(rng, 30, 3, integers=True))


def test_scaler_on_float64_input(rng):
    """float32 scalers become broadcast ops in the frontend; other dtypes keep the op."""
    model = _model("Scaler", TensorProto.DOUBLE, [("Y", TensorProto.FLOAT, [None, 3])], 3,
                   offset=[0.5, -1.0, 2.0], scale=[2.0, 0.25, -1.0])
    check(model, rows(rng, 10, 3, dtype=np.float64))


def test_one_hot_encoder_int_categories():
    node = helper.make_node("OneHotEncoder", ["X"], ["Y"], domain=ML, cats_int64s=[3, 1, 7],
                            zeros=1)
    graph = helper.make_graph([node], "ml",
                              [helper.make_tensor_value_info("X", TensorProto.INT64, [None, 2])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT,
                                                             [None, 2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(ML, 3)])
    model.ir_version = 8
    check(model, np.array([[3, 1], [7, 5], [1, 1]], np.int64))


def test_feature_vectorizer_cuts_and_pads(rng):
    node = helper.make_node("FeatureVectorizer", ["X", "Z"], ["Y"], domain=ML,
                            inputdimensions=[2, 4])
    graph = helper.make_graph([node], "ml",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 3]),
                               helper.make_tensor_value_info("Z", TensorProto.FLOAT, [None, 2])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 6])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(ML, 3)])
    model.ir_version = 8
    x, z = rows(rng, 5, 3), rows(rng, 5, 2)
    shapes = {"X": x.shape, "Z": z.shape}
    got = []
    for target in ("llvm", "reference"):
        g, params = nnvm.frontend.from_onnx(model, shape=shapes)
        lib = nnvm.compiler.build(g, target=target, shape=shapes, params=params)
        if target == "llvm":
            assert lib.stats()["num_fallback_kernels"] == 0, lib.stats()["unsupported_ops"]
        got.append(np.asarray(lib.run(X=x, Z=z)[0]))
    np.testing.assert_array_equal(got[0], got[1])
    want = np.concatenate([x[:, :2], z, np.zeros((5, 2), np.float32)], axis=1)
    np.testing.assert_array_equal(got[0], want)


@pytest.mark.parametrize("op", ["TreeEnsembleRegressor", "TreeEnsembleClassifier"])
def test_tree_ensemble_one_dimensional_input_is_one_row(rng, walk, op):
    """The reference reads (F,) as one row; onnxruntime 1.31's shape inference refuses
    rank 1, so this one is against the reference target only."""
    prefix = "target" if op.endswith("Regressor") else "class"
    trees = forest(rng, 3, 3, 4, prefix, 2, weights=(0.0, 1.0))
    outs = [("Y", TensorProto.FLOAT, [1, 2])] if prefix == "target" else \
        [("L", TensorProto.INT64, [1]), ("S", TensorProto.FLOAT, [1, 2])]
    extra = {"n_targets": 2} if prefix == "target" else {"classlabels_int64s": [0, 1]}
    node = helper.make_node(op, ["X"], [o[0] for o in outs], domain=ML, **trees, **extra)
    graph = helper.make_graph([node], "ml",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info(*o) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(ML, 3)])
    model.ir_version = 8
    check(model, rng.standard_normal(4).astype(np.float32), oracle=False)
