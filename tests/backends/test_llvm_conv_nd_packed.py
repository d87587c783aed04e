"""The N-d ``conv`` kernel with its weight packed at load (a param) and per call (a graph
input), against onnxruntime.

Why: a constant weight reaches ``conv_nd.blocked_conv`` already in the ``conv_nd_{G}g``
layout (``runtime.packing``), a computed one through the kernel's own ``wpack_`` stage;
both must give the same numbers, and so must a padded input read through inlined bounds
tests (small) or copied into a padded buffer (large), over groups, channel counts no block
divides (zero-padded per group), strides, dilations and bias; a rebound weight is repacked.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("tvm")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import nnvm  # noqa: E402
from nnvm_llvm.runtime import packing  # noqa: E402

from llvm_probe import build_onnx, ort_outputs  # noqa: E402

# id: (input shape, weight shape, strides, pads (begin + end), dilations, group)
CASES = {
    "3d_g2_cpg3_onnx_test": ((2, 4, 4, 5, 4), (6, 2, 3, 3, 3), (1, 1, 1), (0,) * 6,
                             (1, 1, 1), 2),
    "3d_pad_stride_onnx_test": ((2, 3, 5, 5, 5), (4, 3, 2, 2, 2), (2, 2, 2), (1,) * 6,
                                (1, 1, 1), 1),
    "3d_g3_cpg5_dil2_asym": ((1, 6, 7, 6, 9), (15, 2, 2, 3, 2), (1, 2, 1),
                             (0, 1, 2, 1, 0, 1), (2, 1, 2), 3),
    "3d_g2_cpg8_stride2": ((1, 8, 6, 7, 7), (16, 4, 3, 3, 3), (2, 2, 2), (1,) * 6,
                           (1, 1, 1), 2),
    # padded input over conv_nd.LAZY_PAD_MAX elements: copied once into a padded buffer
    "3d_pad_copied": ((1, 4, 10, 20, 20), (8, 4, 3, 3, 3), (1, 1, 1), (1,) * 6, (1, 1, 1), 1),
    "3d_oc17": ((1, 5, 3, 4, 6), (17, 5, 1, 2, 3), (1, 1, 1), (0, 1, 0, 0, 1, 1),
                (1, 1, 1), 1),
}


def _model(case, bias, weight_is_input):
    xs, ws, strides, pads, dil, group = CASES[case]
    rng = np.random.default_rng(sum(xs) + sum(ws))
    w = rng.standard_normal(ws).astype("float32")
    b = rng.standard_normal(ws[0]).astype("float32")
    inits = [] if weight_is_input else [numpy_helper.from_array(w, "w")]
    if bias:
        inits.append(numpy_helper.from_array(b, "b"))
    node = helper.make_node("Conv", ["x", "w"] + (["b"] if bias else []), ["y"],
                            strides=list(strides), pads=list(pads), dilations=list(dil),
                            group=group, kernel_shape=list(ws[2:]))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(xs))]
    if weight_is_input:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, list(ws)))
    nsp = len(xs) - 2
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [xs[0], ws[0]] + [
        (xs[2 + i] + pads[i] + pads[nsp + i] - dil[i] * (ws[2 + i] - 1) - 1) // strides[i] + 1
        for i in range(nsp)])
    graph = helper.make_graph([node], "conv", inputs, [out], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = np.random.default_rng(1).standard_normal(xs).astype("float32")
    return model, x, w


def _oracle(model, feed):
    return ort_outputs(model, feed)[0]


@pytest.mark.parametrize("weight_is_input", [False, True], ids=["const_w", "input_w"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_conv_nd_matches_onnxruntime(case, bias, weight_is_input):
    model, x, w = _model(case, bias, weight_is_input)
    feed = {"x": x, "w": w} if weight_is_input else {"x": x}
    lib = build_onnx(model, feed)
    got = lib.run(**feed)[0]
    np.testing.assert_allclose(got, _oracle(model, {"x": x, "w": w} if weight_is_input
                                            else {"x": x}), rtol=1e-4, atol=1e-4)
    stats = lib.stats()
    assert stats["num_fallback_kernels"] == 0
    assert (stats["packed_weight_bytes"] > 0) == (not weight_is_input)  # packed at load


def test_rebound_weight_is_repacked():
    """``set_input`` of a packed weight repacks it: the next run uses the new filters."""
    model, x, w = _model("3d_g3_cpg5_dil2_asym", True, False)
    lib = build_onnx(model, {"x": x})
    lib.run(x=x)
    w2 = (w * -0.5 + 0.25).astype("float32")
    lib.set_input(w=w2)
    got = lib.run(x=x)[0]
    model2, _, _ = _model("3d_g3_cpg5_dil2_asym", True, True)
    np.testing.assert_allclose(got, _oracle(model2, {"x": x, "w": w2}), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape,groups,bn", [((6, 2, 3, 3, 3), 2, 4), ((15, 2, 2, 3), 3, 4),
                                             ((17, 5, 1, 2, 3), 1, 16), ((16, 4, 3), 2, 8)])
def test_conv_nd_layout_puts_each_group_in_whole_blocks(shape, groups, bn):
    """Packed channel ``c`` of group ``g`` sits at block ``(g * cogp + c) // bn``, lane
    ``(g * cogp + c) % bn``; the padded lanes are zero; ``packed_shape`` agrees."""
    w = np.random.default_rng(0).standard_normal(shape).astype("float32")
    layout = packing.conv_nd_layout(groups)
    p = packing.pack(layout, w, bn)
    assert p.shape == packing.packed_shape(layout, shape, bn) and p.flags.c_contiguous
    cog = shape[0] // groups
    cogp = -(-cog // bn) * bn
    seen = np.zeros(p.shape[0] * bn, bool)
    for o in range(shape[0]):
        slot = o // cog * cogp + o % cog
        np.testing.assert_array_equal(p[slot // bn, ..., slot % bn], w[o])
        seen[slot] = True
    lanes = np.moveaxis(p, -1, 1).reshape((p.shape[0] * bn,) + shape[1:])
    assert not lanes[~seen].any()


def test_unknown_layout_is_refused():
    with pytest.raises(nnvm.NNVMError, match="conv_nd_"):
        packing.pack("conv_nd_0g", np.zeros((2, 1, 1), "float32"), 4)


def test_unpacked_view_reads_the_model_layout_back():
    """``conv_nd.unpacked``: the plain reduction's view of a packed weight (dtypes the
    blocked kernel does not take) is the model-layout weight again."""
    import tvm
    import tvm.runtime
    from tvm import te

    from nnvm_llvm.compiler import conv_nd

    w = np.arange(15 * 2 * 3, dtype="int32").reshape(15, 2, 3)
    layout = packing.conv_nd_layout(3)
    p = packing.pack(layout, w, 4)
    wp = te.placeholder(p.shape, "int32", name="wp")
    view = conv_nd.unpacked(wp, 3, 15)
    lib = tvm.compile(te.create_prim_func([wp, view]), target="llvm")
    out = tvm.runtime.tensor(np.zeros(w.shape, "int32"))
    lib(tvm.runtime.tensor(p), out)
    np.testing.assert_array_equal(out.numpy(), w)


@pytest.mark.parametrize("case", ["3d_g3_cpg5_dil2_asym", "3d_pad_stride_onnx_test"])
def test_template_and_knobs_apply_to_the_packed_weight(case):
    """The ``conv_nd`` template finds the block of a weight packed at load (no ``wpack_``
    stage to read it from): it applies, untuned and under every knob ``nnvm tune`` offers,
    and the kernel matches onnxruntime."""
    import tvm
    import tvm.runtime
    from tvm import te

    from nnvm_llvm.compiler import conv_nd, schedules

    xs, ws, strides, pads, dil, group = CASES[case]
    model, x, w = _model(case, False, False)
    want = _oracle(model, {"x": x})
    bn = conv_nd.channel_block(ws[0] // group, 16)
    wpacked = packing.pack(packing.conv_nd_layout(group), w, bn)
    xt = te.placeholder(xs, name="x")
    wt = te.placeholder(wpacked.shape, name="w")
    y = conv_nd.blocked_conv(xt, wt, None, strides, pads[:len(xs) - 2], dil, group,
                             want.shape, "float32", "conv", 16, packed=True)
    func = te.create_prim_func([xt, wt, y])
    space = schedules.knob_space(func, schedules.ScheduleInfo("conv_nd", 16))
    assert space
    knobs = [{}] + [{k: v} for k, choices in space.items() for v in choices[1:]]
    for knob in knobs:
        info = schedules.ScheduleInfo("conv_nd", 16, knobs=knob)
        lib = tvm.compile(tvm.IRModule({"main": schedules.schedule(func, info)}),
                          target="llvm")
        assert info.applied, knob
        out = tvm.runtime.tensor(np.zeros(want.shape, "float32"))
        lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(wpacked), out)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4, err_msg=str(knob))


def test_narrow_3d_conv_tiles_planes_too():
    """A 3-D conv 2 columns by 3 rows wide (ONNX's Conv3d_groups test) also takes 2 planes
    of the depth axis and its batch of 2 into its register tile: its 3 channels per group
    and 2 columns are one 6-lane vector (``conv_nd.column_block``), 2 x 2 x 3 of them (the
    init and the update nests each unroll 2, 2 and 3, the write-back 2, 2, 3 and its 3
    channels; the per-call weight copy its 6 lanes), and the kernel still matches
    onnxruntime."""
    import re

    import tvm
    import tvm.runtime
    from tvm import te

    from nnvm_llvm.compiler import conv_nd, schedules

    xs, ws, strides, pads, dil, group = CASES["3d_g2_cpg3_onnx_test"]
    model, x, w = _model("3d_g2_cpg3_onnx_test", False, False)
    want = _oracle(model, {"x": x})
    xt, wt = te.placeholder(xs, name="x"), te.placeholder(ws, name="w")
    y = conv_nd.blocked_conv(xt, wt, None, strides, pads[:3], dil, group, want.shape,
                             "float32", "conv", 16)
    info = schedules.ScheduleInfo("conv_nd", 16)
    func = schedules.schedule(te.create_prim_func([xt, wt, y]), info)
    assert info.applied
    unrolled = sorted(int(e) for e in re.findall(r"T\.unroll\((\d+)\)", func.script()))
    assert [e for e in unrolled if e > 1] == [2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 6], unrolled
    # the write-back walks the lanes (``_writeback_in_lane_order``): a 2-lane column pair
    assert set(re.findall(r"T\.vectorized\((\d+)\)", func.script())) == {"6", "2"}, \
        func.script()
    lib = tvm.compile(func, target="llvm")
    out = tvm.runtime.tensor(np.zeros(want.shape, "float32"))
    lib(tvm.runtime.tensor(x), tvm.runtime.tensor(w), out)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)
