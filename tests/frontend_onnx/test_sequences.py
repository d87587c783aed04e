"""Sequences and optionals are resolved at import time into all-tensor graphs
(``importer.SeqValue``); checked against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx_test_helpers import make_model, ort_run, tensor

import nnvm
from nnvm_onnx.backend import Backend
from nnvm_onnx.errors import NeedsConstantError

H = helper.make_node
F32 = TensorProto.FLOAT


def _seq_type(elem=F32, shape=("d",)):
    return helper.make_sequence_type_proto(helper.make_tensor_type_proto(elem, list(shape)))


def _split_insert_concat_model():
    """x -> SplitToSequence -> erase first, insert y at front, take element 1 -> concat all."""
    return make_model(
        [H("SplitToSequence", ["x", "sizes"], ["seq"], axis=1),
         H("SequenceErase", ["seq", "zero"], ["seq2"]),
         H("SequenceInsert", ["seq2", "y", "zero"], ["seq3"]),
         H("SequenceAt", ["seq3", "minus_one"], ["last"]),
         H("SequenceLength", ["seq3"], ["n"]),
         H("ConcatFromSequence", ["seq3"], ["cat"], axis=1),
         H("Relu", ["cat"], ["out"])],
        [helper.make_tensor_value_info("x", F32, [2, 6]),
         helper.make_tensor_value_info("y", F32, [2, 3])],
        [helper.make_tensor_value_info("out", F32, ["o1", "o2"]),
         helper.make_tensor_value_info("last", F32, ["l1", "l2"]),
         helper.make_tensor_value_info("n", TensorProto.INT64, [])],
        [tensor("sizes", np.array([1, 2, 3], np.int64)), tensor("zero", np.array(0, np.int64)),
         tensor("minus_one", np.array(-1, np.int64))])


def test_sequence_ops_become_tensor_ops():
    model = _split_insert_concat_model()
    rng = np.random.default_rng(0)
    feed = {"x": rng.standard_normal((2, 6)).astype(np.float32),
            "y": rng.standard_normal((2, 3)).astype(np.float32)}
    graph, params = nnvm.frontend.from_onnx(model, shape={k: v.shape for k, v in feed.items()})
    ops = {n.op.name for n in graph.index.nodes if n.op is not None}
    assert ops <= {"strided_slice", "concatenate", "relu", "copy"}, ops
    lib = nnvm.compiler.build(graph, "reference", shape={k: v.shape for k, v in feed.items()},
                              params=params)
    for got, want in zip(lib.run(**feed), ort_run(model, feed)):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_sequence_inputs_and_outputs_through_the_backend():
    model = make_model([H("SequenceInsert", ["s", "t"], ["s2"]),
                        H("SequenceLength", ["s2"], ["n"])],
                       [helper.make_value_info("s", _seq_type()),
                        helper.make_tensor_value_info("t", F32, ["d"])],
                       [helper.make_value_info("s2", _seq_type()),
                        helper.make_tensor_value_info("n", TensorProto.INT64, [])])
    rep = Backend.prepare(model, target="reference")
    seq = [np.ones((2,), np.float32), np.arange(3, dtype=np.float32)]
    out, n = rep.run([seq, np.full((1,), 7, np.float32)])
    assert isinstance(out, list) and len(out) == 3 and int(n) == 3
    np.testing.assert_array_equal(out[1], seq[1])
    np.testing.assert_array_equal(out[2], [7])
    out, n = rep.run([[], np.zeros((4,), np.float32)])  # another structure, another module
    assert len(out) == 1 and int(n) == 1


def test_sequence_input_needs_its_structure():
    model = make_model([H("SequenceLength", ["s"], ["n"])],
                       [helper.make_value_info("s", _seq_type())],
                       [helper.make_tensor_value_info("n", TensorProto.INT64, [])])
    with pytest.raises(NeedsConstantError, match="shape of each element"):
        nnvm.frontend.from_onnx(model)


def test_optional_resolves_at_import():
    opt = helper.make_optional_type_proto(helper.make_tensor_type_proto(F32, ["d"]))
    model = make_model([H("OptionalHasElement", ["o"], ["has"]),
                        H("OptionalGetElement", ["o"], ["v"]),
                        H("Neg", ["v"], ["out"])],
                       [helper.make_value_info("o", opt)],
                       [helper.make_tensor_value_info("has", TensorProto.BOOL, []),
                        helper.make_tensor_value_info("out", F32, ["d"])], opset=18)
    has, out = Backend.prepare(model, target="reference").run([np.arange(3, dtype=np.float32)])
    assert bool(has) and out.tolist() == [0, -1, -2]
    with pytest.raises(nnvm.errors.NNVMError, match="is empty"):
        Backend.prepare(model, target="reference").run([None])


def test_loop_carrying_a_sequence_is_unrolled():
    body = helper.make_graph(
        [H("Identity", ["cond_in"], ["cond_out"]),
         H("Cast", ["i"], ["fi"], to=F32),
         H("Mul", ["fi", "x"], ["scaled"]),
         H("SequenceInsert", ["seq_in", "scaled"], ["seq_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_value_info("seq_in", _seq_type())],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_value_info("seq_out", _seq_type())])
    model = make_model([H("SequenceEmpty", [], ["empty"], dtype=F32),
                        H("Loop", ["trip", "cond", "empty"], ["seq"], body=body),
                        H("ConcatFromSequence", ["seq"], ["out"], axis=0, new_axis=1)],
                       [helper.make_tensor_value_info("x", F32, [2])],
                       [helper.make_tensor_value_info("out", F32, ["o1", "o2"])],
                       [tensor("trip", np.array(4, np.int64)), tensor("cond", np.array(True))])
    x = np.array([1.0, -2.0], np.float32)
    (got,) = Backend.prepare(model, target="reference").run([x])
    np.testing.assert_allclose(got, ort_run(model, {"x": x})[0])
    assert got.shape == (4, 2)


def test_sequence_map_unrolls_its_body():
    body = helper.make_graph([H("Add", ["e", "t"], ["r"])], "map",
                             [helper.make_tensor_value_info("e", F32, [3]),
                              helper.make_tensor_value_info("t", F32, [3])],
                             [helper.make_tensor_value_info("r", F32, [3])])
    model = make_model([H("SequenceConstruct", ["a", "b"], ["s"]),
                        H("SequenceMap", ["s", "t"], ["m"], body=body),
                        H("ConcatFromSequence", ["m"], ["out"], axis=0)],
                       [helper.make_tensor_value_info(n, F32, [3]) for n in "abt"],
                       [helper.make_tensor_value_info("out", F32, ["o1"])])
    feed = {n: np.arange(3, dtype=np.float32) * (k + 1) for k, n in enumerate("abt")}
    (got,) = Backend.prepare(model, target="reference").run(feed)
    np.testing.assert_allclose(got, ort_run(model, feed)[0])


def test_feeding_a_sequence_to_a_tensor_op_is_a_clear_error():
    # The checker rejects such models, so import without it: the importer must still say so.
    graph = helper.make_graph([H("SequenceConstruct", ["a"], ["s"]), H("Relu", ["s"], ["out"])],
                              "g", [helper.make_tensor_value_info("a", F32, [3])],
                              [helper.make_tensor_value_info("out", F32, [3])])
    bad = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    bad.ir_version = 8
    with pytest.raises(nnvm.errors.NNVMError, match="is a sequence"):
        nnvm.frontend.from_onnx(bad, check=False)
