"""ONNX-semantics resize and depth/space shuffles against ONNX node test data."""

from __future__ import annotations

import pytest

from test_ops_onnx_util import case_params, const, run_case


def _resize(attrs, ins):
    x = ins[0]
    roi = ins[1] if len(ins) > 1 else None
    scales = ins[2] if len(ins) > 2 else None
    sizes = ins[3] if len(ins) > 3 else None
    a = {k: v for k, v in attrs.items() if k not in ("scales",)}
    if sizes is not None and sizes.size:
        a["sizes"] = const(sizes)
    elif scales is not None and scales.size:
        a["scales"] = const(scales)
    if roi is not None and roi.size:
        a["roi"] = const(roi)
    return "resize", a, [x]


def _resize_v10(attrs, ins):  # opset 10: (X, scales), asymmetric coordinates
    return "resize", {**attrs, "scales": const(ins[1]),
                      "coordinate_transformation_mode": "asymmetric",
                      "nearest_mode": "floor"}, [ins[0]]


def _adapt_resize(attrs, ins):
    return _resize_v10(attrs, ins) if len(ins) == 2 else _resize(attrs, ins)


def _upsample(attrs, ins):
    mode = attrs.get("mode", "nearest")
    return "resize", {"scales": const(ins[1]), "mode": mode,
                      "coordinate_transformation_mode": "asymmetric",
                      "nearest_mode": "floor"}, [ins[0]]


def _grid_sample(attrs, ins):
    a = dict(attrs)
    a["mode"] = {"bilinear": "linear", "bicubic": "cubic"}.get(a.get("mode"), a.get("mode",
                                                                                  "linear"))
    return "grid_sample", a, ins


IMAGE = {
    "gridsample": ("GridSample", _grid_sample),
    "resize": ("Resize", _adapt_resize), "upsample": ("Upsample", _upsample),
    "depthtospace": ("DepthToSpace", lambda a, ins: ("depth_to_space", a, ins)),
    "spacetodepth": ("SpaceToDepth", lambda a, ins: ("space_to_depth", a, ins)),
}


@pytest.mark.parametrize("case, adapter", case_params(IMAGE))
def test_image_matches_onnx(case, adapter):
    run_case(case, adapter)
