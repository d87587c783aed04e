"""Grouped and N-d convolutions on llvm against the reference target and onnxruntime.

Why: 3-D convs (the ``conv`` op, lowered by ``conv_nd.blocked_conv`` and scheduled by the
``conv_nd`` template) and grouped 1-D/2-D convs (``conv2d`` with packed per-group channel
blocks, or the plain reduction when no block divides a group) each have their own path;
this grid crosses groups 2/3/4/8, odd channel counts per group, strides, dilations,
asymmetric padding, bias and batch 2 over all three spatial ranks, so a tile, a padded
channel block or a group boundary that is off by one shows up as a wrong number.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("tvm")

import nnvm  # noqa: E402
from test_llvm_conv_shapes import _model  # noqa: E402  (one-Conv ONNX model builder)

# id: (input shape, weight shape, strides, pads, dilations, group)
CASES = {
    # grouped 1-D (imported as conv2d over a height-1 image)
    "1d_g2_cpg1": ((2, 2, 17), (4, 1, 3), (1,), (1, 1), (1,), 2),
    "1d_g3_cpg5_stride2_dil2": ((2, 15, 23), (9, 5, 3), (2,), (2, 1), (2,), 3),
    "1d_g4_cpg8_wav2vec_posconv": ((1, 32, 19), (32, 8, 16), (1,), (8, 8), (1,), 4),
    "1d_g8_cpg7": ((2, 56, 13), (40, 7, 5), (1,), (0, 3), (1,), 8),
    # grouped 2-D: blocked (8/16/64 channels per group) and plain (odd channels per group)
    "2d_g2_cpg3": ((2, 6, 9, 8), (10, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 2),
    "2d_g3_cpg5_stride2": ((2, 15, 11, 10), (21, 5, 3, 3), (2, 2), (1, 0, 2, 1), (1, 1), 3),
    "2d_g4_cpg16_dil2": ((2, 64, 12, 12), (64, 16, 3, 3), (1, 1), (2, 2, 2, 2), (2, 2), 4),
    "2d_g8_cpg8_regnet": ((2, 64, 14, 14), (64, 8, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 8),
    "2d_g2_cpg64": ((1, 128, 7, 7), (128, 64, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 2),
    "2d_g4_cpg1_out3": ((2, 4, 8, 7), (12, 1, 2, 3), (1, 2), (0, 1, 1, 0), (2, 1), 4),
    # 3-D (the conv op): plain, odd channels, padding, stride, dilation, groups
    "3d_c3d_like": ((1, 3, 6, 14, 14), (16, 3, 3, 3, 3), (1, 1, 1), (1,) * 6, (1, 1, 1), 1),
    "3d_odd_oc_asym_pad": ((2, 3, 5, 6, 7), (5, 3, 2, 3, 2), (2, 1, 2), (1, 0, 1, 0, 1, 2),
                           (1, 2, 1), 1),
    "3d_oc17_prime": ((1, 4, 4, 5, 9), (17, 4, 1, 3, 3), (1, 1, 1), (0, 1, 1, 0, 1, 1),
                      (1, 1, 1), 1),
    "3d_video_strided": ((1, 16, 4, 10, 10), (32, 16, 3, 3, 3), (1, 2, 2), (1,) * 6,
                         (1, 1, 1), 1),
    "3d_g2_cpg2": ((2, 4, 4, 5, 4), (6, 2, 3, 3, 3), (1, 1, 1), (0,) * 6, (1, 1, 1), 2),
    "3d_g4_cpg8_dil2": ((1, 32, 6, 7, 8), (32, 8, 2, 2, 2), (1, 1, 1), (1,) * 6, (2, 2, 2), 4),
    "3d_g3_cpg3_stride2": ((2, 9, 5, 5, 5), (12, 3, 2, 2, 2), (2, 2, 2), (1,) * 6,
                           (1, 1, 1), 3),
}


def _run(model, xs, target, x):
    graph, params = nnvm.frontend.from_onnx(model, shape={"x": xs})
    lib = nnvm.compiler.build(graph, target=target, shape={"x": xs}, params=params)
    return lib, lib.run(x=x)[0]


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_grouped_and_nd_conv_match_reference(case, bias):
    xs, ws, strides, pads, dil, group = CASES[case]
    model = _model(xs, ws, strides, pads, dil, group, bias)
    x = np.random.default_rng(1).standard_normal(xs).astype("float32")
    _, want = _run(model, xs, "reference", x)
    lib, got = _run(model, xs, "llvm", x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert lib.stats().get("num_fallback_kernels", 0) == 0
    ort = pytest.importorskip("onnxruntime")
    oracle = ort.InferenceSession(model.SerializeToString(),
                                  providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, oracle, rtol=1e-4, atol=1e-4)


# id: (input shape, weight shape, strides, pads (begin + end), dilations, group)
TEMPLATE_CASES = {
    "2d_g8_cpg6": ((2, 48, 9, 10), (48, 6, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 8),
    "2d_g3_cpg3_stride2": ((1, 9, 11, 9), (9, 3, 3, 3), (2, 2), (1, 0, 1, 2), (1, 1), 3),
    "2d_g2_cpg5_dil2": ((1, 10, 12, 13), (14, 5, 3, 2), (1, 1), (2, 1, 2, 1), (2, 2), 2),
    "3d_g4_cpg7": ((1, 28, 3, 5, 6), (12, 7, 2, 3, 3), (1, 1, 2), (0, 1, 1, 1, 1, 0),
                   (1, 1, 1), 4),
}


@pytest.mark.parametrize("case", sorted(TEMPLATE_CASES))
def test_blocked_kernel_under_conv_nd_template(case):
    """``conv_nd.blocked_conv`` register-tiled by the ``conv_nd`` template, compiled
    directly: the path of grouped ``conv2d`` with odd channels per group once its group gets
    the ``conv_nd`` kind, and of every fp32 ``conv``. The template must apply (no silent
    fallback to the plain loop nest) and match the reference kernel."""
    import tvm
    import tvm.runtime
    from tvm import te

    from nnvm.ops.nn_nd import _conv_ref
    from nnvm_llvm.compiler import conv_nd, schedules

    xs, ws, strides, pads, dil, group = TEMPLATE_CASES[case]
    nsp = len(xs) - 2
    attrs = {"strides": strides, "pads": pads, "dilations": dil, "groups": group}
    rng = np.random.default_rng(3)
    xv, wv = rng.standard_normal(xs).astype("float32"), rng.standard_normal(ws).astype("float32")
    bv = rng.standard_normal(ws[0]).astype("float32")
    want = _conv_ref(attrs, xv, wv, bv)
    x, w = te.placeholder(xs, name="x"), te.placeholder(ws, name="w")
    b = te.placeholder((ws[0],), name="b")
    y = conv_nd.blocked_conv(x, w, b, strides, pads[:nsp], dil, group, want.shape, "float32",
                             "conv", 16)
    info = schedules.ScheduleInfo("conv_nd", 16)
    func = schedules.schedule(te.create_prim_func([x, w, b, y]), info)
    assert info.applied
    lib = tvm.compile(tvm.IRModule({"main": func}), target="llvm")
    args = [tvm.runtime.tensor(a) for a in (xv, wv, bv, np.zeros(want.shape, "float32"))]
    lib["main"](*args)
    np.testing.assert_allclose(args[-1].numpy(), want, rtol=1e-4, atol=1e-4)


def test_conv_nd_knobs_first_choice_is_the_untuned_kernel():
    """``nnvm tune`` over the ``conv_nd`` template: every knob lists distinct choices, the
    heuristic's first (the same TIR as no knobs), and every other choice still applies."""
    import tvm
    from tvm import te

    from nnvm_llvm.compiler import conv_nd, schedules

    x = te.placeholder((1, 32, 4, 12, 14), name="x")
    w = te.placeholder((48, 32, 3, 3, 3), name="w")
    y = conv_nd.blocked_conv(x, w, None, (1, 1, 1), (1, 1, 1), (1, 1, 1), 1,
                             (1, 48, 4, 12, 14), "float32", "conv", 16)
    func = te.create_prim_func([x, w, y])
    space = schedules.knob_space(func, schedules.ScheduleInfo("conv_nd", 16))
    assert set(space) == {"reg_h", "reg_n", "rc_bn", "unroll"}
    assert space["reg_h"][0] == 1  # 14 columns: enough accumulators in one row
    assert all(len(set(map(repr, v))) == len(v) for v in space.values()), space
    plain = schedules.schedule(func, schedules.ScheduleInfo("conv_nd", 16))
    first = schedules.schedule(func, schedules.ScheduleInfo(
        "conv_nd", 16, knobs={k: v[0] for k, v in space.items()}))
    tvm.ir.assert_structural_equal(plain, first)
    for knob, choices in space.items():
        for choice in choices[1:]:
            info = schedules.ScheduleInfo("conv_nd", 16, knobs={knob: choice})
            schedules.schedule(func, info)
            assert info.applied, (knob, choice)


def test_narrow_conv_nd_tiles_rows_too():
    """A 3-D conv two columns wide (an ONNX test model's shape) takes rows of the next axis
    into its register tile (``reg_h``), so its FMA chains overlap; the kernel stays exact."""
    import tvm
    from tvm import te

    from nnvm_llvm.compiler import conv_nd, schedules

    rng = np.random.default_rng(3)
    xv = rng.standard_normal((2, 4, 4, 5, 4)).astype("float32")
    wv = rng.standard_normal((6, 2, 3, 3, 3)).astype("float32")
    x, w = te.placeholder(xv.shape, name="x"), te.placeholder(wv.shape, name="w")
    y = conv_nd.blocked_conv(x, w, None, (1, 1, 1), (0, 0, 0), (1, 1, 1), 2,
                             (2, 6, 2, 3, 2), "float32", "conv", 16)
    func = te.create_prim_func([x, w, y])
    space = schedules.knob_space(func, schedules.ScheduleInfo("conv_nd", 16))
    assert space["reg_n"][0] == 2 and space["reg_h"][0] == 3, space
    info = schedules.ScheduleInfo("conv_nd", 16)
    lib = tvm.compile(schedules.schedule(func, info), target="llvm")
    assert info.applied
    out = tvm.runtime.tensor(np.zeros((2, 6, 2, 3, 2), "float32"))
    lib(tvm.runtime.tensor(xv), tvm.runtime.tensor(wv), out)
    windows = np.lib.stride_tricks.sliding_window_view(xv, (3, 3, 3), axis=(2, 3, 4))
    ref = np.concatenate([np.einsum("bcdhwxyz,ocxyz->bodhw", windows[:, 2 * g:2 * g + 2],
                                    wv[3 * g:3 * g + 3]) for g in range(2)], axis=1)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4)


def _as_dtype(model, np_dtype):
    """``model`` with its initializers, input and output in ``np_dtype``."""
    from onnx import helper, numpy_helper

    elem = helper.np_dtype_to_tensor_dtype(np.dtype(np_dtype))
    graph = model.graph
    for i, init in enumerate(list(graph.initializer)):
        graph.initializer[i].CopyFrom(numpy_helper.from_array(
            numpy_helper.to_array(init).astype(np_dtype), init.name))
    for vi in list(graph.input) + list(graph.output):
        vi.type.tensor_type.elem_type = elem
    return model


@pytest.mark.parametrize("np_dtype", ["float16", "float64"])
@pytest.mark.parametrize("case", ["1d_g3_cpg5_stride2_dil2", "3d_odd_oc_asym_pad",
                                  "3d_g4_cpg8_dil2"])
def test_half_and_double_conv_match_reference(case, np_dtype):
    """fp16 1-D convs stay the N-d ``conv`` op (the importer's conv2d form is fp32-only)
    and 3-D convs of every float type get the blocked kernel: fp16 accumulates in fp32 as
    the reference kernel does, fp64 in fp64."""
    xs, ws, strides, pads, dil, group = CASES[case]
    model = _as_dtype(_model(xs, ws, strides, pads, dil, group, True), np_dtype)
    x = np.random.default_rng(1).standard_normal(xs).astype(np_dtype)
    graph, params = nnvm.frontend.from_onnx(model, shape={"x": xs}, dtype={"x": np_dtype})
    assert "conv" in {n.op.name for n in graph.index.nodes if n.op is not None}
    want = nnvm.compiler.build(graph, target="reference", shape={"x": xs},
                               params=params).run(x=x)[0]
    lib = nnvm.compiler.build(graph, target="llvm", shape={"x": xs}, params=params)
    got = lib.run(x=x)[0]
    assert got.dtype == np.dtype(np_dtype) and lib.stats().get("num_fallback_kernels", 0) == 0
    tol = 2e-3 if np_dtype == "float16" else 1e-10
    np.testing.assert_allclose(got.astype("float64"), want.astype("float64"), rtol=tol, atol=tol)
