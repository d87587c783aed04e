"""ONNX models whose shapes exist only at run time, downstream of NonZero (detection
post-processing as torchvision exports it): Shape/Size of a thresholded set, K clamped to its
size (Min(Size, K)), ConstantOfShape / Range / Reshape / Expand / Tile by those values, and
Reduce / Slice / Split / Flatten over tensors whose dims are unknown at import. Used by
test_data_dependent_shapes.py."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from onnx_test_helpers import make_model

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, **attrs)


def _i64(name, *values):
    return helper.make_tensor(name, I64, [len(values)], list(values))


def shape_chain_model():
    """x (2, 6) -> the (N, 2) indices of x > 0.2 -> their count N read at run time, and every
    shape-consuming op fed by it or applied to (N, ...) tensors."""
    nodes = [
        _node("Relu", ["x"], ["r"]),
        _node("Greater", ["r", "th"], ["mask"]),
        _node("NonZero", ["mask"], ["nz"], name="find"),
        _node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
        _node("GatherND", ["x", "idx"], ["picked"]),
        _node("Shape", ["idx"], ["idx_shape"]),
        _node("Shape", ["idx"], ["idx_cols"], start=-1),
        _node("Gather", ["idx_shape", "zero_s"], ["count"], axis=0),
        _node("Unsqueeze", ["count", "zero1"], ["count1"]),
        _node("Size", ["idx"], ["size"]),
        _node("Concat", ["count1", "three"], ["fill_shape"], axis=0),
        _node("ConstantOfShape", ["fill_shape"], ["filled"],
              value=helper.make_tensor("v", F, [1], [1.5])),
        _node("Range", ["zero_s", "count", "one_s"], ["ramp"]),
        _node("Concat", ["count1", "one"], ["col_shape"], axis=0),
        _node("Reshape", ["picked", "col_shape"], ["column"]),
        _node("Unsqueeze", ["column", "zero1"], ["cube"]),
        _node("Flatten", ["cube"], ["flat"], axis=2),
        _node("ReduceMax", ["cube"], ["col_max"], axes=[1], keepdims=0),
        _node("Slice", ["picked", "one", "minus_one"], ["inner"]),
        _node("Div", ["count1", "two"], ["half"]),
        _node("Slice", ["picked", "zero1", "half", "zero1"], ["first_half"]),
        _node("Split", ["idx", "ones"], ["rows", "cols"], axis=1),
        _node("Split", ["idx"], ["left", "right"], axis=1),
        _node("Concat", ["count1", "two"], ["wide"], axis=0),
        _node("Expand", ["column", "wide"], ["expanded"]),
        _node("Tile", ["row", "col_shape"], ["tiled"]),
    ]
    inits = [helper.make_tensor("th", F, [], [0.2]), _i64("zero1", 0),
             _i64("one", 1), _i64("three", 3), _i64("two", 2), _i64("minus_one", -1),
             _i64("ones", 1, 1), helper.make_tensor("zero_s", I64, [], [0]),
             helper.make_tensor("one_s", I64, [], [1]),
             helper.make_tensor("row", F, [1, 3], [1.0, -2.0, 3.0])]
    outs = {"idx_shape": (I64, [2]), "idx_cols": (I64, [1]), "size": (I64, []),
            "filled": (F, [None, 3]), "ramp": (I64, [None]), "flat": (F, [None, 1]),
            "col_max": (F, [1, 1]), "inner": (F, [None]), "first_half": (F, [None]),
            "rows": (I64, [None, 1]), "cols": (I64, [None, 1]),
            "left": (I64, [None, 1]), "right": (I64, [None, 1]), "expanded": (F, [None, 2]),
            "tiled": (F, [None, 3])}
    return make_model(nodes, [helper.make_tensor_value_info("x", F, [2, 6])],
                      [helper.make_tensor_value_info(k, t, s) for k, (t, s) in outs.items()],
                      inits)


def clamped_topk_model():
    """The top min(5, kept) scores of those above a threshold, as SSD heads do per class:
    TopK's K is computed from the data (ReduceMin over Concat(Shape, K)); and the lowest
    min(Size, 3) of them (K from Min(Size, K))."""
    nodes = [
        _node("Sigmoid", ["logits"], ["scores"]),
        _node("Greater", ["scores", "th"], ["mask"]),
        _node("NonZero", ["mask"], ["nz"], name="find"),
        _node("Squeeze", ["nz", "zero"], ["keep"]),
        _node("Gather", ["scores", "keep"], ["kept"], axis=0),
        _node("Shape", ["kept"], ["n"]),
        _node("Concat", ["n", "k_max"], ["both"], axis=0),
        _node("ReduceMin", ["both"], ["k"], keepdims=1),
        _node("TopK", ["kept", "k"], ["top", "top_idx"]),
        _node("Size", ["kept"], ["size"]),
        _node("Unsqueeze", ["size", "zero"], ["size1"]),
        _node("Min", ["size1", "k_small"], ["k2"]),
        _node("TopK", ["kept", "k2"], ["low", "low_idx"], largest=0),
    ]
    inits = [helper.make_tensor("th", F, [], [0.5]), _i64("zero", 0), _i64("k_max", 5), _i64("k_small", 3)]
    return make_model(nodes, [helper.make_tensor_value_info("logits", F, [12])],
                      [helper.make_tensor_value_info("top", F, [None]),
                       helper.make_tensor_value_info("top_idx", I64, [None]),
                       helper.make_tensor_value_info("low", F, [None]),
                       helper.make_tensor_value_info("low_idx", I64, [None])], inits)


MODELS = {"shape_chain": shape_chain_model, "clamped_topk": clamped_topk_model}


def feed(name: str, seed: int = 0) -> dict:
    """A random input of model ``name``; seeds select different counts."""
    rng = np.random.default_rng(seed)
    key = "x" if name == "shape_chain" else "logits"
    shape = (2, 6) if name == "shape_chain" else (12,)
    return {key: rng.standard_normal(shape).astype("float32")}
