"""Sub-microsecond convs against onnxruntime: the lane-split dot kernel (``lowering.
lane_split``: fewer outputs than a vector, the input channels split across the lanes) and
the tiny grouped / 3-D convs of the roofline sweep.

Why: these kernels are a handful of vector FMAs, so each takes a path of its own (a split
reduction, exact channel blocks per group, a few channels times 2 output columns per
vector with the weight packed in copies): every path must give onnxruntime's numbers over
1-D / 2-D / 3-D, groups, pads, strides, dilations, bias or none, and a weight that is a
constant (packed at load), a graph input, or rebound after the build.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("tvm")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper, shape_inference  # noqa: E402

from llvm_probe import build_onnx, ort_outputs  # noqa: E402

# id: (input shape, weight shape, attributes)
CASES = {
    # the sweep's rows
    "conv1d_128_to_1": ((1, 128, 1), (1, 128, 1), {}),
    "conv1d_g2_cpg3": ((2, 4, 6), (6, 2, 3), {"group": 2}),
    "conv2d_g2_cpg3": ((2, 4, 6, 5), (6, 2, 3, 2), {"group": 2}),
    "conv3d_g2_cpg3": ((2, 4, 4, 5, 4), (6, 2, 3, 3, 3), {"group": 2}),
    "conv3d_k234": ((2, 3, 3, 4, 5), (4, 3, 2, 3, 4), {}),
    "conv3d_pad_stride": ((2, 3, 5, 5, 5), (4, 3, 2, 2, 2),
                          {"pads": [1] * 6, "strides": [2, 2, 2]}),
    "conv3d_dil2": ((2, 3, 5, 5, 5), (4, 3, 2, 2, 2), {"dilations": [2, 2, 2]}),
    # lane-split variants: one output position, a few channels or a batch of two
    "dot_2d_3x3_to_1": ((1, 64, 3, 3), (1, 64, 3, 3), {}),
    "dot_2d_oc2_pad_stride": ((1, 32, 4, 4), (2, 32, 3, 3),
                              {"pads": [1, 1, 1, 1], "strides": [3, 3]}),
    "dot_2d_oc4_dil2": ((1, 48, 5, 5), (4, 48, 3, 3), {"dilations": [2, 2]}),
    "dot_1d_batch2": ((2, 256, 1), (2, 256, 1), {}),
    "dot_1d_ic100": ((1, 100, 3), (1, 100, 3), {}),  # 4 lanes divide 100
    "dot_1d_ic99": ((1, 99, 1), (1, 99, 1), {}),  # no block divides: not split
    # a single-element input plane: split up to 64 outputs (contiguous lane loads)
    "dot_1x1_oc5": ((1, 128, 1, 1), (5, 128, 1, 1), {}),
    "dot_1d_batch8": ((8, 128, 1), (1, 128, 1), {}),
    "dot_1x1_oc64": ((1, 512, 1, 1), (64, 512, 1, 1), {}),
    "dot_1x1_oc7_padded": ((1, 64, 1, 1), (7, 64, 3, 3), {"pads": [1, 1, 1, 1]}),
    "conv1d_g3_cpg5_pad": ((1, 6, 9), (15, 2, 3), {"group": 3, "pads": [1, 2]}),
    # exact channel blocks per group (``lowering.exact_block``)
    "conv2d_g3_cpg5_pad_stride": ((1, 6, 7, 6), (15, 2, 3, 3),
                                  {"group": 3, "pads": [1, 0, 2, 1], "strides": [2, 1]}),
    "conv2d_g2_cpg6_dil2": ((2, 4, 6, 7), (12, 2, 2, 3), {"group": 2, "dilations": [2, 2]}),
    "conv1d_g4_cpg7": ((1, 8, 11), (28, 2, 4), {"group": 4, "strides": [3]}),
    "conv2d_g2_cpg3_large": ((1, 4, 40, 40), (6, 2, 3, 3), {"group": 2}),
    "conv3d_g2_cpg6_pad": ((1, 12, 4, 6, 5), (12, 6, 3, 3, 3), {"group": 2, "pads": [1] * 6}),
    "conv3d_oc10": ((1, 3, 4, 5, 6), (10, 3, 2, 2, 3), {"strides": [1, 2, 1]}),
    # a few channels times 2 output columns per vector (``conv_nd.column_block``): an odd
    # row (a spare column), one column, pads, strides; 5 to 8 channels per group: no copies
    "conv3d_oc4_pad_stride_mixed": ((2, 3, 5, 5, 5), (4, 3, 2, 2, 2),
                                    {"pads": [1, 0, 1, 1, 1, 0], "strides": [2, 1, 2]}),
    "conv3d_g3_cpg5_row1": ((1, 6, 3, 4, 1), (15, 2, 2, 2, 1), {"group": 3}),
    "conv3d_oc7_row5": ((1, 2, 3, 3, 7), (7, 2, 1, 2, 3), {"pads": [0, 1, 0, 0, 0, 0]}),
    "conv3d_g2_cpg8_stride3": ((1, 4, 3, 4, 11), (16, 2, 2, 2, 2),
                               {"group": 2, "strides": [1, 1, 3]}),
    # past the tiny regime a packed weight keeps its copies; 12 per group: no copies
    "conv3d_g2_cpg3_odd_large": ((1, 4, 8, 16, 15), (6, 2, 3, 3, 3),
                                 {"group": 2, "pads": [1] * 6}),
    "conv3d_g2_cpg12": ((1, 4, 3, 4, 5), (24, 2, 2, 2, 2), {"group": 2}),
    # unpadded grouped 2-D / 1-D convs of 3 or 4 channels per group take the column kernel,
    # their weight packed at load in copies (``lowering.columns_packed``); strided columns
    # and padded convs keep the conv2d template
    "conv2d_g2_cpg4_pad": ((2, 4, 5, 6), (8, 2, 3, 3), {"group": 2, "pads": [1, 0, 0, 1]}),
    "conv1d_g3_cpg4_stride_dil": ((1, 6, 13), (12, 2, 3), {"group": 3, "strides": [2],
                                                           "dilations": [2]}),
    "conv2d_g4_cpg3_odd": ((1, 8, 4, 7), (12, 2, 2, 2), {"group": 4}),
    "conv2d_g2_cpg3_col_stride2": ((1, 4, 7, 9), (6, 2, 3, 3), {"group": 2, "strides": [1, 2],
                                                                "pads": [1, 1, 0, 1]}),
    "conv1d_g2_cpg4_dil_odd": ((2, 4, 9), (8, 2, 3), {"group": 2, "dilations": [2]}),
    "conv2d_mult3_row_stride": ((1, 5, 6, 7), (15, 1, 3, 3), {"group": 5, "strides": [2, 1]}),
    "conv2d_g3_cpg4_large_odd": ((1, 6, 20, 33), (12, 2, 3, 2), {"group": 3}),
    "conv2d_g2_cpg4_pad_large": ((1, 4, 20, 21), (8, 2, 3, 3), {"group": 2,
                                                                "pads": [1, 0, 1, 1]}),
    # 6-lane tiles written back in lane order (``conv_nd_schedule._writeback_in_lane_order``);
    # an odd row keeps the output order
    "conv2d_g2_cpg3_odd_row": ((2, 4, 5, 8), (6, 2, 2, 2), {"group": 2}),
    "conv3d_g3_cpg3_dil": ((1, 6, 5, 4, 6), (9, 2, 2, 1, 3), {"group": 3, "dilations": [2, 1, 2]}),
}


def _model(case, bias, weight_is_input):
    xs, ws, attrs = CASES[case]
    rng = np.random.default_rng(sum(xs) + sum(ws))
    w = rng.standard_normal(ws).astype("float32")
    b = rng.standard_normal(ws[0]).astype("float32")
    inits = [] if weight_is_input else [numpy_helper.from_array(w, "w")]
    inits += [numpy_helper.from_array(b, "b")] if bias else []
    node = helper.make_node("Conv", ["x", "w"] + (["b"] if bias else []), ["y"],
                            kernel_shape=list(ws[2:]), **attrs)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(xs))]
    if weight_is_input:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, list(ws)))
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([node], "conv", inputs, [out], inits)
    model = shape_inference.infer_shapes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), strict_mode=True)
    x = np.random.default_rng(1).standard_normal(xs).astype("float32")
    return model, x, w


@pytest.mark.parametrize("weight_is_input", [False, True], ids=["const_w", "input_w"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_tiny_conv_matches_onnxruntime(case, bias, weight_is_input):
    model, x, w = _model(case, bias, weight_is_input)
    feed = {"x": x, "w": w} if weight_is_input else {"x": x}
    lib = build_onnx(model, feed)
    np.testing.assert_allclose(lib.run(**feed)[0], ort_outputs(model, feed)[0],
                               rtol=1e-4, atol=1e-4)
    assert lib.stats()["num_fallback_kernels"] == 0


@pytest.mark.parametrize("case", ["conv1d_128_to_1", "dot_2d_oc2_pad_stride", "conv1d_g2_cpg3",
                                  "conv3d_g2_cpg3"])
def test_rebound_weight_is_used(case):
    """``set_input`` of a constant weight (packed at load, or read in its model layout by
    the lane-split kernel): the next run uses the new filters. A 1-D conv's weight is a
    param of the folded 2-D shape, under its own name."""
    model, x, w = _model(case, True, False)
    lib = build_onnx(model, {"x": x})
    lib.run(x=x)
    w2 = (w * -0.5 + 0.25).astype("float32")
    (name, shape), = [(k, v.shape) for k, v in lib.params.items() if v.size == w.size]
    lib.set_input(**{name: w2.reshape(shape)})
    model2, _, _ = _model(case, True, True)
    np.testing.assert_allclose(lib.run(x=x)[0], ort_outputs(model2, {"x": x, "w": w2})[0],
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("x_shape,w_shape,attrs,lanes,split", [
    ((1, 128, 1, 1), (1, 128, 1, 1), {}, 16, 16),
    ((1, 128, 1, 1), (1, 128, 1, 1), {}, 8, 8),  # AVX2
    ((1, 24, 1, 1), (1, 24, 1, 1), {}, 16, 8),  # 16 does not divide 24
    ((1, 12, 1, 1), (1, 12, 1, 1), {}, 16, 4),
    ((1, 99, 1, 1), (1, 99, 1, 1), {}, 16, 0),
    ((1, 256, 1, 1), (16, 256, 1, 1), {}, 16, 16),  # a 1x1 plane: contiguous lanes
    ((1, 1024, 1, 1), (64, 1024, 1, 1), {}, 16, 16),
    ((1, 2048, 1, 1), (65, 2048, 1, 1), {}, 16, 0),
    ((1, 8, 1, 1), (32, 8, 1, 1), {}, 16, 0),  # SE block: lane sums outweigh the dot
    ((1, 128, 1, 1), (5, 128, 3, 3), {"padding": (1, 1)}, 16, 0),  # padded plane: gathers
    ((1, 64, 8, 8), (1, 64, 3, 3), {}, 16, 0),  # 36 outputs: the blocked kernel's
    ((1, 64, 3, 3), (4, 64, 3, 3), {"groups": 2}, 16, 0),
])
def test_lane_split_takes_only_tiny_outputs(x_shape, w_shape, attrs, lanes, split):
    from nnvm_llvm.compiler.lowering import lane_split

    full = {"kernel_size": w_shape[2:], "strides": (1, 1), "dilation": (1, 1),
            "padding": (0, 0), **attrs}
    assert lane_split(full, x_shape, w_shape, lanes) == split


@pytest.mark.parametrize("cog,lanes,bn", [
    (3, 16, 3), (3, 8, 3), (6, 8, 6), (10, 16, 10),
    (12, 16, 0),  # 4 divides 12
    (2, 16, 0),  # 2 lanes already fit
    (16, 16, 0), (17, 16, 0),  # a vector or more: whole (padded) blocks
])
def test_exact_block_takes_only_undivided_groups_under_a_vector(cog, lanes, bn):
    from nnvm_llvm.compiler.lowering import exact_block

    assert exact_block(cog, lanes) == bn


@pytest.mark.parametrize("cog,lanes,block", [
    (3, 16, 6), (4, 16, 8), (4, 8, 8), (3, 8, 6),  # up to 256 bits, AVX-512 or AVX2
    (5, 16, 5), (8, 16, 8), (7, 16, 7), (6, 8, 6),  # two copies would not fit 256 bits
    (2, 16, 2), (12, 16, 4), (16, 16, 16),  # not one whole small group: no copies
])
def test_channel_block_copies_small_groups(cog, lanes, block):
    from nnvm_llvm.compiler import conv_nd
    from nnvm_llvm.runtime import packing

    assert conv_nd.channel_block(cog, lanes) == block
    assert packing.conv_nd_copies(cog, block) == (block // cog if block > cog else 1)


@pytest.mark.parametrize("x_shape,w_shape,groups,geometry,layout", [
    ((2, 4, 6, 5), (6, 2, 3, 2), 2, {}, ("conv_nd_2g", 6)),  # the sweep's rows
    ((2, 4, 1, 6), (6, 2, 1, 3), 2, {}, ("conv_nd_2g", 6)),
    ((1, 4, 40, 40), (6, 2, 3, 3), 2, {}, ("conv_nd_2g", 6)),  # any size
    ((1, 12, 6, 6), (24, 2, 3, 3), 6, {"dilation": (2, 2)}, ("conv_nd_6g", 8)),  # 4 per group
    ((1, 16, 28, 28), (48, 1, 3, 3), 16, {"strides": (2, 1)}, ("conv_nd_16g", 6)),
    ((1, 256, 56, 56), (256, 4, 3, 3), 64, {"strides": (2, 2)}, ("conv2d", 4)),  # no pairs
    ((2, 48, 11, 10), (48, 4, 3, 3), 12, {"padding": (0, 1, 1, 0)}, ("conv2d", 4)),  # padded
    ((2, 4, 5, 6), (8, 2, 3, 3), 2, {"padding": (1, 0, 0, 1)}, None),  # tiny: copied per call
    ((1, 6, 13, 1), (12, 2, 3, 1), 3, {"strides": (1, 2)}, None),
    ((1, 16, 6, 6), (16, 8, 3, 3), 2, {}, ("conv2d", 8)),  # 8 channels per group
])
def test_small_groups_are_packed_for_the_column_kernel(x_shape, w_shape, groups, geometry,
                                                       layout):
    """3 or 4 channels per group, unpadded, at unit column stride: the weight is packed at
    load in the ``conv_nd`` layout with its copies, and ``packed_conv_kind`` names the
    template that reads it from the node's attributes alone. A tiny padded or strided one
    is left unpacked (None: the same kernel, its weight copied per call)."""
    from types import SimpleNamespace

    from nnvm_llvm.compiler.lowering import LowerContext, _conv_pack, packed_conv_kind

    attrs = {"kernel_size": w_shape[2:], "strides": (1, 1), "dilation": (1, 1),
             "padding": (0, 0), "groups": groups, "channels": w_shape[0], **geometry}
    assert _conv_pack(attrs, [x_shape, w_shape], LowerContext(16)) == (
        {1: layout} if layout else {})
    if layout:
        kind = packed_conv_kind(SimpleNamespace(attrs=attrs), "conv_nd")
        assert kind == ("conv_nd" if layout[0].startswith("conv_nd") else "conv2d")


@pytest.mark.parametrize("cog,lanes,block", [(3, 8, 6), (4, 8, 8), (3, 4, 3), (4, 4, 4)])
def test_column_packing_at_narrower_vectors(cog, lanes, block):
    """AVX2 (8 lanes) keeps the 2 copies; a 4-lane target packs the group's channels once
    (no columns per vector), still in the layout the ``conv_nd`` kernel reads."""
    from nnvm_llvm.compiler.lowering import LowerContext, _conv_pack

    attrs = {"kernel_size": (3, 3), "strides": (1, 1), "dilation": (1, 1),
             "padding": (0, 0), "groups": 2, "channels": 2 * cog}
    shapes = [(1, 4, 9, 9), (2 * cog, 2, 3, 3)]
    assert _conv_pack(attrs, shapes, LowerContext(lanes)) == {1: ("conv_nd_2g", block)}


def test_six_lane_tile_writes_back_in_lane_order():
    """A one-thread tile of 3 channels x 2 columns stores each channel's column pair as
    one 2-lane vector (its write-back in the accumulators' lane order), and the kernel
    still gives onnxruntime's numbers."""
    import tvm
    from tvm import te

    from nnvm_llvm.compiler import conv_nd, schedules
    from nnvm_llvm.runtime import packing

    model, x, w = _model("conv3d_g2_cpg3", False, False)
    want = ort_outputs(model, {"x": x})[0]
    packed = packing.pack("conv_nd_2g", w, 6)
    xt, wt = te.placeholder(x.shape, name="x"), te.placeholder(packed.shape, name="w")
    y = conv_nd.blocked_conv(xt, wt, None, (1, 1, 1), (0, 0, 0), (1, 1, 1), 2, want.shape,
                             "float32", "conv", 16, packed=True)
    info = schedules.ScheduleInfo("conv_nd", 16)
    func = schedules.schedule(te.create_prim_func([xt, wt, y]), info)
    assert info.applied
    script = func.script()
    assert "T.vectorized(6)" in script and "T.vectorized(2)" in script, script
    out = tvm.runtime.tensor(np.zeros(want.shape, "float32"))
    tvm.compile(func, target="llvm")(tvm.runtime.tensor(x), tvm.runtime.tensor(packed), out)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)


def test_packed_copies_unpack_to_the_weight():
    """``pack_conv_nd`` with copies repeats each channel in place (lane ``channel *
    copies + column``); ``conv_nd.unpacked`` reads the model layout back from it."""
    import tvm
    from tvm import te

    from nnvm_llvm.compiler import conv_nd
    from nnvm_llvm.runtime import packing

    w = np.random.default_rng(0).standard_normal((6, 2, 3, 3, 3)).astype("float32")
    packed = packing.pack("conv_nd_2g", w, 6)
    assert packed.shape == packing.packed_shape("conv_nd_2g", w.shape, 6) == (2, 2, 3, 3, 3, 6)
    np.testing.assert_array_equal(packed[1, :, ..., 2 * 2 + 1], w[3 + 2])
    wt = te.placeholder(packed.shape, name="w")
    func = te.create_prim_func([wt, conv_nd.unpacked(wt, 2, 6)])
    out = tvm.runtime.tensor(np.zeros(w.shape, "float32"))
    tvm.compile(func, target="llvm")(tvm.runtime.tensor(packed), out)
    np.testing.assert_array_equal(out.numpy(), w)


@pytest.mark.parametrize("lanes", [16, 8])
def test_column_kernel_at_both_vector_widths(lanes):
    """The scheduled kernel of a 4-channel 3-D conv with an odd row (a spare column) at
    AVX-512's and AVX2's width: lanes of 4 channels x 2 columns, onnxruntime's numbers."""
    import re

    import tvm
    from tvm import te

    from nnvm_llvm.compiler import conv_nd, schedules
    from nnvm_llvm.runtime import packing

    model, x, w = _model("conv3d_dil2", False, False)
    want = ort_outputs(model, {"x": x})[0]
    block = conv_nd.channel_block(4, lanes)
    packed = packing.pack("conv_nd_1g", w, block)
    xt, wt = te.placeholder(x.shape, name="x"), te.placeholder(packed.shape, name="w")
    y = conv_nd.blocked_conv(xt, wt, None, (1, 1, 1), (0, 0, 0), (2, 2, 2), 1, want.shape,
                             "float32", "conv", lanes, packed=True)
    info = schedules.ScheduleInfo("conv_nd", lanes)
    func = schedules.schedule(te.create_prim_func([xt, wt, y]), info)
    assert info.applied
    assert "8" in re.findall(r"T\.vectorized\((\d+)\)", func.script())
    out = tvm.runtime.tensor(np.zeros(want.shape, "float32"))
    tvm.compile(func, target="llvm")(tvm.runtime.tensor(x), tvm.runtime.tensor(packed), out)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)
