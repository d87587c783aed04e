"""Elementwise ONNX ops: arithmetic, comparisons, logic, activations, casts and constants."""

from __future__ import annotations

import numpy as np

from ..errors import OnnxImportError, OnnxUnsupportedError, format_error
from ..registry import converter
from ..tensors import np_dtype, onnx_dtype_name
from nnvm.dtypes import is_float

from .common import cast, chain

# -- unary ops with an NNVM op of the same meaning --------------------------------------------

_UNARY = {
    "Abs": "abs", "Neg": "negative", "Exp": "exp", "Log": "log", "Sqrt": "sqrt",
    "Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Erf": "erf", "Floor": "floor",
    "Ceil": "ceil", "Round": "round", "Sin": "sin", "Cos": "cos", "Tan": "tan", "Asin": "asin",
    "Acos": "acos", "Atan": "atan", "Sinh": "sinh", "Cosh": "cosh", "Asinh": "asinh",
    "Acosh": "acosh", "Atanh": "atanh", "Reciprocal": "reciprocal", "Softplus": "softplus",
    "Softsign": "softsign", "Sign": "sign", "IsNaN": "isnan", "HardSwish": "hard_swish",
    "Mish": "mish", "Not": "logical_not", "BitwiseNot": "bitwise_not",
}


def _unary(nnvm_op):
    def convert(ctx, node):
        return [ctx.op(nnvm_op, ctx.input(0))]
    return convert


for _onnx, _nnvm in _UNARY.items():
    converter(_onnx, requires=(_nnvm,))(_unary(_nnvm))


def _attr_unary(nnvm_op, **defaults):
    """Unary op whose ONNX attributes map one to one (with ONNX's defaults)."""
    def convert(ctx, node):
        attrs = {k: ctx.attr(k, d) for k, d in defaults.items()}
        return [ctx.op(nnvm_op, ctx.input(0), **attrs)]
    return convert


converter("Elu", requires=("elu",))(_attr_unary("elu", alpha=1.0))
converter("Selu", requires=("selu",))(_attr_unary(
    "selu", alpha=1.67326319217681884765625, gamma=1.05070102214813232421875))
converter("Celu", requires=("celu",))(_attr_unary("celu", alpha=1.0))
converter("HardSigmoid", requires=("hard_sigmoid",))(_attr_unary("hard_sigmoid", alpha=0.2,
                                                                 beta=0.5))
converter("ThresholdedRelu", requires=("thresholded_relu",))(_attr_unary("thresholded_relu",
                                                                         alpha=1.0))
converter("LeakyRelu", requires=("leaky_relu",))(_attr_unary("leaky_relu", alpha=0.01))
converter("Shrink", requires=("shrink",))(_attr_unary("shrink", bias=0.0, lambd=0.5))
converter("Gelu", since=20, requires=("gelu",))(_attr_unary("gelu", approximate="none"))


@converter("IsInf", requires=("isinf",))
def _isinf(ctx, node):
    return [ctx.op("isinf", ctx.input(0), detect_positive=bool(ctx.attr("detect_positive", 1)),
                   detect_negative=bool(ctx.attr("detect_negative", 1)))]


@converter("PRelu", requires=("prelu",))
def _prelu(ctx, node):
    x, slope = ctx.input(0), ctx.input(1)
    rank, slope_shape = ctx.rank(x), ctx.shape(slope)
    if ctx.opset < 7 and len(slope_shape) == 1 and slope_shape[0] != 1 and rank > 2:
        # Before opset 7 PRelu used ONNX's legacy broadcast: a (C,) slope is per channel,
        # aligned to axis 1 (PyTorch's exporter relied on it), not to the last axis as numpy.
        slope = ctx.op("reshape", slope, shape=slope_shape + (1,) * (rank - 2))
    return [ctx.op("prelu", x, cast(ctx, slope, ctx.dtype(x)))]


# -- binary broadcasting ops ----------------------------------------------------------------

_BINARY = {
    "Add": "broadcast_add", "Sub": "broadcast_sub", "Mul": "broadcast_mul",
    "Div": "broadcast_div", "Equal": "broadcast_equal", "Greater": "broadcast_greater",
    "Less": "broadcast_less", "GreaterOrEqual": "broadcast_greater_equal",
    "LessOrEqual": "broadcast_less_equal", "And": "logical_and", "Or": "logical_or",
    "Xor": "logical_xor", "BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or",
    "BitwiseXor": "bitwise_xor",
}


def _binary(nnvm_op):
    def convert(ctx, node):
        return [ctx.op(nnvm_op, ctx.input(0), ctx.input(1))]
    return convert


for _onnx, _nnvm in _BINARY.items():
    converter(_onnx, requires=(_nnvm,))(_binary(_nnvm))


@converter("Div", since=7, requires=("broadcast_div",))
def _div(ctx, node):
    a, b = ctx.input(0), ctx.input(1)
    if ctx.dtype(a)[0] in "iu":
        # ONNX integer division truncates toward zero, as C does.
        q = ctx.op("broadcast_div", cast(ctx, a, "float64"), cast(ctx, b, "float64"))
        return [cast(ctx, ctx.op("trunc", q), ctx.dtype(a))]
    return [ctx.op("broadcast_div", a, b)]


@converter("Pow", requires=("broadcast_pow",))
def _pow(ctx, node):
    x, y = ctx.input(0), ctx.input(1)
    if ctx.dtype(x)[0] in "iu":
        out = ctx.op("broadcast_pow", cast(ctx, x, "float64"), cast(ctx, y, "float64"))
        return [cast(ctx, out, ctx.dtype(x))]
    return [ctx.op("broadcast_pow", x, cast(ctx, y, ctx.dtype(x)))]


@converter("Mod", requires=("broadcast_mod", "broadcast_fmod"))
def _mod(ctx, node):
    op = "broadcast_fmod" if ctx.attr("fmod", 0) else "broadcast_mod"
    return [ctx.op(op, ctx.input(0), ctx.input(1))]


@converter("BitShift", requires=("broadcast_left_shift", "broadcast_right_shift"))
def _bitshift(ctx, node):
    direction = ctx.attr("direction")
    op = "broadcast_left_shift" if direction == "LEFT" else "broadcast_right_shift"
    return [ctx.op(op, ctx.input(0), ctx.input(1))]


def _variadic(nnvm_op, mean=False):
    def convert(ctx, node):
        vals = [ctx.input(i) for i in range(ctx.num_inputs) if ctx.has_input(i)]
        out = chain(ctx, nnvm_op, vals)
        if mean:
            n = ctx.constant(np.array(len(vals), dtype=np_dtype(ctx.dtype(out))))
            out = ctx.op("broadcast_div", out, n)
        return [out]
    return convert


converter("Sum", requires=("broadcast_add",))(_variadic("broadcast_add"))
converter("Mean", requires=("broadcast_add",))(_variadic("broadcast_add", mean=True))
converter("Max", requires=("broadcast_maximum",))(_variadic("broadcast_maximum"))
converter("Min", requires=("broadcast_minimum",))(_variadic("broadcast_minimum"))


@converter("Clip", requires=("broadcast_maximum", "broadcast_minimum"))
def _clip_v1(ctx, node):
    x = ctx.input(0)
    lo = ctx.attr("min", -3.4028234663852886e38)
    hi = ctx.attr("max", 3.4028234663852886e38)
    dt = np_dtype(ctx.dtype(x))
    x = ctx.op("broadcast_maximum", x, ctx.constant(np.array(lo, dtype=dt)))
    return [ctx.op("broadcast_minimum", x, ctx.constant(np.array(hi, dtype=dt)))]


@converter("Clip", since=11, requires=("broadcast_maximum", "broadcast_minimum"))
def _clip_v11(ctx, node):
    x = ctx.input(0)
    if ctx.has_input(1):
        x = ctx.op("broadcast_maximum", x, ctx.input(1))
    if ctx.has_input(2):
        x = ctx.op("broadcast_minimum", x, ctx.input(2))
    if not ctx.has_input(1) and not ctx.has_input(2):
        x = ctx.op("copy", x)
    return [x]


@converter("Where", requires=("where",))
def _where(ctx, node):
    return [ctx.op("where", cast(ctx, ctx.input(0), "bool"), ctx.input(1), ctx.input(2))]


# -- identity-like, casts, constants -----------------------------------------------------------

@converter(("Identity", "StopGradient"))
def _identity(ctx, node):
    return [ctx.input(0)]


@converter("Dropout")
def _dropout(ctx, node):
    """Inference semantics; training mode with a non-zero ratio is random, so refused."""
    x = ctx.input(0)
    if ctx.has_input(2) and bool(np.asarray(ctx.const(2)).reshape(-1)[0]):
        ratio = float(np.asarray(ctx.const(1)).reshape(-1)[0]) if ctx.has_input(1) else 0.5
        if ratio != 0.0:
            raise OnnxUnsupportedError(format_error(
                ctx.where, "training-mode dropout is random and is not supported",
                fix="Export the model in eval mode (training_mode=False)"))
    outs = [x]
    if ctx.num_outputs > 1 and node.output[1]:
        outs.append(ctx.constant(np.ones(ctx.shape(x), dtype=bool)))
    return outs


#: float8 types whose ONNX Cast saturates by default (out-of-range -> +-max, not inf/NaN).
_SATURATING = {"float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"}


def _cast_to(ctx, x, to):
    """ONNX Cast semantics on NNVM ops: float8 saturation is a clip to the type's range
    before the (IEEE-rounding) cast, and float8_e8m0 has its own exponent-rounding kernel."""
    if x.dtype == to:
        return ctx.op("copy", x)
    saturate = bool(ctx.attr("saturate", 1))
    if to == "float8_e8m0fnu":
        return ctx.op("cast_e8m0", x, saturate=saturate,
                      round_mode=ctx.attr("round_mode", "up"))
    if to in _SATURATING and saturate and x.dtype is not None and is_float(x.dtype):
        import ml_dtypes

        hi = float(ml_dtypes.finfo(np_dtype(to)).max)
        x = ctx.op("clip", x, a_min=-hi, a_max=hi)
    return ctx.op("cast", x, dtype=to)


@converter("Cast", requires=("cast",))
def _cast(ctx, node):
    return [_cast_to(ctx, ctx.input(0), onnx_dtype_name(ctx.attr("to"), ctx.where))]


@converter("CastLike", requires=("cast",))
def _cast_like(ctx, node):
    return [_cast_to(ctx, ctx.input(0), ctx.dtype(1))]


@converter("Constant")
def _constant(ctx, node):
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if ctx.has_attr(key):
            v = ctx.attr(key)
            if key == "value_float" or key == "value_floats":
                v = np.asarray(v, dtype=np.float32)
            elif key in ("value_int", "value_ints"):
                v = np.asarray(v, dtype=np.int64)
            return [ctx.constant(v, name=node.output[0])]
    raise OnnxUnsupportedError(format_error(ctx.where, "only numeric tensor constants are "
                                            "supported", fix="string and sparse constants are "
                                            "not"))


@converter("ConstantOfShape")
def _constant_of_shape(ctx, node):
    value = ctx.attr("value", np.zeros((1,), dtype=np.float32))
    if ctx.data_dependent(0):  # the shape exists only at run time
        return [ctx.op("constant_of_shape", cast(ctx, ctx.input(0), "int64"),
                       value=float(value.reshape(-1)[0]), dtype=value.dtype.name)]
    shape = [int(d) for d in ctx.const(0).reshape(-1)]
    if any(d < 0 for d in shape):
        raise OnnxImportError(format_error(ctx.where, "negative dimension in shape", got=shape))
    return [ctx.constant(np.full(shape, value.reshape(-1)[0], dtype=value.dtype))]


@converter("Shape")
def _shape(ctx, node):
    x = ctx.input(0)
    runtime = x.shape is None and ctx.data_dependent(x)
    rank = ctx.rank(x) if runtime else len(ctx.shape(x))
    start = ctx.attr("start", 0)
    end = ctx.attr("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    if runtime:  # dims known only at run time (downstream of NonZero...): read them then
        return [ctx.op("shape_of", x, start=start, end=max(start, end))]
    return [ctx.constant(np.array(x.shape[start:end], dtype=np.int64), name=node.output[0])]


@converter("Size")
def _size(ctx, node):
    x = ctx.input(0)
    if x.shape is None and ctx.data_dependent(x):
        return [ctx.op("size_of", x)]
    return [ctx.constant(np.array(int(np.prod(ctx.shape(x))), dtype=np.int64))]
