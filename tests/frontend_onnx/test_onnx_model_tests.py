"""Cases from the onnx wheel's own model tests (benchmarks/corpus, source onnx-testdata) that
need importer rules beyond the node suite, rebuilt by hand so they run without the corpus."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from onnx_test_helpers import make_model, nnvm_run, ort_run  # noqa: E402

F = TensorProto.FLOAT


def _prelu_model(opset: int, slope_shape: tuple[int, ...], x_shape: tuple[int, ...]):
    """PRelu of an (N, C, ...) input by a slope given as a graph input."""
    x_shape = list(x_shape)
    return make_model([helper.make_node("PRelu", ["x", "slope"], ["y"])],
                      [helper.make_tensor_value_info("x", F, x_shape),
                       helper.make_tensor_value_info("slope", F, list(slope_shape))],
                      [helper.make_tensor_value_info("y", F, x_shape)], opset=opset)


@pytest.mark.parametrize("rank", [3, 4])
def test_legacy_prelu_slope_is_per_channel(rank):
    """PyTorch's exporter wrote opset-6 PRelu with a (C,) slope under legacy broadcast (aligned
    to axis 1). onnxruntime has no PRelu(6) kernel, so the oracle is onnxruntime on the same
    computation at opset 7 with the slope spelled (C, 1, ..., 1)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 4, 5)[:rank]).astype(np.float32)
    slope = rng.uniform(0.1, 0.9, 3).astype(np.float32)
    want = ort_run(_prelu_model(7, (3,) + (1,) * (rank - 2), x.shape),
                   {"x": x, "slope": slope.reshape((3,) + (1,) * (rank - 2))})
    got = nnvm_run(_prelu_model(6, (3,), x.shape), {"x": x, "slope": slope})
    np.testing.assert_allclose(np.asarray(got[0]), want[0], rtol=1e-6, atol=0)


def test_prelu_opset7_keeps_numpy_broadcast():
    """From opset 7 a 1-D slope broadcasts numpy-style, against the last axis."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 5)).astype(np.float32)
    slope = rng.uniform(0.1, 0.9, 5).astype(np.float32)
    model = _prelu_model(7, (5,), x.shape)
    np.testing.assert_allclose(np.asarray(nnvm_run(model, {"x": x, "slope": slope})[0]),
                               ort_run(model, {"x": x, "slope": slope})[0], rtol=1e-6, atol=0)


def _expand_model():
    """Expand whose target shape is a graph input (onnx's expand_shape_model tests)."""
    return make_model([helper.make_node("Expand", ["x", "shape"], ["y"])],
                      [helper.make_tensor_value_info("x", F, [3, 1]),
                       helper.make_tensor_value_info("shape", TensorProto.INT64, [3])],
                      [helper.make_tensor_value_info("y", F, [None, None, None])], opset=9)


@pytest.mark.parametrize("target", ["reference", "llvm"])
@pytest.mark.parametrize("shape", [(2, 1, 6), (1, 3, 1), (3, 3, 4)])
def test_expand_shape_graph_input_is_read_at_run_time(target, shape, caplog):
    """Not frozen and static_shapes off, the shape input becomes a run-time value (the host
    tail) and one warning says how to compile it instead."""
    if target == "llvm":
        pytest.importorskip("nnvm_llvm")
    x = np.arange(3, dtype=np.float32).reshape(3, 1)
    feed = {"x": x, "shape": np.array(shape, np.int64)}
    with caplog.at_level("WARNING", logger="nnvm.onnx"):
        got = nnvm_run(_expand_model(), feed, target=target)
    np.testing.assert_array_equal(np.asarray(got[0]), ort_run(_expand_model(), feed)[0])
    warned = [r.getMessage() for r in caplog.records if r.name == "nnvm.onnx"]
    assert len(warned) == 1 and "--freeze shape=VALUE" in warned[0]


def test_expand_shape_graph_input_with_static_shapes_names_it():
    """static_shapes=True (the onnx.backend adapter) still refuses, naming the input."""
    from nnvm_onnx.errors import NeedsConstantError

    import nnvm

    with pytest.raises(NeedsConstantError) as info:
        nnvm.frontend.from_onnx(_expand_model(), shape={"x": (3, 1), "shape": (3,)},
                                static_shapes=True)
    assert info.value.inputs == ("shape",)


def _split_to_sequence_model():
    """SplitToSequence by a split that is a graph input (onnx's sequence_model8), then the
    items read back with SequenceAt."""
    h = helper.make_node
    nodes = [h("SplitToSequence", ["x", "splits"], ["seq"], axis=1),
             h("SequenceAt", ["seq", "zero"], ["first"]),
             h("SequenceAt", ["seq", "two"], ["last"])]
    inits = [helper.make_tensor("zero", TensorProto.INT64, [], [0]),
             helper.make_tensor("two", TensorProto.INT64, [], [2])]
    return make_model(nodes, [helper.make_tensor_value_info("x", F, [2, 7]),
                              helper.make_tensor_value_info("splits", TensorProto.INT64, [3])],
                      [helper.make_tensor_value_info("first", F, [2, None]),
                       helper.make_tensor_value_info("last", F, [2, None])], inits, opset=12)


@pytest.mark.parametrize("target", ["reference", "llvm"])
@pytest.mark.parametrize("splits", [(1, 2, 4), (0, 7, 0), (3, 3, 1)])
def test_split_to_sequence_by_graph_input(target, splits):
    if target == "llvm":
        pytest.importorskip("nnvm_llvm")
    feed = {"x": np.arange(14, dtype=np.float32).reshape(2, 7),
            "splits": np.array(splits, np.int64)}
    got = nnvm_run(_split_to_sequence_model(), feed, target=target)
    for g, w in zip(got, ort_run(_split_to_sequence_model(), feed)):
        np.testing.assert_array_equal(np.asarray(g), w)


def test_training_gradient_matches_the_analytic_derivative():
    """ai.onnx.preview.training Gradient of y = (a + b) * a (onnx's gradient_of_add_and_mul):
    onnxruntime has no Gradient kernel, so the oracle is onnxruntime evaluating the analytic
    derivatives dy/da = 2a + b and dy/db = a."""
    h = helper.make_node
    vi = [helper.make_tensor_value_info(n, F, [2, 3]) for n in ("a", "b")]
    grads = [helper.make_tensor_value_info(n, F, [2, 3]) for n in ("y", "dy_da", "dy_db")]
    graph = helper.make_graph(
        [h("Add", ["a", "b"], ["s"]), h("Mul", ["s", "a"], ["y"]),
         h("Gradient", ["a", "b"], ["dy_da", "dy_db"], xs=["a", "b"], y="y",
           domain="ai.onnx.preview.training")], "grad", vi, grads)
    model = helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 12), helper.make_opsetid("ai.onnx.preview.training", 1)])
    model.ir_version = 8
    analytic = make_model([h("Add", ["a", "b"], ["s"]), h("Mul", ["s", "a"], ["y"]),
                           h("Add", ["s", "a"], ["dy_da"]), h("Identity", ["a"], ["dy_db"])],
                          vi, grads, opset=12)
    rng = np.random.default_rng(2)
    feed = {k: rng.standard_normal((2, 3)).astype(np.float32) for k in ("a", "b")}
    got = nnvm_run(model, feed)
    for g, w in zip(got, ort_run(analytic, feed)):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-6, atol=1e-6)


def test_slice_of_a_graph_input_with_constant_bounds_stays_static(caplog):
    """Only shape-like inputs are read at run time: a graph input as Slice's *data* has a
    given shape, so the slice compiles (ddddocr-det's first Slice once went to the host tail
    and its next Conv could not import)."""
    import nnvm
    from onnx import numpy_helper

    bounds = [numpy_helper.from_array(np.array(v, np.int64), n)
              for n, v in (("s", [1]), ("e", [3]), ("a", [1]))]
    model = make_model([helper.make_node("Slice", ["x", "s", "e", "a"], ["y"])],
                       [helper.make_tensor_value_info("x", F, [1, 4, 5])],
                       [helper.make_tensor_value_info("y", F, [1, 2, 5])], initializers=bounds)
    with caplog.at_level("WARNING", logger="nnvm"):
        graph, _ = nnvm.frontend.from_onnx(model, shape={"x": (1, 4, 5)})
    assert not [r for r in caplog.records if "read at run time" in r.getMessage()]
    assert all(n.op is None or n.op.name != "dynamic_slice" for n in graph.index.nodes)
    x = np.arange(20, dtype=np.float32).reshape(1, 4, 5)
    np.testing.assert_array_equal(np.asarray(nnvm_run(model, {"x": x})[0]), x[:, 1:3])
