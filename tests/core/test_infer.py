"""InferShape/InferType: sweeps in both directions, clear errors naming the node."""

import pytest

import nnvm
from nnvm import sym
from nnvm.compiler import graph_util
from nnvm.errors import ShapeError, TypeInferenceError


def test_backward_sweep_fills_inputs():
    x, y = sym.Variable("x"), sym.Variable("y")
    z = sym.elemwise_add(x, y, name="z")
    ishape, oshape = graph_util.infer_shape(nnvm.graph.create(z), x=(4, 2))
    assert ishape == [(4, 2), (4, 2)] and oshape == [(4, 2)]


def test_conflict_names_node_and_input():
    x, y = sym.Variable("x"), sym.Variable("y")
    z = sym.elemwise_add(x, y, name="z")
    with pytest.raises(ShapeError, match=r"node 'z' \(op elemwise_add\)"):
        graph_util.infer_shape(nnvm.graph.create(z), x=(4, 2), y=(4, 3))


def test_broadcast_error_names_node():
    z = sym.broadcast_add(sym.Variable("x"), sym.Variable("y"), name="badd")
    with pytest.raises(ShapeError, match="'badd'.*do not broadcast"):
        graph_util.infer_shape(nnvm.graph.create(z), x=(4, 2), y=(3,))


def test_unknown_input_name_lists_inputs():
    z = sym.exp(sym.Variable("x"))
    with pytest.raises(ShapeError, match="Graph inputs: x"):
        graph_util.infer_shape(nnvm.graph.create(z), q=(1,))


def test_dtype_conflict_says_insert_cast():
    z = sym.elemwise_add(sym.Variable("x", dtype="float32"), sym.Variable("y", dtype="int32"),
                         name="mix")
    with pytest.raises(TypeInferenceError, match="'mix'"):
        graph_util.infer_dtype(nnvm.graph.create(z))


def test_comparison_outputs_bool():
    z = sym.broadcast_greater(sym.Variable("x"), sym.Variable("y"))
    _, out = graph_util.infer_dtype(nnvm.graph.create(z), x="float32")
    assert out == ["bool"]


def test_build_without_shape_names_the_input():
    z = sym.exp(sym.Variable("x"), name="e")
    with pytest.raises(ShapeError, match="inputs without a shape: x"):
        nnvm.compiler.build(z, "reference")


def test_unknown_target_lists_targets():
    z = sym.exp(sym.Variable("x"))
    with pytest.raises(nnvm.NNVMError, match="Available targets: .*reference"):
        nnvm.compiler.build(z, "tpu", shape={"x": (1,)})
    with pytest.raises(nnvm.NNVMError, match="unknown option '-foo'"):
        nnvm.compiler.build(z, "reference -foo=1", shape={"x": (1,)})
