"""Softmax and log-softmax on llvm against onnxruntime on the row widths the row template
treats apart: multiples of a vector, rows split into whole vectors and a scalar tail (1500,
91, 37), rows of one vector or less (20, 8), rows under half a vector (2, topi's rule) and
1-element rows, over the last axis and an inner one; a NaN or inf poisons only its own row.

Why: the output row and the row of exponentials run in whole vectors and a tail of under
one vector (a loop partition; one- and two-element tails included), the exponentials are
computed once into a row buffer that the sum and the output both read, and the
normalisation multiplies by the row's reciprocal sum; a tail or a row boundary that is off
shows up here as a wrong number against the oracle."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")
pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import nnvm  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

# id: (input shape, axis)
CASES = {
    "whisper_rows_1500": ((1, 3, 1500), -1),
    "rows_91": ((1, 37, 91), -1),
    "rows_37": ((2, 5, 37), -1),
    "rows_128": ((1, 9, 128), -1),
    "rows_49_one_element_tail": ((1, 2, 49, 49), -1),
    "rows_34_two_element_tail": ((5, 7, 34), -1),
    "rows_6625_long_one_element_tail": ((1, 3, 6625), -1),
    "rows_197": ((1, 2, 13, 197), -1),
    "rows_40_half_vectors": ((1, 8, 40, 40), 3),
    "rows_20": ((10, 20), 1),
    "rows_8": ((1, 2, 8, 8), -1),
    "rows_12": ((3, 4, 12), -1),
    "rows_12_in_pairs": ((1, 8, 40, 12), -1),
    "rows_12_odd_row_count": ((3, 5, 12), -1),
    "rows_9_in_pairs": ((2, 9, 9), -1),
    "rows_4": ((6, 4), -1),
    "rows_20_inner_axis": ((10, 20, 3), 1),
    "rows_2": ((1, 55, 75, 2), 3),
    "one_element_rows": ((6, 1), -1),
}


def _both(op, shape, axis, x):
    node = helper.make_node(op, ["x"], ["y"], axis=axis)
    f = TensorProto.FLOAT
    graph = helper.make_graph([node], "sm", [helper.make_tensor_value_info("x", f, shape)],
                              [helper.make_tensor_value_info("y", f, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    g, params = nnvm.frontend.from_onnx(model, shape={"x": x.shape})
    lib = nnvm.compiler.build(g, target="llvm", opt_level=3, shape={"x": x.shape},
                              params=params)
    got = np.asarray(lib.run(x=x)[0])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return got, sess.run(None, {"x": x})[0]


def _template(shape, lanes: int = 16):
    """The row template's scheduled kernel of softmax over ``shape`` (``_row_softmax``, the
    rule of rows that ``softmax_packed``'s kernel does not take, or that come from a fused
    stage), as text, and its ScheduleInfo."""
    from nnvm_llvm.compiler.lowering_softmax import _row_softmax
    from nnvm_llvm.compiler.schedules import ScheduleInfo, schedule
    from tvm import te

    x = te.placeholder(shape, "float32", name="x")
    info = ScheduleInfo("softmax", lanes)
    func = te.create_prim_func([x, _row_softmax(x, lanes, False, "softmax")])
    return schedule(func, info).script(), info


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_softmax_matches_onnxruntime(rng, op, case):
    shape, axis = CASES[case]
    x = (rng.standard_normal(shape) * 4).astype("float32")
    got, want = _both(op, list(shape), axis, x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_inf_poisons_only_its_row(rng, bad):
    shape = (4, 1500)
    x = rng.standard_normal(shape).astype("float32")
    x[2, 1497] = bad  # in the scalar tail of the row (1500 = 93 x 16 + 12)
    got, want = _both("Softmax", list(shape), -1, x)
    assert np.isnan(got[2]).any() and not np.isnan(got[[0, 1, 3]]).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[[0, 1, 3]], want[[0, 1, 3]], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("width", [1500, 128, 37])
def test_exponentials_are_computed_once(width):
    """Every ``exp`` of the row template's kernel writes the row of exponentials, a stage
    the sum and the output both read (inlined, each exponential was computed twice); a row
    no vector divides has it twice, once in its whole vectors and once in its tail."""
    text, info = _template((2, 3, width))
    # the exponential is fastmath.exp_nonpositive, a Let chain that binds ``fexpn_t``
    exps = [line.strip() for line in text.splitlines() if "T.exp(" in line or "fexpn_t:" in line]
    assert info.applied and len(exps) == (1 if width % 16 == 0 else 2), text
    assert all(line.split("[")[0].endswith("_exp") for line in exps), exps


def test_row_partials_reduce_in_halves():
    """A short row's 8 partial sums (and maxima) are reduced 8 -> 4 -> 2 -> 1 in vector
    steps, not a chain of 8 dependent scalar steps: three partial stages per statistic."""
    text, info = _template((3, 5, 40))
    assert info.applied
    for stat in ("max0", "sum0"):
        assert text.count(f'_{stat}_rf_update")') == 3, text
    assert "T.vectorized(4)" in text and "T.vectorized(2)" in text, text


@pytest.mark.parametrize("rows, width, paired", [(320, 12, True), (15, 12, False),
                                                 (4, 20, False)])
def test_short_softmax_rows_run_in_pairs(rows, width, paired):
    """Softmax rows of at most one vector are computed two at a time in an unrolled loop
    (their dependent chains overlap) when the row count is even; longer rows are not."""
    text, info = _template((rows, width))
    assert info.applied and ("T.unroll(2)" in text) == paired, text


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("width", [8, 20, 37, 49, 91, 128, 1500])
def test_softmax_rows_at_the_exp_edges(rng, op, width):
    """Rows with masked (-inf, -1e9) entries, huge logits, and a spread beyond 88 (so some
    shifted inputs fall where softmax's exp, ``fastmath.exp_nonpositive``, clamps and
    gives 0), in whole vectors and tails."""
    x = (rng.standard_normal((6, width)) * 4).astype("float32")
    x[0, ::3] = -np.inf                    # attention mask of -inf (row max stays finite)
    x[1, 1::2] = -1e9                      # additive mask
    x[2] *= 1e4                            # spread far beyond 88: most exps are 0
    x[3] += 3e4                            # large but equal-scale logits
    x[4, :] = np.linspace(-100, 0, width)  # shifted inputs across the clamp at -88
    x[5, -1] = 80.0                        # one dominant logit in the last (tail) element
    got, want = _both(op, list(x.shape), -1, x)
    finite = np.isfinite(want)
    assert np.array_equal(finite, np.isfinite(got)), (got, want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-6)
