"""Regressions for what the ONNX fuzzer (scripts/fuzz_onnx.py, issue 16) found: each was a raw
exception out of ``nnvm.compiler.build`` for a model onnx.checker accepts, and each must now be
an NNVMError naming the node, or simply work."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
from nnvm import sym
from nnvm.errors import ShapeError


@pytest.mark.parametrize("make,shape,got", [
    # Resize scales of -1e30 (fuzzer case 2000180): OverflowError in memory planning
    (lambda x: sym.resize(x, scales=(1.0, 1.0, -1e30, 1.0)), (1, 1, 2, 2), "-2000000000"),
    # an empty tensor with a dim past int64 (case 8338: Resize scales (1e-40, 1e30, ...))
    (lambda x: sym.broadcast_to(x, shape=(0, 1 << 62, 3)), (1, 1, 1), "4611686018427387904"),
    # 2**42 elements from tile repeats
    (lambda x: sym.tile(x, reps=(1 << 21, 1 << 21)), (1, 1), "(2097152, 2097152)"),
])
def test_impossible_output_shape_is_a_shape_error_naming_the_node(make, shape, got):
    y = make(sym.Variable("x"))
    with pytest.raises(ShapeError, match=r"node '\w+' \(op \w+\), output 'output': has an "
                                         r"impossible shape") as info:
        nnvm.compiler.build(y, target="reference", shape={"x": shape})
    assert got in str(info.value)


def _build(y, shape):
    return nnvm.compiler.build(y, target="reference", shape={"x": shape}, dtype="float32",
                               opt_level=3)


def _casts(lib) -> int:
    return sum(n.op is not None and n.op.name == "cast" for n in lib.graph.index.nodes)


def test_cast_through_string_is_not_merged_and_builds():
    """cast(cast(x, string), float32) (case 11013514): SimplifyAlgebra asked NumPy whether
    float32 -> 'string' is lossless and got a TypeError; now it leaves text casts alone."""
    x = sym.Variable("x")
    y = sym.cast(sym.cast(x, dtype="string"), dtype="float32")
    assert _casts(_build(y, (2,))) == 2


def test_lossless_cast_chain_is_still_merged():
    x = sym.Variable("x")
    y = sym.cast(sym.cast(x, dtype="float64"), dtype="float16")
    lib = _build(y, (3,))
    assert _casts(lib) == 1
    a = np.array([1.5, -2.25, 3.0], "float32")
    np.testing.assert_array_equal(lib.run(x=a)[0], a.astype("float16"))


def test_onnx_name_that_is_not_utf8_is_an_import_error():
    """One flipped byte in an input's name (fuzzer case 10): protobuf returns the name as
    bytes, and the importer's message joining input names raised a raw TypeError."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from nnvm_onnx.errors import OnnxImportError

    graph = helper.make_graph([helper.make_node("Relu", ["data"], ["y"])], "g",
                              [helper.make_tensor_value_info("data", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    blob = helper.make_model(graph).SerializeToString().replace(b"data", b"dat\xfb")
    assert isinstance(next(iter(onnx.load_from_string(blob).graph.input)).name, bytes)
    with pytest.raises(OnnxImportError, match="not valid UTF-8"):
        nnvm.frontend.from_onnx(blob, shape={"x": (2,)}, check=False)


@pytest.mark.parametrize("gamma_shape", [(3, 4), (1, 4), (4,), (3, 1)])
def test_llvm_layer_norm_broadcasts_scale_and_bias(gamma_shape):
    """layer_norm with a scale broadcast to the normalized dims (fuzzer case 22000496 on
    llvm: an ONNX LayerNormalization whose axis no longer matched its scale's rank) raised a
    raw ValueError in the llvm lowering; it now matches the reference interpreter."""
    pytest.importorskip("tvm")
    x, g, b = sym.Variable("x"), sym.Variable("g"), sym.Variable("b")
    y = sym.layer_norm(x, g, b, axis=1, epsilon=1e-5)
    rng = np.random.default_rng(0)
    params = {"g": rng.standard_normal(gamma_shape).astype("float32"),
              "b": rng.standard_normal(gamma_shape).astype("float32")}
    xv = rng.standard_normal((2, 3, 4)).astype("float32")
    shapes = {"x": (2, 3, 4), "g": gamma_shape, "b": gamma_shape}
    want, got = (nnvm.compiler.build(y, target=t, shape=shapes, params=dict(params)).run(x=xv)[0]
                 for t in ("reference", "llvm"))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("make", [
    lambda x: sym.sqrt(sym.cast(x, dtype="int64")),  # fuzzer case 23000417 (Sqrt of int64)
    lambda x: sym.broadcast_less(sym.cast(x, dtype="bool"), sym.cast(x, dtype="bool")),
])
def test_llvm_op_on_a_dtype_tvm_cannot_compile_is_an_nnvm_error(make):
    """An op on a dtype its ONNX schema forbids (onnx.checker rejects such models; with
    check=False they import) raised TVM's raw InternalError from the llvm build."""
    pytest.importorskip("tvm")
    from nnvm.errors import NNVMError

    y = make(sym.Variable("x"))
    with pytest.raises(NNVMError, match="cannot be compiled by TVM"):
        nnvm.compiler.build(y, target="llvm", shape={"x": (4,)}, dtype="float32")


def test_llvm_integer_mean_truncates_like_the_reference():
    """mean of an int tensor (fuzzer case 23001582 on llvm, a ReduceMean given int16) made
    TVM refuse an ambiguous integer '/'; now a truncating division, equal to the reference."""
    pytest.importorskip("tvm")
    y = sym.mean(sym.Variable("x"), axis=(1,))
    xv = np.array([[1, 2, 4], [-7, 0, 1], [5, 5, 6]], "int32")
    want, got = (nnvm.compiler.build(y, target=t, shape={"x": (3, 3)}, dtype="int32"
                                     ).run(x=xv)[0] for t in ("reference", "llvm"))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("groups", [-1, 0, 3])
def test_group_norm_groups_must_split_the_channels(groups):
    """num_groups -1 (fuzzer case 23002417) ran on reference through NumPy's reshape(-1) and
    crashed the llvm build; every target now refuses it when shapes are inferred."""
    x, g, b = sym.Variable("x"), sym.Variable("g"), sym.Variable("b")
    y = sym.group_norm(x, g, b, num_groups=groups, epsilon=1e-5)
    with pytest.raises(ShapeError, match=f"num_groups {groups} must be at least 1 and divide"):
        nnvm.compiler.build(y, target="reference", shape={"x": (2, 4, 3)})


def test_lp_pool_needs_a_norm_order():
    """LpPool with p = 0 (fuzzer case 23002812) took a 1/0 root: NaN on reference, a
    ZeroDivisionError in the llvm lowering; now an error naming the node."""
    from nnvm.errors import NNVMError

    y = sym.lp_pool(sym.Variable("x"), kernel_shape=(2, 2), p=0)
    with pytest.raises(NNVMError, match="p must be a norm order of at least 1, got 0"):
        nnvm.compiler.build(y, target="reference", shape={"x": (1, 3, 4, 4)})
