"""``ai.onnx.ml`` ops (nnvm/ops/ml.py, nnvm_onnx/converters/ml.py) against onnxruntime.

Two kinds of models: scikit-learn estimators exported by skl2onnx (what users run; skipped
without scikit-learn/skl2onnx), and hand-built onnx.helper models that reach each attribute
combination (post transforms, aggregate functions, branch modes, missing values, string
labels, binary conventions). ZipMap outputs are compared as the lists of dicts onnxruntime
returns, rebuilt from the graph's output structure by ``nnvm_onnx.importer.regroup``.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402

import nnvm  # noqa: E402
from nnvm.backend import get_backend  # noqa: E402
from nnvm.runtime.structured_outputs import regroup, structure_of  # noqa: E402

ML = "ai.onnx.ml"
LLVM_REASON = get_backend("llvm", require_available=False).compiler_available()
TARGETS = ["reference", pytest.param("llvm", marks=pytest.mark.skipif(
    LLVM_REASON is not None, reason=str(LLVM_REASON)))]


# -- harness ------------------------------------------------------------------------------------

def ml_model(nodes, inputs, outputs, ml_opset: int = 3, opset: int = 17):
    graph = helper.make_graph(list(nodes), "ml", list(inputs), list(outputs))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    helper.make_opsetid(ML, ml_opset)],
                              producer_name="nnvm-tests")
    model.ir_version = 8 if ml_opset < 4 else 9
    onnx.checker.check_model(model)
    return model


def one_node(op_type, x_type, outputs, x_shape=(None, 4), inputs=None, ml_opset=3, **attrs):
    """A model of one ml node on input X; ``outputs`` = [(name, elem_type, shape)]."""
    node = helper.make_node(op_type, inputs or ["X"], [o[0] for o in outputs], domain=ML,
                            **attrs)
    return ml_model([node], [helper.make_tensor_value_info("X", x_type, list(x_shape))],
                    [helper.make_tensor_value_info(*o) for o in outputs], ml_opset)


def nnvm_outputs(model, feed, target="reference"):
    shape = {k: v.shape for k, v in feed.items()}
    graph, params = nnvm.frontend.from_onnx(model, shape=shape)
    ins = set(graph.index.input_names)
    lib = nnvm.compiler.build(graph, target=target,
                              shape={k: v for k, v in shape.items() if k in ins},
                              dtype={k: "string" if v.dtype == object else v.dtype.name
                                     for k, v in feed.items() if k in ins},
                              params=params)
    outs = lib.run(**{k: v for k, v in feed.items() if k in lib.input_names})
    structure = structure_of(graph)
    return regroup(structure, outs) if structure else list(outs)


def assert_matches_ort(model, feed, target="reference", rtol=1e-5, atol=1e-5):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feed)
    got = nnvm_outputs(model, feed, target)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, list):  # ZipMap: one dict per row, same keys, close values
            assert len(g) == len(w)
            for gd, wd in zip(g, w):
                assert list(gd) == list(wd)
                np.testing.assert_allclose(list(gd.values()), list(wd.values()), rtol, atol)
            continue
        w = np.asarray(w)
        g = np.asarray(g)
        assert g.shape == w.shape, (g.shape, w.shape)
        if w.dtype.kind in "OUS":
            assert g.astype(str).tolist() == w.astype(str).tolist()
        elif w.dtype.kind in "iub":
            assert g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)
        else:
            assert g.dtype == w.dtype, (g.dtype, w.dtype)
            np.testing.assert_allclose(g, w, rtol, atol)
    return got


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# -- skl2onnx exports ---------------------------------------------------------------------------

def _sklearn_cases():
    return {
        "logreg_zipmap": lambda s: (s["pipeline"].make_pipeline(
            s["preprocessing"].StandardScaler(),
            s["linear_model"].LogisticRegression(max_iter=500)), "iris", True),
        "logreg_binary": lambda s: (s["linear_model"].LogisticRegression(max_iter=2000),
                                    "breast_cancer", False),
        "random_forest_cls": lambda s: (s["ensemble"].RandomForestClassifier(
            n_estimators=8, max_depth=5, random_state=0), "wine", False),
        "random_forest_reg": lambda s: (s["ensemble"].RandomForestRegressor(
            n_estimators=6, max_depth=4, random_state=0), "diabetes", False),
        "gbc_binary": lambda s: (s["ensemble"].GradientBoostingClassifier(
            n_estimators=10, max_depth=2, random_state=0), "breast_cancer", False),
        "gbc_multi_zipmap": lambda s: (s["ensemble"].GradientBoostingClassifier(
            n_estimators=10, max_depth=2, random_state=0), "iris", True),
        "gbr": lambda s: (s["ensemble"].GradientBoostingRegressor(
            n_estimators=10, max_depth=3, random_state=0), "diabetes", False),
        "dtree_binary_zipmap": lambda s: (s["tree"].DecisionTreeClassifier(
            max_depth=4, random_state=0), "breast_cancer", True),
        "extra_trees": lambda s: (s["ensemble"].ExtraTreesClassifier(
            n_estimators=5, max_depth=5, random_state=0), "breast_cancer", False),
        "svc_rbf": lambda s: (s["pipeline"].make_pipeline(
            s["preprocessing"].MinMaxScaler(), s["svm"].SVC()), "iris", False),
        "svc_poly_proba": lambda s: (s["svm"].SVC(kernel="poly", degree=2, probability=True,
                                                  random_state=0), "iris", False),
        # scaled: on raw features (areas ~1e3) a linear kernel cancels so badly in float32
        # that onnxruntime itself is 8% off scikit-learn
        "svc_linear_binary": lambda s: (s["pipeline"].make_pipeline(
            s["preprocessing"].StandardScaler(), s["svm"].SVC(kernel="linear")),
            "breast_cancer_small", False),
        "svr_rbf": lambda s: (s["svm"].SVR(), "diabetes", False),
        "linear_svc": lambda s: (s["svm"].LinearSVC(max_iter=5000, random_state=0), "iris",
                                 None),
        "ridge_maxabs": lambda s: (s["pipeline"].make_pipeline(
            s["preprocessing"].MaxAbsScaler(), s["linear_model"].Ridge()), "diabetes", False),
        "normalizer_l1": lambda s: (s["pipeline"].make_pipeline(
            s["preprocessing"].Normalizer(norm="l1"), s["linear_model"].Ridge()), "diabetes",
            False),
        "binarizer_imputer": lambda s: (s["pipeline"].make_pipeline(
            s["impute"].SimpleImputer(), s["preprocessing"].Binarizer(threshold=0.01),
            s["linear_model"].Ridge()), "diabetes", False),
    }


@pytest.fixture(scope="module")
def sk():
    pytest.importorskip("sklearn", reason="scikit-learn is needed to export skl2onnx models")
    pytest.importorskip("skl2onnx", reason="skl2onnx is needed to export ai.onnx.ml models")
    from sklearn import (datasets, ensemble, impute, linear_model, pipeline, preprocessing,
                         svm, tree)

    return dict(datasets=datasets, ensemble=ensemble, impute=impute,
                linear_model=linear_model, pipeline=pipeline, preprocessing=preprocessing,
                svm=svm, tree=tree)


def _dataset(sk, name):
    if name == "breast_cancer_small":
        x, y = sk["datasets"].load_breast_cancer(return_X_y=True)
        return x[:, :5], y
    return getattr(sk["datasets"], f"load_{name}")(return_X_y=True)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", sorted(_sklearn_cases()))
def test_skl2onnx_model_matches_onnxruntime(sk, case, target):
    from skl2onnx import to_onnx

    est, data, zipmap = _sklearn_cases()[case](sk)
    x, y = _dataset(sk, data)
    x = x.astype(np.float32)
    est.fit(x, y)
    opts = None if zipmap is not False or not hasattr(est, "classes_") else \
        {id(est): {"zipmap": False}}
    model = to_onnx(est, x[:1], target_opset={"": 17, ML: 3}, options=opts)
    rng = np.random.default_rng(0)
    rows = x[rng.choice(len(x), 16, replace=False)]
    rows[:8] += (rng.standard_normal((8, x.shape[1])) * x.std(0) * 0.3).astype(np.float32)
    if case == "binarizer_imputer":
        rows[::3, 1] = np.nan
    assert_matches_ort(model, {"X": rows}, target, rtol=1e-4, atol=1e-5)


def test_zipmap_structure_survives_export_and_load(sk, tmp_path):
    """The output structure is graph JSON text, so a loaded artifact regroups like the build."""
    from skl2onnx import to_onnx

    x, y = _dataset(sk, "iris")
    est = sk["linear_model"].LogisticRegression(max_iter=500).fit(x.astype(np.float32), y)
    model = to_onnx(est, x[:1].astype(np.float32), target_opset={"": 17, ML: 3})
    graph, params = nnvm.frontend.from_onnx(model, shape={"X": (4, 4)})
    lib = nnvm.compiler.build(graph, target="reference", shape={"X": (4, 4)}, params=params)
    lib.export(str(tmp_path / "clf.nnvm"))
    loaded = nnvm.runtime.load(str(tmp_path / "clf.nnvm"))
    assert structure_of(loaded.graph) == structure_of(graph) is not None
    feed = x[:4].astype(np.float32)
    got = regroup(structure_of(loaded.graph), loaded.run(X=feed))
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"X": feed})
    np.testing.assert_array_equal(got[0], want[0])
    assert [sorted(d) for d in got[1]] == [sorted(d) for d in want[1]]
    for g, w in zip(got[1], want[1]):
        np.testing.assert_allclose([g[k] for k in sorted(g)], [w[k] for k in sorted(w)],
                                   rtol=1e-5, atol=1e-6)


# -- hand-built: linear models ------------------------------------------------------------------

POSTS = ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"]


@pytest.mark.parametrize("post", POSTS)
def test_linear_classifier_post_transforms(rng, post):
    coef = (rng.standard_normal(12) * 0.3).tolist()
    if post == "SOFTMAX_ZERO":
        coef[:4] = [0.0] * 4  # a class scoring exactly zero keeps zero
    model = one_node("LinearClassifier", TensorProto.FLOAT,
                     [("L", TensorProto.INT64, [None]), ("S", TensorProto.FLOAT, [None, 3])],
                     coefficients=coef, intercepts=[0.0, 0.1, -0.1] if post != "SOFTMAX_ZERO"
                     else [0.0, 0.2, -0.3], classlabels_ints=[4, 5, 6], post_transform=post)
    x = f32(rng, 7, 4) * (0.3 if post == "PROBIT" else 1.0)
    if post == "PROBIT":
        x = np.abs(x) * 0.5
    assert_matches_ort(model, {"X": x}, rtol=1e-4)


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
def test_linear_classifier_binary_one_row_string_labels(rng, post):
    model = one_node("LinearClassifier", TensorProto.FLOAT,
                     [("L", TensorProto.STRING, [None]), ("S", TensorProto.FLOAT, [None, 2])],
                     coefficients=[0.5, -1.0, 0.25, 2.0], intercepts=[0.1],
                     classlabels_strings=["no", "yes"], post_transform=post)
    assert_matches_ort(model, {"X": f32(rng, 9, 4)})


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_linear_regressor_targets(rng, post):
    model = one_node("LinearRegressor", TensorProto.FLOAT, [("Y", TensorProto.FLOAT, [None, 2])],
                     coefficients=(rng.standard_normal(8)).tolist(), intercepts=[1.0, -2.0],
                     targets=2, post_transform=post)
    assert_matches_ort(model, {"X": f32(rng, 5, 4)}, rtol=1e-4)


# -- hand-built: SVMs ---------------------------------------------------------------------------

@pytest.mark.parametrize("kernel,params", [("LINEAR", []), ("RBF", [0.5, 0.0, 0.0]),
                                           ("POLY", [0.3, 1.0, 3.0]),
                                           ("SIGMOID", [0.2, 0.1, 0.0])])
def test_svm_regressor_kernels(rng, kernel, params):
    sv = rng.standard_normal((5, 4))
    model = one_node("SVMRegressor", TensorProto.FLOAT, [("Y", TensorProto.FLOAT, [None, 1])],
                     coefficients=rng.standard_normal(5).tolist(), kernel_type=kernel,
                     n_supports=5, rho=[0.3], support_vectors=sv.reshape(-1).tolist(),
                     kernel_params=params or [0.0, 0.0, 0.0])
    assert_matches_ort(model, {"X": f32(rng, 6, 4)}, rtol=1e-4, atol=1e-4)


def test_svm_regressor_one_class(rng):
    model = one_node("SVMRegressor", TensorProto.FLOAT, [("Y", TensorProto.FLOAT, [None, 1])],
                     coefficients=[1.0, -0.5, 0.7], kernel_type="RBF",
                     kernel_params=[0.4, 0.0, 0.0], n_supports=3, rho=[-0.2], one_class=1,
                     support_vectors=rng.standard_normal(12).tolist())
    assert_matches_ort(model, {"X": f32(rng, 8, 4)})


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_svm_classifier_ovo_string_labels(rng, post):
    per_class = [2, 3, 2]
    model = one_node("SVMClassifier", TensorProto.FLOAT,
                     [("L", TensorProto.STRING, [None]), ("S", TensorProto.FLOAT, [None, 3])],
                     coefficients=rng.standard_normal(14).tolist(), kernel_type="RBF",
                     kernel_params=[0.3, 0.0, 3.0], rho=[0.1, -0.2, 0.05],
                     support_vectors=rng.standard_normal(28).tolist(),
                     vectors_per_class=per_class, classlabels_strings=["a", "b", "c"],
                     post_transform=post)
    assert_matches_ort(model, {"X": f32(rng, 10, 4)}, rtol=1e-4, atol=1e-5)


# -- hand-built: trees --------------------------------------------------------------------------

MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]


def _two_trees(mode, leaf_weights, prefix, ids=(0, 0, 0, 0, 0)):
    """Tree 0: root on feature 0 (mode, split 0.0, NaN -> true) with two leaves; tree 1: a
    root on feature 1 whose false child is a node on feature 2 (three leaves)."""
    return {
        "nodes_treeids": [0, 0, 0, 1, 1, 1, 1, 1],
        "nodes_nodeids": [0, 1, 2, 0, 1, 2, 3, 4],
        "nodes_featureids": [0, 0, 0, 1, 0, 2, 0, 0],
        "nodes_modes": [mode, "LEAF", "LEAF", "BRANCH_LEQ", "LEAF", mode, "LEAF", "LEAF"],
        "nodes_values": [0.0, 0, 0, 0.5, 0, 1.0, 0, 0],
        "nodes_truenodeids": [1, 0, 0, 1, 0, 3, 0, 0],
        "nodes_falsenodeids": [2, 0, 0, 2, 0, 4, 0, 0],
        "nodes_missing_value_tracks_true": [1, 0, 0, 0, 0, 0, 0, 0],
        f"{prefix}_treeids": [0, 0, 1, 1, 1],
        f"{prefix}_nodeids": [1, 2, 1, 3, 4],
        f"{prefix}_ids": list(ids),
        f"{prefix}_weights": leaf_weights,
    }


def _tree_rows(rng):
    x = f32(rng, 12, 3)
    x[0, 0], x[1, 0], x[2, 2] = 0.0, np.nan, 1.0
    return x


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("agg", ["SUM", "AVERAGE", "MIN", "MAX"])
def test_tree_ensemble_regressor_modes_and_aggregates(rng, mode, agg):
    attrs = _two_trees(mode, [1.0, -2.0, 0.5, 3.0, -1.5], "target")
    model = one_node("TreeEnsembleRegressor", TensorProto.FLOAT,
                     [("Y", TensorProto.FLOAT, [None, 1])], x_shape=(None, 3), n_targets=1,
                     aggregate_function=agg, base_values=[0.25], **attrs)
    assert_matches_ort(model, {"X": _tree_rows(rng)})


def test_tree_ensemble_regressor_two_targets_double_thresholds(rng):
    attrs = _two_trees("BRANCH_LEQ", [1.0, -2.0, 0.5, 3.0, -1.5], "target",
                       ids=(0, 1, 1, 0, 1))
    values = attrs.pop("nodes_values")
    model = one_node("TreeEnsembleRegressor", TensorProto.DOUBLE,
                     [("Y", TensorProto.FLOAT, [None, 2])], x_shape=(None, 3), n_targets=2,
                     nodes_values_as_tensor=helper.make_tensor(
                         "v", TensorProto.DOUBLE, [len(values)], values),
                     post_transform="LOGISTIC", **attrs)
    assert_matches_ort(model, {"X": _tree_rows(rng).astype(np.float64)})


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
def test_tree_ensemble_classifier_multiclass(rng, post):
    attrs = _two_trees("BRANCH_LT", [0.2, 0.7, 0.4, 0.1, 0.9], "class", ids=(0, 1, 2, 0, 1))
    model = one_node("TreeEnsembleClassifier", TensorProto.FLOAT,
                     [("L", TensorProto.INT64, [None]), ("S", TensorProto.FLOAT, [None, 3])],
                     x_shape=(None, 3), classlabels_int64s=[10, 20, 30],
                     base_values=[0.1, 0.0, -0.1], post_transform=post, **attrs)
    assert_matches_ort(model, {"X": _tree_rows(rng)})


@pytest.mark.parametrize("weights,post", [([0.2, 0.7, 0.4, 0.1, 0.9], "NONE"),
                                          ([0.5, -1.2, 0.8, -0.3, 1.1], "NONE"),
                                          ([0.5, -1.2, 0.8, -0.3, 1.1], "LOGISTIC")])
def test_tree_ensemble_classifier_binary_single_column(rng, weights, post):
    attrs = _two_trees("BRANCH_GT", weights, "class")
    model = one_node("TreeEnsembleClassifier", TensorProto.FLOAT,
                     [("L", TensorProto.STRING, [None]), ("S", TensorProto.FLOAT, [None, 2])],
                     x_shape=(None, 3), classlabels_strings=["neg", "pos"],
                     post_transform=post, **attrs)
    assert_matches_ort(model, {"X": _tree_rows(rng)})


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC"])
@pytest.mark.parametrize("ids,leaves,weights,base", [
    ((0,), (1,), (0.3,), (0.1, 0.2)), ((0,), (1,), (0.3,), (0.1,)), ((0,), (1,), (0.3,), None),
    ((1,), (1,), (0.3,), (0.1, 0.2)), ((1,), (1,), (0.3,), (0.1,)),
    ((1,), (1,), (-0.3,), (0.1,)), ((0, 0), (1, 2), (0.3, 0.8), (0.1, 0.2)),
    ((0, 1), (1, 1), (0.3, 0.6), (0.1, 0.2)), ((0, 1), (1, 2), (0.3, 0.6), (0.1, 0.2)),
    # not ((0, 1), (1, 2), (0.3, 0.6), (0.1,)): onnxruntime leaves the second score of a row
    # whose class 1 has no weight unwritten (whatever the buffer held); nnvm writes 0
    ((0, 1, 0, 1), (1, 1, 2, 2), (0.7, 0.3, 0.2, 0.8), None),
    ((0, 1, 0, 1), (1, 1, 2, 2), (0.7, -0.3, 0.2, 0.8), (0.1, 0.2))])
def test_tree_ensemble_classifier_two_classes(ids, leaves, weights, base, post):
    """onnxruntime's two-class rules: which base values exist and whether class 1 has a
    leaf weight decide the label (1 / 0 when both columns carry weights) and the scores; a
    row whose leaf carries no weight (x > 0 with one weighted leaf) scores zeros."""
    attrs = {"nodes_treeids": [0, 0, 0], "nodes_nodeids": [0, 1, 2],
             "nodes_featureids": [0, 0, 0], "nodes_modes": ["BRANCH_LEQ", "LEAF", "LEAF"],
             "nodes_values": [0.0, 0.0, 0.0], "nodes_truenodeids": [1, 0, 0],
             "nodes_falsenodeids": [2, 0, 0], "class_treeids": [0] * len(ids),
             "class_nodeids": list(leaves), "class_ids": list(ids),
             "class_weights": list(weights)}
    if base:
        attrs["base_values"] = list(base)
    model = one_node("TreeEnsembleClassifier", TensorProto.FLOAT,
                     [("L", TensorProto.INT64, [None]), ("S", TensorProto.FLOAT, [None, 2])],
                     x_shape=(None, 1), classlabels_int64s=[3, 7], post_transform=post,
                     **attrs)
    assert_matches_ort(model, {"X": np.array([[-1.0], [1.0], [0.0]], np.float32)})


def test_tree_ensemble_opset5_membership_and_leaf_root(rng):
    """TreeEnsemble (opset 5): a set-membership split with NaN tracking true, a tree that
    is a single leaf, AVERAGE over two targets."""
    node = helper.make_node(
        "TreeEnsemble", ["X"], ["Y"], domain=ML, n_targets=2, aggregate_function=0,
        nodes_featureids=[0, 1, 0], nodes_modes=helper.make_tensor(
            "m", TensorProto.UINT8, [3], [6, 0, 0]),
        nodes_splits=helper.make_tensor("s", TensorProto.FLOAT, [3], [0.0, 0.5, 0.0]),
        nodes_truenodeids=[1, 0, 3], nodes_trueleafs=[0, 1, 1],
        nodes_falsenodeids=[2, 1, 3], nodes_falseleafs=[1, 1, 1],
        nodes_missing_value_tracks_true=[1, 0, 0],
        membership_values=helper.make_tensor("mv", TensorProto.FLOAT, [3], [1.0, 3.0, 5.0]),
        tree_roots=[0, 2], leaf_targetids=[0, 1, 1, 0],
        leaf_weights=helper.make_tensor("w", TensorProto.FLOAT, [4], [1.0, 2.0, -3.0, 0.5]))
    model = ml_model([node], [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 2])],
                     [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 2])],
                     ml_opset=5, opset=21)
    x = np.array([[1, 0], [3, 1], [2, 0.2], [np.nan, 0.9], [5, 0.7], [4, 0]], np.float32)
    assert_matches_ort(model, {"X": x})


# -- hand-built: preprocessing ------------------------------------------------------------------

@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
def test_normalizer(rng, norm):
    model = one_node("Normalizer", TensorProto.FLOAT, [("Y", TensorProto.FLOAT, [None, 4])],
                     norm=norm)
    x = f32(rng, 5, 4)
    x[2] = 0.0
    assert_matches_ort(model, {"X": x})


def test_scaler_single_values_on_int64(rng):
    model = one_node("Scaler", TensorProto.INT64, [("Y", TensorProto.FLOAT, [None, 4])],
                     offset=[1.5], scale=[0.5])
    assert_matches_ort(model, {"X": rng.integers(-5, 5, (3, 4)).astype(np.int64)})


@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.INT64])
def test_imputer(rng, dtype):
    if dtype == TensorProto.FLOAT:
        model = one_node("Imputer", dtype, [("Y", dtype, [None, 4])],
                         imputed_value_floats=[1.0, 2.0, 3.0, 4.0],
                         replaced_value_float=float("nan"))
        x = f32(rng, 5, 4)
        x[1, 2] = x[3, 0] = np.nan
    else:
        model = one_node("Imputer", dtype, [("Y", dtype, [None, 4])],
                         imputed_value_int64s=[9], replaced_value_int64=-1)
        x = rng.integers(-1, 2, (5, 4)).astype(np.int64)
    assert_matches_ort(model, {"X": x})


def test_binarizer(rng):
    model = one_node("Binarizer", TensorProto.FLOAT, [("Y", TensorProto.FLOAT, [None, 4])],
                     threshold=0.25)
    assert_matches_ort(model, {"X": f32(rng, 4, 4)})


@pytest.mark.parametrize("x_shape", [(None, 5), (5,)])
def test_array_feature_extractor(rng, x_shape):
    node = helper.make_node("ArrayFeatureExtractor", ["X", "I"], ["Y"], domain=ML)
    model = ml_model([node], [helper.make_tensor_value_info("X", TensorProto.FLOAT,
                                                            list(x_shape)),
                              helper.make_tensor_value_info("I", TensorProto.INT64, [None])],
                     [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 3])])
    x = f32(rng, *(3 if d is None else d for d in x_shape))
    assert_matches_ort(model, {"X": x, "I": np.array([4, 0, 2], np.int64)})


def test_feature_vectorizer_cuts_and_pads(rng):
    node = helper.make_node("FeatureVectorizer", ["A", "B", "C"], ["Y"], domain=ML,
                            inputdimensions=[2, 3, 1])
    model = ml_model([node], [helper.make_tensor_value_info("A", TensorProto.FLOAT, [None, 3]),
                              helper.make_tensor_value_info("B", TensorProto.FLOAT, [None, 2]),
                              helper.make_tensor_value_info("C", TensorProto.FLOAT, [None, 1])],
                     [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 6])])
    feed = {"A": f32(rng, 4, 3), "B": f32(rng, 4, 2), "C": f32(rng, 4, 1)}
    assert_matches_ort(model, feed)


@pytest.mark.parametrize("kind", ["ints", "strings"])
def test_one_hot_encoder(kind):
    if kind == "ints":
        model = one_node("OneHotEncoder", TensorProto.INT64,
                         [("Y", TensorProto.FLOAT, [None, 2, 3])], x_shape=(None, 2),
                         cats_int64s=[3, 1, 7], zeros=1)
        x = np.array([[1, 7], [3, 5], [7, 7]], np.int64)
    else:
        model = one_node("OneHotEncoder", TensorProto.STRING,
                         [("Y", TensorProto.FLOAT, [None, 1, 2])], x_shape=(None, 1),
                         cats_strings=["cat", "dog"], zeros=1)
        x = np.array([["dog"], ["cat"], ["cow"]], dtype=object)
    assert_matches_ort(model, {"X": x})


def test_label_encoder_v1_and_v2(rng):
    v1 = one_node("LabelEncoder", TensorProto.STRING, [("Y", TensorProto.INT64, [None])],
                  x_shape=(None,), ml_opset=1, classes_strings=["a", "b", "c"],
                  default_int64=-7)
    assert_matches_ort(v1, {"X": np.array(["b", "z", "a", "c"], dtype=object)})
    v2 = one_node("LabelEncoder", TensorProto.INT64, [("Y", TensorProto.FLOAT, [None])],
                  x_shape=(None,), ml_opset=2, keys_int64s=[1, 2, 3],
                  values_floats=[0.5, 1.5, 2.5], default_float=-1.0)
    assert_matches_ort(v2, {"X": np.array([3, 1, 9, 2], np.int64)})


# -- ZipMap and errors --------------------------------------------------------------------------

def test_zipmap_string_labels_regroup_to_dicts(rng):
    nodes = [helper.make_node("LinearClassifier", ["X"], ["L", "S"], domain=ML,
                              coefficients=rng.standard_normal(8).tolist(),
                              intercepts=[0.5, -0.5], classlabels_strings=["x", "y"],
                              post_transform="SOFTMAX"),
             helper.make_node("ZipMap", ["S"], ["Z"], domain=ML, classlabels_strings=["x", "y"])]
    z_type = helper.make_sequence_type_proto(helper.make_map_type_proto(
        TensorProto.STRING, helper.make_tensor_type_proto(TensorProto.FLOAT, [])))
    model = ml_model(nodes, [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 4])],
                     [helper.make_tensor_value_info("L", TensorProto.STRING, [None]),
                      helper.make_value_info("Z", z_type)])
    got = assert_matches_ort(model, {"X": f32(rng, 3, 4)})
    assert isinstance(got[1], list) and set(got[1][0]) == {"x", "y"}
    graph, params = nnvm.frontend.from_onnx(model, shape={"X": (3, 4)})
    lib = nnvm.compiler.build(graph, target="reference", shape={"X": (3, 4)}, params=params)
    assert lib.output_names == ["L", "Z"]  # the model's own names, the map output's too


@pytest.mark.parametrize("target", TARGETS)
def test_ml_ops_run_on_compiled_targets(rng, target):
    """The host steps of the native targets give the reference results (scaler -> linear
    classifier -> normalizer -> zipmap, as skl2onnx writes a logistic regression)."""
    nodes = [helper.make_node("Scaler", ["X"], ["T"], domain=ML, offset=[0.5, 0, 0, 1],
                              scale=[2.0, 1, 1, 0.5]),
             helper.make_node("LinearClassifier", ["T"], ["L", "P"], domain=ML,
                              coefficients=rng.standard_normal(12).tolist(),
                              intercepts=[0.0, 0.5, -0.5], classlabels_ints=[0, 1, 2],
                              post_transform="LOGISTIC"),
             helper.make_node("Normalizer", ["P"], ["S"], domain=ML, norm="L1"),
             helper.make_node("ZipMap", ["S"], ["Z"], domain=ML, classlabels_int64s=[0, 1, 2])]
    z_type = helper.make_sequence_type_proto(helper.make_map_type_proto(
        TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, [])))
    model = ml_model(nodes, [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 4])],
                     [helper.make_tensor_value_info("L", TensorProto.INT64, [None]),
                      helper.make_value_info("Z", z_type)])
    assert_matches_ort(model, {"X": f32(rng, 6, 4)}, target)


def test_malformed_tree_raises_nnvm_error():
    attrs = _two_trees("BRANCH_LEQ", [1.0, 2.0, 3.0, 4.0, 5.0], "target")
    attrs["nodes_falsenodeids"][0] = 42  # names a node tree 0 does not have
    model = one_node("TreeEnsembleRegressor", TensorProto.FLOAT,
                     [("Y", TensorProto.FLOAT, [None, 1])], x_shape=(None, 3), n_targets=1,
                     **attrs)
    with pytest.raises(nnvm.NNVMError, match="tree 0 names node 42"):
        nnvm.frontend.from_onnx(model, shape={"X": (2, 3)})


def test_tree_reading_a_missing_feature_raises_nnvm_error(rng):
    attrs = _two_trees("BRANCH_LEQ", [1.0, 2.0, 3.0, 4.0, 5.0], "target")
    model = one_node("TreeEnsembleRegressor", TensorProto.FLOAT,
                     [("Y", TensorProto.FLOAT, [None, 1])], x_shape=(None, 2), n_targets=1,
                     **attrs)
    with pytest.raises(nnvm.NNVMError, match="feature 2"):
        nnvm_outputs(model, {"X": f32(rng, 2, 2)})
