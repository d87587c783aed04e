"""Pointwise convs whose pixel count whole vector tiles do not divide (7x7 = 49, 14x14 = 196
pixels: every MobileNet/MNASNet/EfficientNet) run their last pixel tile overlapping the
one before it (``schedules._overlap_last_tile``): no zero-padded copy of the image, no
predicated store, every tile reading the input and writing the output in place.

Checked against onnxruntime at 1 and 2 threads on planes of 1, 15, 17, 49, 196 and 200
pixels (the first two are narrower than a vector: not this template, kept as a contrast),
channel counts no vector divides, bias, fused ReLU and residual-add epilogues, batch 2, and
a conv of few channel tiles whose pixel tiles split into parallel chunks; and the
scheduled TIR pinned down: no padding block, no predicate, the parallel loop first.
The 1x1 convs left to the channel-vector template (7x7 planes of a vector's channels) run
their tasks channel block first, rows inside (``schedules._schedule_channel_vectors``). A 7x7 plane of at least 8 channel tiles runs
its last pixel as scalars instead (test_llvm_pointwise7.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from llvm_probe import ort_outputs, skip_without_llvm

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

skip_without_llvm()
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _model(n, ic, oc, h, w, epilogue, seed):
    """A 1x1 conv (with bias) followed by ``epilogue``: "" (none), "relu", or "add_relu"
    (a residual add of the input, so ``ic == oc``, then ReLU); ``(model, feed)``."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, ic, h, w)).astype("float32")
    wt = (rng.standard_normal((oc, ic, 1, 1)) / np.sqrt(ic)).astype("float32")
    b = rng.standard_normal(oc).astype("float32")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["conv"], kernel_shape=[1, 1])]
    last = "conv"
    if epilogue == "add_relu":
        nodes.append(helper.make_node("Add", ["conv", "x"], ["sum"]))
        last = "sum"
    if epilogue:
        nodes.append(helper.make_node("Relu", [last], ["relu"]))
        last = "relu"
    nodes[-1].output[0] = "y"
    graph = helper.make_graph(
        nodes, "pointwise",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, ic, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, oc, h, w])],
        [numpy_helper.from_array(wt, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=8)
    return model, {"x": x}


@pytest.mark.parametrize("n,ic,oc,h,w,epilogue", [
    (1, 48, 48, 14, 14, ""),          # 196 pixels: 12 tiles of 16 and one overlapping
    (2, 48, 48, 14, 14, "add_relu"),  # batch 2, residual add and ReLU in the write-back
    (1, 40, 240, 14, 14, "relu"),     # MobileNet-v3's expand at 14x14
    (1, 20, 36, 10, 20, "relu"),      # 200 pixels, 6-channel tiles (36: no 8 or 16)
    (1, 24, 40, 7, 7, ""),            # 49 pixels, 5 channel tiles: chunked, overlapping
    (1, 40, 56, 7, 7, "relu"),        # 49 pixels, 56 channels: half-vector blocks
    (2, 13, 20, 1, 17, "relu"),       # 17 pixels: two 16-pixel tiles, 4-channel tiles
    (1, 24, 24, 30, 30, "add_relu"),  # 900 pixels, 3 channel tiles: chunked pixel tasks
    (1, 96, 576, 7, 7, "relu"),       # channel vectors, (channel block, row) tasks
    (2, 64, 64, 7, 7, "add_relu"),    # likewise, batch 2 and a residual add
    (1, 40, 24, 5, 5, ""),            # 25 pixels, a squeeze in half-vector blocks
    (1, 16, 32, 3, 5, "relu"),        # 15 pixels: narrower than a vector
    (2, 16, 24, 1, 1, "relu"),        # 1 pixel
])
@pytest.mark.parametrize("threads", [1, 2])
def test_pointwise_tail_matches_onnxruntime(n, ic, oc, h, w, epilogue, threads):
    check_against_onnxruntime(n, ic, oc, h, w, epilogue, threads)


def check_against_onnxruntime(n, ic, oc, h, w, epilogue, threads, target="llvm") -> None:
    """Build ``_model``'s conv at opt level 3 for ``target`` and compare it with
    onnxruntime's at ``threads`` threads."""
    import nnvm

    model, feed = _model(n, ic, oc, h, w, epilogue, seed=n * 1000 + ic + oc + h * w)
    (want,) = ort_outputs(model, feed)
    graph, params = nnvm.frontend.from_onnx(model, shape={"x": feed["x"].shape})
    lib = nnvm.compiler.build(graph, target=target, shape={"x": feed["x"].shape},
                              params=params, opt_level=3)
    assert lib.stats()["num_fallback_kernels"] == 0
    lib.set_num_threads(threads)
    got = lib.run(**feed)
    got = np.asarray(got[0] if isinstance(got, (list, tuple)) else got)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _scheduled_conv(n, ic, oc, hw) -> str:
    import nnvm.symbol as sym
    from nnvm_llvm.compiler.codegen import kernel_lowerings
    from nnvm_llvm.compiler.schedules import schedule
    from nnvm_llvm.tuning.tuner import _prepare

    rng = np.random.default_rng(hw)
    y = sym.conv2d(sym.Variable("x"), channels=oc, kernel_size=(1, 1), name="c")
    params = {"c_weight": rng.standard_normal((oc, ic, 1, 1)).astype("float32"),
              "c_bias": rng.standard_normal(oc).astype("float32")}
    graph, params = _prepare(y, {"x": (n, ic, hw, hw)}, "float32", params, 2)
    (gl,) = [gl for gl in kernel_lowerings(graph, params, 16) if gl.kind == "conv2d"]
    info = gl.schedule_info(16)
    text = str(schedule(gl.primfunc(16), info))
    assert info.applied
    return text


@pytest.mark.parametrize("n,ic,oc,hw,last", [
    (1, 48, 48, 14, 180),   # 196 pixels, 16-pixel tiles: the last starts at 180
    (2, 48, 144, 14, 180),
])
def test_overlapping_tile_replaces_padding(n, ic, oc, hw, last):
    text = _scheduled_conv(n, ic, oc, hw)
    body = text[text.index("for "):]
    assert "_pad" not in text and "T.where" not in text, text
    assert body.lstrip().startswith("for") and "T.parallel(" in body.splitlines()[0], text
    assert "T.min(" in text and f", {last})" in text, text
    assert "nnvm_overlap_tail" not in text, text  # the marker is gone after the rewrite


def test_channel_vector_pointwise_tasks_are_channel_blocks_first():
    text = _scheduled_conv(1, 96, 576, 7)
    assert "for b_c_0_i_fused in T.parallel(252)" in text, text
