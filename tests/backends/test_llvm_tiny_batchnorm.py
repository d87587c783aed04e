"""Inference BatchNormalization on llvm against onnxruntime on small image planes that no
vector divides a row of: planes cut into whole vectors and a tail, one vector of a
multiple of 4 (6x6 = 36, 10x10 = 100) or a scalar loop (5x7 = 35, 9x3 = 27, 15x15 = 225),
a plane shorter than one vector (3x3, left to LLVM), and a 3-D and a 5-D input.

Why: a short plane (``SHORT_PLANE``) runs as a vector loop over its whole vectors and a
separate tail loop (a loop partition); the channel's scale and shift are read once per
plane. A tail or a plane boundary that is off shows up here as a wrong number against the
oracle, and the schedule test checks that the short plane really takes the vector loop."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from llvm_probe import build_onnx, ort_outputs  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

SHAPES = {
    "plane_6x6": (2, 3, 6, 6),
    "plane_5x7": (2, 3, 5, 7),
    "plane_10x10": (1, 3, 10, 10),
    "plane_9x3": (1, 5, 9, 3),
    "plane_15x15": (1, 4, 15, 15),
    "plane_3x3_under_a_vector": (3, 7, 3, 3),
    "rows_3d": (2, 3, 10),
    "volume_5d": (2, 3, 4, 4, 4),
}


def _model(shape, rng):
    c = shape[1]
    inits = [numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), n)
             for n in ("scale", "bias", "mean")]
    inits.append(numpy_helper.from_array((rng.random(c) + 0.5).astype(np.float32), "var"))
    node = helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"],
                            ["y"], epsilon=1e-5)
    f = TensorProto.FLOAT
    graph = helper.make_graph([node], "bn", [helper.make_tensor_value_info("x", f, shape)],
                              [helper.make_tensor_value_info("y", f, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_batchnorm_matches_onnxruntime(shape):
    rng = np.random.default_rng(sum(shape))
    model = _model(shape, rng)
    x = rng.standard_normal(shape).astype(np.float32)
    got = np.asarray(build_onnx(model, {"x": x}, opt_level=3).run(x=x)[0])
    want = ort_outputs(model, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("plane", [(6, 6), (5, 7), (15, 15)])
def test_short_plane_runs_in_vectors(plane):
    from tvm import te

    from nnvm_llvm.compiler import schedules

    shape = (2, 3, *plane)
    x = te.placeholder(shape, name="x")
    s = te.placeholder((3,), name="s")
    b = te.placeholder((3,), name="b")
    y = te.compute(shape, lambda n, c, h, w: x[n, c, h, w] * s[c] + b[c], name="y")
    func = te.create_prim_func([x, s, b, y])
    scheduled = schedules.schedule(func, schedules.ScheduleInfo("elemwise", 16))
    script = scheduled.script()
    assert "T.vectorized(16)" in script, script
    n = plane[0] * plane[1]
    body = n // 16 * 16
    tail = "T.vectorized" if (n - body) % 4 == 0 else "range"  # 6x6: a 4-wide vector tail
    assert f"{tail}({body}, {n})" in script, script
