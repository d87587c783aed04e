"""Quantisation ops with ONNX semantics: (de)quantize_linear, dynamic quantisation, integer and
quantised-linear matmul and convolution.

Scales and zero points may be per tensor (scalar), per axis (1-D along ``axis``) or blocked
(same rank as the data, ``block_size`` elements per scale along ``axis``). The quantised
dtype is the zero point's: int8/uint8/int16/uint16/int32, and int4/uint4 or float8 when the
ml_dtypes package supplies them. Rounding is half to even and results saturate, as in ONNX.
Absent ONNX zero points are given by the importer as zero constants of the target dtype.
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..op import OpPattern, OpSet
from ..params import Param
from .common import first_input_shape
from .nn_nd import _CONV_PARAMS, _conv_ref, _conv_shape

defs = OpSet("quantize")

OPAQUE = OpPattern.OPAQUE


def _expand(p, x, axis, block):
    """Broadcastable view of a scale or zero point against ``x``."""
    p = np.asarray(p)
    if p.size == 1 and p.ndim <= 1:
        return p.reshape(())
    axis %= x.ndim
    if block > 0 or p.ndim == x.ndim and p.ndim > 1:
        if block <= 0:
            raise ShapeError(f"a scale of rank {p.ndim} needs block_size > 0")
        return np.repeat(p, block, axis=axis).take(np.arange(x.shape[axis]), axis=axis)
    if p.ndim != 1 or p.shape[0] != x.shape[axis]:
        raise ShapeError(f"per-axis scale of shape {p.shape} does not match axis {axis} of "
                         f"data {x.shape}")
    shape = [1] * x.ndim
    shape[axis] = -1
    return p.reshape(shape)


def _saturate(y, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind in "iu" or dtype.name in ("int4", "uint4", "int2", "uint2"):
        import ml_dtypes

        info = ml_dtypes.iinfo(dtype) if dtype.kind not in "iu" else np.iinfo(dtype)
        return np.clip(np.rint(y), info.min, info.max).astype(dtype)
    return y.astype(dtype)


def _float8_cast(y, dtype, saturate):
    import ml_dtypes

    info = ml_dtypes.finfo(dtype)
    if saturate:
        y = np.where(np.isinf(y) | (np.abs(y) > float(info.max)),
                     np.sign(y) * float(info.max), y)
        y = np.where(np.isnan(y), np.nan, y)
    return y.astype(dtype)


def _quantize_ref(attrs, x, scale, zp):
    ax, blk = attrs["axis"], attrs["block_size"]
    s = _expand(scale, x, ax, blk).astype(np.float64)
    z = _expand(zp, x, ax, blk)
    y = x.astype(np.float64) / s
    if zp.dtype.kind == "f" or zp.dtype.name.startswith("float"):  # float8, float4
        return _float8_cast(y + z.astype(np.float64), zp.dtype, attrs["saturate"])
    return _saturate(np.rint(y) + z.astype(np.float64), zp.dtype)


def _dequantize_ref(attrs, x, scale, zp):
    ax, blk = attrs["axis"], attrs["block_size"]
    s = _expand(scale, x, ax, blk)
    z = _expand(zp, x, ax, blk).astype(np.float64)
    y = (x.astype(np.float64) - z) * s.astype(np.float64)
    return y.astype(scale.dtype)


_QPARAMS = [Param("axis", "int", 1, "axis of per-axis / blocked scales"),
            Param("block_size", "int", 0, "elements per scale along axis; 0 = not blocked")]


defs.op_once("quantize_linear", doc="ONNX QuantizeLinear: saturate(round(x / scale) + zero "
              "point) in the zero point's dtype.", inputs=("data", "scale", "zero_point"),
              params=_QPARAMS + [Param("saturate", "bool", True, "float8: clamp to the range")],
              shape=first_input_shape, dtype=lambda attrs, ins, outs: (ins, [ins[2]]),
              reference=_quantize_ref, pattern=OpPattern.ELEMWISE, support_level=6)
defs.op_once("dequantize_linear", doc="ONNX DequantizeLinear: (x - zero point) * scale in the "
              "scale's dtype.", inputs=("data", "scale", "zero_point"), params=_QPARAMS,
              shape=first_input_shape, dtype=lambda attrs, ins, outs: (ins, [ins[1]]),
              reference=_dequantize_ref, pattern=OpPattern.ELEMWISE, support_level=6)


def _dyn_ref(attrs, x):
    """In float32 throughout, as onnxruntime computes it (float64 differs by an ulp in the
    scale for ~1 in 6 inputs); an all-zero input gets scale 1 (onnxruntime's choice: every
    value then quantises to the zero point exactly)."""
    f32 = np.float32
    lo = min(f32(0), f32(x.min())) if x.size else f32(0)
    hi = max(f32(0), f32(x.max())) if x.size else f32(0)
    scale = f32((hi - lo) / f32(255))
    if scale == 0:
        scale = f32(1)
    zp = np.uint8(np.clip(np.rint(f32(0) - lo / scale), 0, 255))
    y = _saturate(np.rint(x.astype(f32) / scale) + f32(zp), np.uint8)
    return y, np.array(scale, f32), np.array(zp, np.uint8)


defs.op_once("dynamic_quantize_linear", doc="ONNX DynamicQuantizeLinear: uint8 quantisation "
              "with scale and zero point computed from the data's range (including 0).",
              inputs=("data",), outputs=("output", "scale", "zero_point"),
              shape=lambda attrs, ins, outs: (ins, outs if ins[0] is None else
                                              [ins[0], (), ()]),
              dtype=lambda attrs, ins, outs: (ins, ["uint8", "float32", "uint8"]),
              reference=_dyn_ref, pattern=OPAQUE, support_level=6)


def _e8m0_ref(attrs, x):
    """Float -> float8_e8m0fnu (a bare power of two) by exponent bits, as ONNX Cast does:
    ml_dtypes rounds to nearest and has no saturation, ONNX defaults to rounding up."""
    import ml_dtypes

    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    exponent = ((bits >> 23) & 0xFF).astype(np.uint16)
    special = exponent == 0xFF
    mode = attrs["round_mode"]
    if mode == "nearest":
        g, r, s = (bits & 0x400000) > 0, (bits & 0x200000) > 0, (bits & 0x1FFFFF) > 0
        up = g & (r | s | (exponent > 0))
    elif mode == "up":
        up = (bits & 0x7FFFFF) > 0
    else:
        up = np.zeros(bits.shape, dtype=bool)
    up &= ~special
    if attrs["saturate"]:
        up &= exponent != 0xFE
    out = np.where(special, 0xFF, exponent + up).astype(np.uint8)
    return out.view(ml_dtypes.float8_e8m0fnu)


defs.op_once("cast_e8m0", doc="ONNX Cast to FLOAT8E8M0: keep the exponent, round the mantissa "
              "away (round_mode up/nearest/down); saturate keeps the largest finite exponent.",
              params=[Param("saturate", "bool", True, "never round up into NaN"),
                      Param("round_mode", "str", "up", "mantissa rounding",
                            choices=("up", "nearest", "down"))],
              shape=first_input_shape,
              dtype=lambda attrs, ins, outs: (ins, ["float8_e8m0fnu"]), reference=_e8m0_ref,
              gradient=lambda n, og: [None], pattern=OpPattern.ELEMWISE, support_level=6)


# -- integer matmul / conv ----------------------------------------------------------------------

def _matmul_out(a, b):
    """numpy matmul's output shape, or None while an operand is unknown."""
    if a is None or b is None:
        return None
    a2, b2 = (1,) + tuple(a) if len(a) == 1 else tuple(a), tuple(b) + (1,) if len(b) == 1 \
        else tuple(b)
    if a2[-1] != b2[-2]:
        raise ShapeError(f"matmul inner sizes differ: {a} and {b}")
    batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def _row_zp(zp, a):
    zp = np.asarray(zp).astype(np.int64)
    return zp.reshape(-1, 1) if zp.ndim == 1 and zp.size > 1 and a.ndim >= 2 else zp


def _matmul_integer_ref(attrs, a, b, azp, bzp):
    return np.matmul(a.astype(np.int64) - _row_zp(azp, a),
                     b.astype(np.int64) - np.asarray(bzp).astype(np.int64)).astype(np.int32)


defs.op_once("matmul_integer", doc="ONNX MatMulInteger: (a - a_zero_point) @ (b - b_zero_point) "
              "in int32 (a's zero point per row or scalar, b's per column or scalar).",
              inputs=("a", "b", "a_zero_point", "b_zero_point"),
              shape=lambda attrs, ins, outs: (ins, [_matmul_out(ins[0], ins[1])]),
              dtype=lambda attrs, ins, outs: (ins, ["int32"]), reference=_matmul_integer_ref,
              pattern=OPAQUE, support_level=6)


def _qlinear_matmul_ref(attrs, a, as_, azp, b, bs, bzp, ys, yzp):
    acc = np.matmul(a.astype(np.int64) - _row_zp(azp, a),
                    b.astype(np.int64) - np.asarray(bzp).astype(np.int64)).astype(np.float64)
    a_s = np.asarray(as_, np.float64)
    a_s = a_s.reshape(-1, 1) if a_s.ndim == 1 and a_s.size > 1 else a_s
    y = acc * a_s * np.asarray(bs, np.float64) / np.asarray(ys, np.float64)
    return _saturate(np.rint(y) + np.asarray(yzp).astype(np.float64), yzp.dtype)


defs.op_once("qlinear_matmul", doc="ONNX QLinearMatMul: quantised matmul, requantised to the "
              "output scale and zero point.",
              inputs=("a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point",
                      "y_scale", "y_zero_point"),
              shape=lambda attrs, ins, outs: (ins, [_matmul_out(ins[0], ins[3])]),
              dtype=lambda attrs, ins, outs: (ins, [ins[7]]), reference=_qlinear_matmul_ref,
              pattern=OPAQUE, support_level=6)


def _conv_attrs(attrs, use_bias=False):
    return {**{k: attrs[k] for k in ("strides", "pads", "dilations", "groups")},
            "use_bias": use_bias}


def _wzp(zp, w):
    zp = np.asarray(zp).astype(np.int64)
    return zp.reshape((-1,) + (1,) * (w.ndim - 1)) if zp.size > 1 else zp.reshape(())


def _conv_integer_ref(attrs, x, w, xzp, wzp):
    xi = x.astype(np.int64) - np.asarray(xzp).astype(np.int64).reshape(())
    wi = w.astype(np.int64) - _wzp(wzp, w)
    return _conv_ref(_conv_attrs(attrs), xi, wi).astype(np.int32)


defs.op_once("conv_integer", doc="ONNX ConvInteger: conv of (x - x_zero_point) and (w - "
              "w_zero_point) accumulated in int32.",
              inputs=("data", "weight", "x_zero_point", "w_zero_point"), params=_CONV_PARAMS,
              shape=lambda attrs, ins, outs: (ins, _conv_shape(
                  attrs, ins[:2], outs)[1]),
              dtype=lambda attrs, ins, outs: (ins, ["int32"]), reference=_conv_integer_ref,
              pattern=OPAQUE, support_level=6)


def _qlinear_conv_ref(attrs, x, xs, xzp, w, ws, wzp, ys, yzp, bias=None):
    acc = _conv_integer_ref(attrs, x, w, xzp, wzp).astype(np.float64)
    if bias is not None:
        acc = acc + bias.reshape((1, -1) + (1,) * (x.ndim - 2))
    wsc = np.asarray(ws, np.float64)
    wsc = wsc.reshape((1, -1) + (1,) * (x.ndim - 2)) if wsc.size > 1 else wsc.reshape(())
    y = acc * float(np.asarray(xs)) * wsc / float(np.asarray(ys))
    return _saturate(np.rint(y) + float(np.asarray(yzp)), yzp.dtype)


defs.op_once("qlinear_conv", doc="ONNX QLinearConv: quantised conv (int32 bias optional), "
              "requantised to the output scale and zero point.",
              inputs=lambda attrs: ["data", "x_scale", "x_zero_point", "weight", "w_scale",
                                    "w_zero_point", "y_scale", "y_zero_point"] + (
                  ["bias"] if attrs["use_bias"] else []),
              params=_CONV_PARAMS + [Param("use_bias", "bool", False, "int32 bias input")],
              shape=lambda attrs, ins, outs: (ins, _conv_shape(
                  attrs, [ins[0], ins[3]], outs)[1]),
              dtype=lambda attrs, ins, outs: (ins, [ins[7]]), reference=_qlinear_conv_ref,
              pattern=OPAQUE, support_level=6)
