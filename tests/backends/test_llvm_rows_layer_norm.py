"""Layer normalisation on llvm against onnxruntime, all three outputs (Y, Mean,
InvStdDev), on rows no vector divides, 1-element rows, several normalised axes, and a NaN
that must poison only its own row.

Why: layer norm writes its per-row statistics as outputs whether or not the graph reads
them, and the row template now schedules such kernels (the statistics outputs merged into
the row loop, the reductions computed under it in vector partial sums); before, a second
output sent the whole kernel to the unscheduled fallback, each statistic a scalar pass."""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("tvm")
pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import nnvm  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

# id: (input shape, axis)
CASES = {
    "vit_197x128": ((1, 197, 128), -1),
    "odd_rows_37": ((3, 5, 37), -1),
    "one_element_rows": ((4, 3, 1), -1),
    "two_axes_7x9": ((2, 3, 7, 9), 2),
    "wide_rows_3199": ((1, 2, 3199), -1),
}


def _model(shape, axis):
    norm = list(shape[axis % len(shape):])
    stat = [d if i < axis % len(shape) else 1 for i, d in enumerate(shape)]
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y", "m", "i"],
                            axis=axis, epsilon=1e-5)
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [node], "ln", [helper.make_tensor_value_info(n, f, sh) for n, sh in
                       (("x", list(shape)), ("s", norm), ("b", norm))],
        [helper.make_tensor_value_info("y", f, list(shape)),
         helper.make_tensor_value_info("m", f, stat), helper.make_tensor_value_info("i", f, stat)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, norm


def _both(shape, axis, x, rng):
    model, norm = _model(shape, axis)
    feed = {"x": x, "s": (rng.random(norm) + 0.5).astype("float32"),
            "b": rng.standard_normal(norm).astype("float32")}
    shapes = {k: v.shape for k, v in feed.items()}
    graph, params = nnvm.frontend.from_onnx(model, shape=shapes)
    lib = nnvm.compiler.build(graph, target="llvm", opt_level=3, shape=shapes, params=params)
    got = [np.asarray(v) for v in lib.run(**feed)]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return got, sess.run(None, feed)


@pytest.mark.parametrize("case", sorted(CASES))
def test_layer_norm_outputs_match_onnxruntime(rng, case):
    shape, axis = CASES[case]
    x = (rng.standard_normal(shape) * 2 + 0.5).astype("float32")
    got, want = _both(shape, axis, x, rng)
    assert len(got) == 3
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.reshape(w.shape), w, rtol=1e-4, atol=1e-4)


def test_nan_poisons_only_its_row(rng):
    shape = (2, 5, 40)
    x = rng.standard_normal(shape).astype("float32")
    x[1, 3, 17] = np.nan
    (y, m, i), want = _both(shape, -1, x, rng)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want[0]))
    assert np.isnan(y[1, 3]).all() and np.isnan(y).sum() == 40
    ok = ~np.isnan(want[0])
    np.testing.assert_allclose(y[ok], want[0][ok], rtol=1e-4, atol=1e-4)


def test_statistics_are_computed_under_the_row_loop():
    """The scheduled kernel has one loop over rows with every block inside it: the two
    reductions in vector partial sums (half a vector on a row this short), the normalised
    row, and both statistics outputs."""
    from nnvm import sym
    from nnvm_llvm.compiler.codegen import kernel_lowerings
    from nnvm_llvm.compiler.schedules import schedule

    x, s, b = sym.Variable("x"), sym.Variable("s"), sym.Variable("b")
    y = sym.layer_norm(x, s, b, axis=-1, epsilon=1e-5)
    rng = np.random.default_rng(0)
    params = {"s": rng.random(128).astype("float32"), "b": rng.random(128).astype("float32")}
    graph, params = nnvm.compiler.optimize(y, shape={"x": (1, 197, 128)}, params=params)
    (gl,) = kernel_lowerings(graph, params, 16)
    info = gl.schedule_info(16)
    text = schedule(gl.primfunc(16), info).script()
    assert info.applied, text
    top = re.findall(r"^    for (\w+) in", text, re.M)
    assert len(top) == 1, text  # one row loop at the top, nothing after it
    # two partial sums, inits included
    assert len(re.findall(r"T\.vectorized\(8\)", text)) >= 4, text
