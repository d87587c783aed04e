"""``dynamic_quantize_linear`` as one TIR kernel (``int8_quantize``): vector min/max over
whole vectors plus a scalar tail, parallel chunks above ``PARALLEL_MIN_WORK`` elements, one
quantising pass. Every output must equal onnxruntime's bit for bit: exact ties (round half
to even), constant inputs (a zero range: scale 1), sizes on both sides of the vector width
and a tensor large enough for the parallel path.
"""

from __future__ import annotations

import numpy as np
import pytest

import nnvm

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
pytest.importorskip("nnvm_llvm", reason="llvm backend not installed")
pytest.importorskip("tvm", reason="the llvm compiler needs TVM (apache-tvm)")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as T, helper  # noqa: E402


def _dql_model(shape):
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"])
    graph = helper.make_graph(
        [node], "dql", [helper.make_tensor_value_info("x", T.FLOAT, shape)],
        [helper.make_tensor_value_info("q", T.UINT8, shape),
         helper.make_tensor_value_info("s", T.FLOAT, []),
         helper.make_tensor_value_info("z", T.UINT8, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _compare(xs: list[np.ndarray]) -> None:
    """Build once for the shape, run every input, compare with onnxruntime exactly."""
    shape = xs[0].shape
    model = _dql_model(shape)
    g, params = nnvm.frontend.from_onnx(model, shape={"x": shape})
    lib = nnvm.compiler.build(g, target="llvm", shape={"x": shape}, params=params)
    assert lib.stats()["num_fallback_kernels"] == 0, lib.stats()["unsupported_ops"]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for x in xs:
        for name, got, want in zip("qsz", lib.run(x=x), sess.run(None, {"x": x})):
            got = np.asarray(got)
            assert got.dtype == want.dtype, name
            np.testing.assert_array_equal(got.reshape(want.shape), want, err_msg=name)


def test_exact_ties_round_half_to_even():
    """Range [-27.5, 100]: scale 127.5 / 255 = 0.5 exactly, so x = k / 4 gives x / scale =
    k / 2, half of them exact ties; rounding half away from zero fails this."""
    k = np.arange(-110, 401)
    x = (k / 4).astype("float32")
    rng = np.random.default_rng(0)
    _compare([x.reshape(1, -1), rng.permutation(x).reshape(1, -1)])


@pytest.mark.parametrize("value", [0.0, 3.25, -7.0])
def test_constant_inputs(value):
    """All zeros: zero range, scale 1 and zero point 0; a positive or negative constant
    still has a range (0 is always in it)."""
    _compare([np.full((3, 70), value, "float32")])


@pytest.mark.parametrize("shape", [(1, 1), (1, 63), (1, 64), (2, 65), (3, 129), (5, 7, 11)])
def test_sizes_around_the_vector_width(rng, shape):
    """Whole vectors, a tail, or only a tail: the minimum or maximum placed in each part."""
    xs = []
    for where in (0, -1, None):
        x = (rng.standard_normal(shape) * 5 + 1).astype("float32")
        if where is not None:
            flat = x.reshape(-1)
            flat[where] = -40.0
            flat[(where + 1) % flat.size] = 60.0
        xs.append(x)
    _compare(xs)


def test_large_input_takes_the_parallel_chunks(rng):
    """Above ``PARALLEL_MIN_WORK`` elements the min/max runs in chunks and the quantising
    pass in parallel; the extremes in the last chunk and in the tail past the chunks."""
    from nnvm_llvm.compiler.schedules import PARALLEL_MIN_WORK

    n = PARALLEL_MIN_WORK + 1000 + 37
    x = (rng.standard_normal((1, n)) * 2).astype("float32")
    y = x.copy()
    y[0, -1], y[0, n - 700] = -30.0, 45.0
    _compare([x, y])
