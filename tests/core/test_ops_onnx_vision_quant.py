"""ONNX-semantics detection and quantisation ops against ONNX node test data."""

from __future__ import annotations

import pytest

from test_ops_onnx_util import case_params, const, run_case


def _nms(attrs, ins):
    a = {"center_point_box": attrs.get("center_point_box", 0)}
    names = ("max_output_boxes_per_class", "iou_threshold", "score_threshold")
    for k, x in zip(names, ins[2:]):
        if x is not None and x.size:
            a[k] = const(x)[0]
    return "non_max_suppression", a, ins[:2]


def _roi(attrs, ins):
    return "roi_align", attrs, ins


def _quant(name):
    def adapt(attrs, ins):
        a = {k: v for k, v in attrs.items() if k in ("axis", "block_size", "saturate")}
        if len(ins) < 3 or ins[2] is None:
            pytest.skip("absent zero point: the importer supplies a zero constant")
        return name, a, ins
    return adapt


def _conv_like(name):
    def adapt(attrs, ins):
        a = {k: attrs[k] for k in ("strides", "pads", "dilations") if k in attrs}
        a["groups"] = attrs.get("group", 1)
        if name == "qlinear_conv":
            a["use_bias"] = len(ins) > 8 and ins[8] is not None
        import numpy as np
        arrays = list(ins)
        if name == "conv_integer":
            arrays += [np.uint8(0)] * (4 - len(arrays))
            arrays = [np.asarray(0, np.uint8) if x is None else x for x in arrays]
        return name, a, [x for x in arrays if x is not None]
    return adapt


VISION = {"nonmaxsuppression": ("NonMaxSuppression", _nms), "roialign": ("RoiAlign", _roi)}
QUANT = {
    "quantizelinear": ("QuantizeLinear", _quant("quantize_linear")),
    "dequantizelinear": ("DequantizeLinear", _quant("dequantize_linear")),
    "dynamicquantizelinear": ("DynamicQuantizeLinear",
                              lambda a, ins: ("dynamic_quantize_linear", {}, ins)),
    "matmulinteger": ("MatMulInteger", lambda a, ins: ("matmul_integer", {}, ins)),
    "qlinearmatmul": ("QLinearMatMul", lambda a, ins: ("qlinear_matmul", {}, ins)),
    "convinteger": ("ConvInteger", _conv_like("conv_integer")),
    "qlinearconv": ("QLinearConv", _conv_like("qlinear_conv")),
}


@pytest.mark.parametrize("case, adapter", case_params(VISION))
def test_vision_matches_onnx(case, adapter):
    run_case(case, adapter)


@pytest.mark.parametrize("case, adapter", case_params(QUANT))
def test_quantize_matches_onnx(case, adapter):
    run_case(case, adapter)
