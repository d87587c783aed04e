"""ONNX-semantics normalisation, N-d convolution and pooling ops against ONNX node test data."""

from __future__ import annotations

import pytest

from test_ops_onnx_util import case_params, const, run_case


def _norm(name, keep=(), rename=None):
    rename = rename or {}

    def adapt(attrs, ins):
        a = {rename.get(k, k): v for k, v in attrs.items() if k in keep or k in rename}
        arrays = [x for x in ins if x is not None]
        if name == "layer_norm":
            a["use_bias"] = len(arrays) > 2
        return name, a, arrays
    return adapt


def _group_norm(attrs, ins):
    return "group_norm", {"num_groups": attrs["num_groups"],
                          "epsilon": attrs.get("epsilon", 1e-5)}, ins


def _geom(attrs, nsp):
    pad = attrs.get("auto_pad", "NOTSET")
    assert pad in ("NOTSET", "VALID") or "pads" in attrs, "auto_pad is the importer's job"
    return {k: attrs[k] for k in ("strides", "pads", "dilations") if k in attrs}


def _conv(attrs, ins):
    if attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        pytest.skip("auto_pad SAME_* is resolved into pads by the importer")
    a = {**_geom(attrs, ins[0].ndim - 2), "groups": attrs.get("group", 1),
         "use_bias": len(ins) > 2 and ins[2] is not None}
    return "conv", a, [x for x in ins if x is not None]


def _tconv(attrs, ins):
    a = {k: attrs[k] for k in ("strides", "dilations") if k in attrs}
    a.update(groups=attrs.get("group", 1), use_bias=len(ins) > 2 and ins[2] is not None)
    for k in ("output_padding", "output_shape", "auto_pad"):
        if k in attrs:
            a[k] = attrs[k]
    if "pads" in attrs:
        a["pads"] = attrs["pads"]
    return "conv_transpose", a, [x for x in ins if x is not None]


def _pool(name, extra=()):
    def adapt(attrs, ins):
        if attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
            pytest.skip("auto_pad SAME_* is resolved into pads by the importer")
        a = {k: attrs[k] for k in ("kernel_shape", "strides", "pads", "dilations", "ceil_mode",
                                   *extra) if k in attrs}
        return name, a, ins
    return adapt


NORM = {
    "layernormalization": ("LayerNormalization", _norm("layer_norm", ("axis", "epsilon"))),
    "rmsnormalization": ("RMSNormalization", _norm("rms_norm", ("axis", "epsilon"))),
    "instance_normalization": ("InstanceNormalization", _norm("instance_norm", ("epsilon",))),
    "groupnormalization": ("GroupNormalization", _group_norm),
    "lpnormalization": ("LpNormalization", _norm("lp_normalization", ("axis", "p"))),
    "meanvariancenormalization": ("MeanVarianceNormalization",
                                  _norm("mean_variance_normalization", ("axes",))),
    "lrn": ("LRN", _norm("lrn", ("size", "alpha", "beta", "bias"))),
}
def _col2im(attrs, ins):
    return "col2im", {**attrs, "image_shape": const(ins[1]), "block_shape": const(ins[2])}, \
        [ins[0]]


NN = {
    "col2im": ("Col2Im", _col2im),  # op in onnx_extra.py; checked here as well
    "conv": ("Conv", _conv), "convtranspose": ("ConvTranspose", _tconv),
    "maxpool": ("MaxPool", _pool("max_pool", ("storage_order",))),
    "averagepool": ("AveragePool", _pool("avg_pool", ("count_include_pad",))),
    "lppool": ("LpPool", _pool("lp_pool", ("p",))),
    "globalmaxpool": ("GlobalMaxPool", _norm("global_max_pool")),
    "globalaveragepool": ("GlobalAveragePool", _norm("global_avg_pool")),
    "einsum": ("Einsum", lambda attrs, ins: ("einsum", {"equation": attrs["equation"],
                                                       "num_args": len(ins)}, ins)),
    "hardmax": ("Hardmax", _norm("hardmax", ("axis",))),
}


@pytest.mark.parametrize("case, adapter", case_params(NORM))
def test_norm_matches_onnx(case, adapter):
    run_case(case, adapter)


@pytest.mark.parametrize("case, adapter", case_params(NN))
def test_nn_nd_matches_onnx(case, adapter):
    run_case(case, adapter)
