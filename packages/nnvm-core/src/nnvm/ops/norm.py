"""Normalisation layers with ONNX semantics: layer, RMS, instance, group, Lp, LRN, MVN.

Statistics are computed in float64 and cast back, so float16 inputs do not lose the mean
(ONNX's ``stash_type`` = float32 or wider). ``layer_norm`` has three outputs as in ONNX
(Y, Mean, InvStdDev) of which only Y is visible to the symbol API, like NNVM's batch_norm.
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ir import NodeEntry, make_node
from ..op import OpPattern, OpSet
from ..params import Param
from .common import first_input_shape, same_dtype, to_dtype

defs = OpSet("norm")

OPAQUE = OpPattern.OPAQUE
_EPS = Param("epsilon", "float", 1e-5, "added to the variance")


def _norm_axes(axis, ndim):
    axis %= ndim
    return tuple(range(axis, ndim))


def _layer_norm_shape(attrs, ins, outs):
    x = ins[0]
    if x is None:
        return ins, outs
    axes = _norm_axes(attrs["axis"], len(x))
    stat = tuple(1 if i in axes else d for i, d in enumerate(x))
    norm = tuple(x[axes[0]:])
    new_ins = [x] + [p if p is not None else norm for p in ins[1:]]
    return new_ins, [tuple(x), stat, stat]


def _layer_norm_dtype(attrs, ins, outs):
    t = ins[0] or outs[0]
    return [t] + [p or t for p in ins[1:]], [t, "float32", "float32"]


def _layer_norm_ref(attrs, x, scale, bias=None):
    axes = _norm_axes(attrs["axis"], x.ndim)
    xf = x.astype(np.float64)
    mean = xf.mean(axis=axes, keepdims=True)
    var = ((xf - mean) ** 2).mean(axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(var + attrs["epsilon"])
    y = (xf - mean) * inv * scale
    if bias is not None:
        y = y + bias
    return to_dtype(y, x), mean.astype(np.float32), inv.astype(np.float32)


def _layer_norm_backward_ref(attrs, og, x, scale):
    axes = _norm_axes(attrs["axis"], x.ndim)
    xf, g = x.astype(np.float64), og.astype(np.float64)
    mean = xf.mean(axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(((xf - mean) ** 2).mean(axis=axes, keepdims=True) + attrs["epsilon"])
    xhat = (xf - mean) * inv
    gx_hat = g * scale
    dx = inv * (gx_hat - gx_hat.mean(axis=axes, keepdims=True)
                - xhat * (gx_hat * xhat).mean(axis=axes, keepdims=True))
    lead = tuple(range(axes[0]))
    dscale = (g * xhat).sum(axis=lead).reshape(scale.shape) if lead else \
        (g * xhat).reshape(scale.shape)
    dbias = g.sum(axis=lead).reshape(scale.shape) if lead else g.reshape(scale.shape)
    return to_dtype(dx, x), to_dtype(dscale, scale), to_dtype(dbias, scale)


def _layer_norm_grad(n, og):
    x, scale = n.inputs[0], n.inputs[1]
    node = make_node("_layer_norm_backward", [og[0], x, scale],
                     {"axis": n.attrs["axis"], "epsilon": n.attrs["epsilon"]})
    grads = [NodeEntry(node, 0, 0), NodeEntry(node, 1, 0)]
    if n.attrs["use_bias"]:
        grads.append(NodeEntry(node, 2, 0))
    return grads


_LN_PARAMS = [Param("axis", "int", -1, "first normalised axis"), _EPS]
defs.op_once("layer_norm", doc="ONNX LayerNormalization: normalise over axes [axis, rank), "
              "then scale and shift. Outputs Y, Mean, InvStdDev (Y visible).",
              inputs=lambda attrs: ["data", "scale"] + (["bias"] if attrs["use_bias"] else []),
              outputs=("output", "mean", "inv_std_dev"),
              params=_LN_PARAMS + [Param("use_bias", "bool", True, "add a bias input")],
              shape=_layer_norm_shape, dtype=_layer_norm_dtype, reference=_layer_norm_ref,
              gradient=_layer_norm_grad, pattern=OPAQUE,
              FNumVisibleOutputs=lambda attrs: 1, support_level=1)
defs.op_once("_layer_norm_backward", doc="Gradients of layer_norm for data, scale and bias.",
              inputs=("out_grad", "data", "scale"),
              outputs=("data_grad", "scale_grad", "bias_grad"), params=_LN_PARAMS,
              shape=lambda attrs, ins, outs: (ins, [ins[1], ins[2], ins[2]]),
              dtype=lambda attrs, ins, outs: (ins, [ins[1], ins[2], ins[2]]),
              reference=_layer_norm_backward_ref, pattern=OPAQUE)


def _rms_ref(attrs, x, scale):
    axes = _norm_axes(attrs["axis"], x.ndim)
    xf = x.astype(np.float64)
    rms = np.sqrt((xf * xf).mean(axis=axes, keepdims=True) + attrs["epsilon"])
    return to_dtype(xf / rms * scale, x)


defs.op_once("rms_norm", doc="ONNX RMSNormalization: x / sqrt(mean(x^2) + eps) * scale over "
              "axes [axis, rank).", inputs=("data", "scale"), params=_LN_PARAMS,
              shape=lambda attrs, ins, outs: (ins, [ins[0]]), dtype=same_dtype,
              reference=_rms_ref, pattern=OPAQUE, support_level=1)


def _channel_params(attrs, ins, outs):
    x = ins[0]
    if x is None:
        return ins, outs
    return [x] + [(x[1],)] * (len(ins) - 1), [x]


def _instance_norm_ref(attrs, x, gamma, beta):
    axes = tuple(range(2, x.ndim))
    xf = x.astype(np.float64)
    mean = xf.mean(axis=axes, keepdims=True)
    var = xf.var(axis=axes, keepdims=True)
    shp = (1, -1) + (1,) * (x.ndim - 2)
    y = (xf - mean) / np.sqrt(var + attrs["epsilon"]) * gamma.reshape(shp) + beta.reshape(shp)
    return to_dtype(y, x)


defs.op_once("instance_norm", doc="Instance normalisation: per sample and channel over the "
              "spatial axes, then per-channel scale and shift.",
              inputs=("data", "gamma", "beta"), params=[_EPS], shape=_channel_params,
              dtype=same_dtype, reference=_instance_norm_ref, pattern=OPAQUE, support_level=1)


def _group_norm_ref(attrs, x, gamma, beta):
    g = attrs["num_groups"]
    n, c = x.shape[:2]
    if c % g:
        raise ShapeError(f"channels {c} are not divisible by num_groups {g}")
    xf = x.astype(np.float64).reshape(n, g, -1)
    mean = xf.mean(axis=2, keepdims=True)
    var = xf.var(axis=2, keepdims=True)
    y = ((xf - mean) / np.sqrt(var + attrs["epsilon"])).reshape(x.shape)
    shp = (1, -1) + (1,) * (x.ndim - 2)
    return to_dtype(y * gamma.reshape(shp) + beta.reshape(shp), x)


def _group_norm_shape(attrs, ins, outs):
    """Channel params, after checking the groups split the channels: a num_groups of -1 ran
    on reference (NumPy reshapes to -1) and crashed the llvm build (scripts/fuzz_onnx.py)."""
    x, g = ins[0], attrs["num_groups"]
    if x is not None and (g < 1 or len(x) < 2 or x[1] % g):
        raise ShapeError(f"num_groups {g} must be at least 1 and divide the channels (axis 1 "
                         f"of {tuple(x)})")
    return _channel_params(attrs, ins, outs)


defs.op_once("group_norm", doc="ONNX GroupNormalization (opset 21): normalise channel groups "
              "per sample, then per-channel scale and shift.",
              inputs=("data", "gamma", "beta"),
              params=[Param("num_groups", "int", doc="channel groups"), _EPS],
              shape=_group_norm_shape, dtype=same_dtype, reference=_group_norm_ref,
              pattern=OPAQUE, support_level=1)


def _lp_ref(attrs, x):
    ax = attrs["axis"] % x.ndim
    xf = x.astype(np.float64)
    norm = np.abs(xf).sum(axis=ax, keepdims=True) if attrs["p"] == 1 else \
        np.sqrt((xf * xf).sum(axis=ax, keepdims=True))
    with np.errstate(invalid="ignore", divide="ignore"):
        return to_dtype(np.where(norm == 0, 0, xf / norm), x)


defs.op_once("lp_normalization", doc="ONNX LpNormalization: x / ||x||_p along axis (p = 1 or "
              "2; zero vectors stay zero).", inputs=("data",),
              params=[Param("axis", "int", -1, "axis"), Param("p", "int", 2, "1 or 2", (1, 2))],
              shape=first_input_shape, dtype=same_dtype, reference=_lp_ref, pattern=OPAQUE,
              support_level=1)


def _mvn_ref(attrs, x):
    axes = tuple(a % x.ndim for a in attrs["axes"])
    xf = x.astype(np.float64)
    mean = xf.mean(axis=axes, keepdims=True)
    std = np.sqrt(((xf - mean) ** 2).mean(axis=axes, keepdims=True))
    return to_dtype((xf - mean) / (std + 1e-9), x)


defs.op_once("mean_variance_normalization", doc="ONNX MeanVarianceNormalization: (x - mean) / "
              "std over axes.", inputs=("data",),
              params=[Param("axes", "ints", (0, 2, 3), "axes of the statistics")],
              shape=first_input_shape, dtype=same_dtype, reference=_mvn_ref, pattern=OPAQUE,
              support_level=1)


def _lrn_ref(attrs, x):
    size, ax = attrs["size"], attrs["axis"] % x.ndim
    sq = np.moveaxis(x.astype(np.float64) ** 2, ax, 0)
    c = sq.shape[0]
    lo, hi = (size - 1) // 2, size // 2  # ONNX: floor((size-1)/2) before, ceil after
    csum = np.concatenate([np.zeros((1,) + sq.shape[1:]), np.cumsum(sq, axis=0)])
    i = np.arange(c)
    win = csum[np.minimum(i + hi, c - 1) + 1] - csum[np.maximum(i - lo, 0)]
    div = (attrs["bias"] + attrs["alpha"] / size * np.moveaxis(win, 0, ax)) ** attrs["beta"]
    return to_dtype(x / div, x)


defs.op_once("lrn", doc="Local response normalisation across channels: x / (bias + alpha / "
              "size * sum of squares in a window of `size` channels) ** beta.",
              inputs=("data",),
              params=[Param("size", "int", doc="window (channels)"),
                      Param("alpha", "float", 1e-4, "scale"), Param("beta", "float", 0.75,
                                                                   "exponent"),
                      Param("bias", "float", 1.0, "offset"), Param("axis", "int", 1, "channels")],
              shape=first_input_shape, dtype=same_dtype, reference=_lrn_ref, pattern=OPAQUE,
              support_level=1)
