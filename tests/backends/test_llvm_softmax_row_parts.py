"""Softmax and log-softmax rows whose tail (past the whole vectors) is over half a vector,
reduced in three parts (whole vectors, a half vector, the rest), on llvm against
onnxruntime: every row length 1..24 and a few longer ones (28, 44, 91, 268), with rows
masked by -inf (attention masks) in each part, the whole tail included. Rows dividing a
vector or at least a vector long take ``softmax_packed``'s kernel instead (its own tests:
test_llvm_softmax_packed.py) and stay here as end-to-end cases; the split itself is
checked on the row template's TE (``_row_softmax``, for rows of 9 to 15 at 16 lanes and
for inputs from a fused stage).

Why: the row maximum and the sum are combined over the parts; a part boundary that is off,
or a part that is all -inf, shows up as a wrong number (or a NaN) against the oracle."""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("tvm")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from test_llvm_rows_softmax import _both  # noqa: E402  (one-node model, nnvm and the oracle)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("width", [*range(1, 25), 28, 44, 91, 268])
def test_row_parts_match_onnxruntime(rng, op, width):
    x = (rng.standard_normal((6, 5, width)) * 4).astype("float32")
    x[0, 0, : width // 2] = -np.inf  # the first part masked
    x[1, 1, width - (width % 16 or 16) // 2:] = -np.inf  # the end of the tail masked
    x[2, 2, 16:] = -np.inf  # the whole tail masked (rows past a vector)
    x[3, 3, 1:] = -np.inf  # one element left
    got, want = _both(op, list(x.shape), -1, x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("lanes, width, parts", [(16, 28, 3), (16, 91, 3), (16, 20, 2),
                                                 (16, 16, 1), (8, 12, 1), (8, 13, 3)])
def test_tail_over_half_a_vector_is_split(lanes, width, parts):
    """The row maximum is reduced in one part per piece: whole vectors, then a tail over
    half a vector as a half vector and the rest (the target's lanes, never a fixed 16)."""
    from nnvm_llvm.compiler.lowering_softmax import _row_softmax
    from tvm import te

    x = te.placeholder((4, width), "float32", name="x")
    text = te.create_prim_func([x, _row_softmax(x, lanes, False, "softmax")]).script()
    assert len(set(re.findall(r'sblock\("\w+_max(\d)"\)', text))) == parts, text
