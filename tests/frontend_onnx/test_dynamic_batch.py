"""Issue 17, Done-when: a model built with a symbolic batch runs batches 1, 3 and 8 without
recompiling, matching onnxruntime, on ``reference`` and ``llvm``; the ``onnx.backend`` adapter
and ``InferenceSession`` use it, and a graph whose samples are not independent falls back
to one build per batch size, saying why."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

import nnvm  # noqa: E402
from dynamic_models import (  # noqa: E402
    pooled_sequence, scaler_linear, small_cnn, tiny_lstm, tiny_transformer)
from onnx_test_helpers import make_model, ort_run, tensor  # noqa: E402

MODELS = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "models")
BATCHES = (1, 3, 8)


def _digits():
    return onnx.load(os.path.join(MODELS, "digits_mlp.onnx"))


#: (model factory, input name, feed factory): a real exported MLP, a PyTorch-style CNN and
#: a one-block transformer whose reshapes take the batch from a Shape subgraph
CASES = {
    "digits_mlp": (_digits, "data",
                   lambda n: np.random.default_rng(n).random((n, 64), dtype="float32")),
    "small_cnn": (small_cnn, "x",
                  lambda n: np.random.default_rng(n).standard_normal((n, 3, 8, 8), "float32")),
    "tiny_transformer": (tiny_transformer, "ids",
                         lambda n: np.random.default_rng(n).integers(0, 11, (n, 6))),
    "tiny_lstm": (tiny_lstm, "X",  # the batch on axis 1 in, axis 2 and 1 out
                  lambda n: np.random.default_rng(n).standard_normal((5, n, 3), "float32")),
    "scaler_linear": (scaler_linear, "X",  # ONNX-ML ops, one result per row
                      lambda n: np.random.default_rng(n).standard_normal((n, 4), "float32")),
}


def _target(name: str) -> str:
    if name == "llvm":
        pytest.importorskip("tvm")
    return name


def _check(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("target", ["reference", "llvm"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_session_runs_batches_1_3_8_with_one_build(tmp_path, case, target):
    make, name, feed = CASES[case]
    model = make()
    sess = nnvm.InferenceSession(model.SerializeToString(), target=_target(target),
                                 cache_dir=str(tmp_path))
    assert "N" in sess.get_inputs()[0].shape
    for n in BATCHES:
        _check(sess.run(None, {name: feed(n)}), ort_run(model, {name: feed(n)}))
    assert sess.builds == 1
    assert sess._fixed.runs == sum(BATCHES)  # bucket 1: one run per sample


@pytest.mark.parametrize("target", ["reference", "llvm"])
def test_onnx_backend_runs_batches_1_3_8_with_one_build(target):
    from nnvm_onnx import backend

    model = tiny_transformer()
    rep = backend.prepare(model, target=_target(target))
    for n in BATCHES:
        ids = CASES["tiny_transformer"][2](n)
        _check(list(rep.run([ids])), ort_run(model, {"ids": ids}))
    assert rep.builds == 1


def test_onnx_backend_prepare_with_a_named_batch_builds_at_prepare():
    from nnvm_onnx import backend

    model = small_cnn()
    rep = backend.prepare(model, target="reference", shape={"x": ("N", 3, 8, 8)},
                          batch_bucket=4)
    assert rep.builds == 1
    for n in (3, 4, 9):  # padded, exact, two full runs and a padded one
        x = CASES["small_cnn"][2](n)
        _check(list(rep.run({"x": x})), ort_run(model, {"x": x}))
    assert rep.builds == 1


def test_build_with_a_named_batch_on_the_original_api():
    """``nnvm.compiler.build(graph, shape={"data": ("N", 64)})`` on the NNVM-JSON digits
    model: one module for every batch size, equal to the same graph built per size."""
    with open(os.path.join(MODELS, "digits_mlp.json"), encoding="utf-8") as f:
        graph = nnvm.graph.load_json(f.read())
    with open(os.path.join(MODELS, "digits_mlp.params"), "rb") as f:
        params = nnvm.compiler.load_param_dict(f.read())
    lib = nnvm.compiler.build(graph, "reference", shape={"data": ("N", 64)}, params=params)
    assert lib.input_shapes["data"] == ("N", 64)
    samples = np.load(os.path.join(MODELS, "digits_mlp.samples.npz"))
    x = samples[samples.files[0]].astype("float32").reshape(-1, 64)[:5]
    fixed = nnvm.compiler.build(graph, "reference", shape={"data": x.shape}, params=params)
    for n in (1, 3, 5):
        np.testing.assert_allclose(lib.run(data=x[:n])[0], fixed.run(data=x)[0][:n],
                                   rtol=1e-5, atol=1e-7)
    assert lib.runs == 9
    with pytest.raises(nnvm.NNVMError, match="wrong shape"):
        lib.run(data=np.zeros((2, 63), "float32"))


def test_a_second_symbolic_dimension_builds_once_per_value_and_splits_the_batch(tmp_path):
    """``(N, T, 4)``: one build per sequence length ``T``, every batch size ``N`` split."""
    model = pooled_sequence()
    sess = nnvm.InferenceSession(model.SerializeToString(), target="reference",
                                 cache_dir=str(tmp_path))
    for n, t in ((1, 5), (3, 5), (8, 5), (3, 7), (2, 7)):
        x = np.random.default_rng(n * t).standard_normal((n, t, 4), "float32")
        _check(sess.run(None, {"x": x}), ort_run(model, {"x": x}))
    assert sess.builds == 2
    graph, params = nnvm.frontend.from_onnx(model, shape={"x": (2, 5, 4)})
    lib = nnvm.compiler.build(graph, "reference", shape={"x": ("N", "T", 4)}, params=params)
    for n, t in ((3, 6), (2, 6), (3, 5)):  # the same from build(): one build per T
        x = np.random.default_rng(n + t).standard_normal((n, t, 4), "float32")
        _check(lib.run(x=x), ort_run(model, {"x": x}))
    assert lib.builds == 2


def _sum_over_batch():
    """``x - mean(x, axis=0)``: every output sample depends on the whole batch."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    nodes = [helper.make_node("ReduceMean", ["x", "axes"], ["m"], keepdims=1),
             helper.make_node("Sub", ["x", "m"], ["y"])]
    return make_model(nodes, [x], [y], [tensor("axes", np.array([0], "int64"))], opset=18)


def test_a_batch_reduction_falls_back_to_one_build_per_size(tmp_path, caplog):
    model = _sum_over_batch()
    with caplog.at_level(logging.WARNING, logger="nnvm"):
        sess = nnvm.InferenceSession(model.SerializeToString(), target="reference",
                                     cache_dir=str(tmp_path))
    assert "reduces over the batch" in caplog.text
    for n in BATCHES:
        x = np.random.default_rng(n).standard_normal((n, 4), "float32")
        _check(sess.run(None, {"x": x}), ort_run(model, {"x": x}))
    assert sess.builds == 3


def test_cached_plan_skips_the_analysis_in_the_next_session(tmp_path, monkeypatch):
    model = small_cnn().SerializeToString()
    nnvm.InferenceSession(model, target="reference", cache_dir=str(tmp_path))
    import nnvm.compiler.symbolic_batch as sb

    monkeypatch.setattr(sb, "plan_batch", lambda *a, **k: pytest.fail("re-analysed"))
    sess = nnvm.InferenceSession(model, target="reference", cache_dir=str(tmp_path))
    assert sess.run(None, {"x": np.ones((2, 3, 8, 8), "float32")})[0].shape == (2, 5)


def test_onnx_backend_builds_once_per_sequence_length_and_splits_the_batch():
    from nnvm_onnx import backend

    model = pooled_sequence()
    rep = backend.prepare(model, target="reference")
    for n, t in ((1, 5), (4, 5), (2, 6)):
        x = np.random.default_rng(n + t).standard_normal((n, t, 4), "float32")
        _check(list(rep.run([x])), ort_run(model, {"x": x}))
    assert rep.builds == 2


# -- ONNX-ML (scikit-learn exports): rows are samples, so one build runs every batch ------------

def test_every_onnx_ml_op_has_a_batch_rule():
    """An ML op without a rule makes every model using it compile once per batch size."""
    import nnvm.ops.ml
    from nnvm.compiler.batch_axis import RULES
    from nnvm.op import OpDef

    ops = [r.name for r in nnvm.ops.ml.defs if isinstance(r, OpDef)]
    assert len(ops) >= 14 and sorted(set(ops) - set(RULES)) == []


def _iris():
    datasets = pytest.importorskip("sklearn.datasets")
    x, y = datasets.load_iris(return_X_y=True)
    return x.astype("float32"), y


def _sklearn(make_estimator):
    """A skl2onnx export (batch ``N``) of an estimator fitted on iris, and its float feed."""
    def make():
        skl2onnx = pytest.importorskip("skl2onnx")
        x, y = _iris()
        model = skl2onnx.to_onnx(make_estimator().fit(x, y), x[:1], target_opset=15)
        return model, {model.graph.input[0].name: lambda n: x[17:17 + n]}
    return make


def _forest_pipeline():  # Imputer, Scaler, TreeEnsembleClassifier, ZipMap's dicts
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(SimpleImputer(), StandardScaler(),
                         RandomForestClassifier(n_estimators=3, max_depth=3, random_state=0))


def _svr_pipeline():  # Normalizer, SVMRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import Normalizer
    from sklearn.svm import SVR

    return make_pipeline(Normalizer(), SVR())


def _binarized_linear():  # Binarizer, LinearRegressor
    from sklearn.linear_model import LinearRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import Binarizer

    return make_pipeline(Binarizer(threshold=3.0), LinearRegression())


def _labels_1d():
    """LabelEncoder then OneHotEncoder on a 1-D batch of labels ``(N,)``."""
    ml = "ai.onnx.ml"
    nodes = [helper.make_node("LabelEncoder", ["x"], ["code"], domain=ml,
                              keys_int64s=[1, 2, 3], values_int64s=[3, 1, 2]),
             helper.make_node("OneHotEncoder", ["code"], ["y"], domain=ml, cats_int64s=[1, 2, 3])]
    graph = helper.make_graph(nodes, "g",
                              [helper.make_tensor_value_info("x", TensorProto.INT64, ["N"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(ml, 2)], ir_version=8)
    return model, {"x": lambda n: np.random.default_rng(n).integers(0, 5, n)}


ML_CASES = {"forest_zipmap": _sklearn(_forest_pipeline), "svr": _sklearn(_svr_pipeline),
            "binarized_linear": _sklearn(_binarized_linear), "labels_1d": _labels_1d}


def _same_values(got, want):
    """Tensors, or ZipMap's list of ``{label: probability}`` per row, as onnxruntime's."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, list):
            assert [list(d) for d in g] == [list(d) for d in w]
            g, w = [list(d.values()) for d in g], [list(d.values()) for d in w]
        np.testing.assert_allclose(np.asarray(g, "float64"), np.asarray(w, "float64"),
                                   rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", sorted(ML_CASES))
def test_sklearn_models_run_every_batch_with_one_build(tmp_path, case):
    model, feeds = ML_CASES[case]()
    sess = nnvm.InferenceSession(model.SerializeToString(), target="reference",
                                 cache_dir=str(tmp_path))
    for n in BATCHES:
        feed = {k: make(n) for k, make in feeds.items()}
        _same_values(sess.run(None, feed), ort_run(model, feed))
    assert sess.builds == 1
