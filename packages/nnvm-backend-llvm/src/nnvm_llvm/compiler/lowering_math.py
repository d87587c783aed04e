"""Lowering rules of the elementwise ONNX-family ops (``nnvm/ops/math.py``, comparisons).

Each rule mirrors its op's NumPy reference kernel: half-precision inputs are computed in
float32 and rounded back (as NumPy does for float16 ufuncs), integer ``mod`` follows
``numpy.mod``/``numpy.fmod`` including the zero divisor (0, where C would trap), and
comparisons, logic and predicates produce ``bool``.
"""

from __future__ import annotations

import math

import tvm
from tvm import te

from .lowering import _broadcast_rule, _const, expr_dtype, keep_nan, nan_min, register, relu

_HALF = ("float16", "bfloat16")


def _wide(fn):
    """``fn`` applied in float32 when the input is a half type, in its own dtype otherwise."""
    def apply(x):
        if _dtype(x) in _HALF:
            return fn(x.astype("float32")).astype(x.dtype)
        return fn(x)
    return apply


def _elementwise(fn):
    def rule(attrs, ins, outs, ctx):
        x = ins[0]
        return te.compute(x.shape, lambda *i: fn(x[i], attrs), name=ctx.name)
    return rule


_dtype = expr_dtype


def _c(v, x):
    return _const(v, _dtype(x))


def _in_float64(fn, x):
    """``fn`` evaluated in float64 (for rules whose float32 intrinsics lose digits, e.g.
    tanh of a tiny softplus in mish), cast back to ``x``'s dtype."""
    if _dtype(x) == "float64":
        return fn(x)
    return fn(x.astype("float64")).astype(_dtype(x))


def _sigmoid(x):
    return _c(1, x) / (_c(1, x) + te.exp(-x))


def _softplus(x):
    # log(1 + exp(x)) without overflow: max(x, 0) + log(1 + exp(-|x|)), NaN kept
    return relu(x) + te.log(_c(1, x) + te.exp(-te.abs(x)))


def _expm1_neg(x, alpha):
    """alpha * (exp(min(x, 0)) - 1), the negative branch of elu/selu/celu (NaN kept)."""
    return alpha * (te.exp(nan_min(x, _c(0, x))) - _c(1, x))


def _gelu(x, a):
    if a["approximate"] == "tanh":
        inner = _c(math.sqrt(2 / math.pi), x) * (x + _c(0.044715, x) * x * x * x)
        return _c(0.5, x) * x * (_c(1, x) + te.tanh(inner))
    return _c(0.5, x) * x * (_c(1, x) + te.erf(x * _c(1 / math.sqrt(2), x)))


_FLOAT_UNARY = {
    "tan": lambda x, a: te.tan(x), "asin": lambda x, a: te.asin(x),
    "acos": lambda x, a: te.acos(x), "atan": lambda x, a: te.atan(x),
    "sinh": lambda x, a: te.sinh(x), "cosh": lambda x, a: te.cosh(x),
    "asinh": lambda x, a: te.asinh(x), "acosh": lambda x, a: te.acosh(x),
    "atanh": lambda x, a: te.atanh(x),
    "hard_swish": lambda x, a: x * te.min(te.max(x / _c(6, x) + _c(0.5, x), _c(0, x)),
                                          _c(1, x)),
    "mish": lambda x, a: _in_float64(lambda v: v * te.tanh(_softplus(v)), x),
    "elu": lambda x, a: tvm.tirx.Select(x > _c(0, x), x, _expm1_neg(x, _c(a["alpha"], x))),
    "selu": lambda x, a: _c(a["gamma"], x) * tvm.tirx.Select(
        x > _c(0, x), x, _expm1_neg(x, _c(a["alpha"], x))),
    "celu": lambda x, a: relu(x) + nan_min(_c(0, x), _c(a["alpha"], x) * (
        te.exp(nan_min(x, _c(0, x)) / _c(a["alpha"], x)) - _c(1, x))),
    "hard_sigmoid": lambda x, a: keep_nan(x, te.min(te.max(
        _c(a["alpha"], x) * x + _c(a["beta"], x), _c(0, x)), _c(1, x))),
    "thresholded_relu": lambda x, a: tvm.tirx.Select(x > _c(a["alpha"], x), x, _c(0, x)),
    "swish": lambda x, a: x * _sigmoid(_c(a["alpha"], x) * x),
    "shrink": lambda x, a: tvm.tirx.Select(
        x > _c(a["lambd"], x), x - _c(a["bias"], x),
        tvm.tirx.Select(x < _c(-a["lambd"], x), x + _c(a["bias"], x), _c(0, x))),
    "gelu": _gelu,
}

for _name, _fn in _FLOAT_UNARY.items():
    register(_name, "elemwise")(_elementwise(
        (lambda f: lambda x, a: _wide(lambda v: f(v, a))(x))(_fn)))


@register("isnan", "elemwise")
def _isnan(attrs, ins, outs, ctx):
    x = ins[0]
    return te.compute(x.shape, lambda *i: te.isnan(x[i]), name=ctx.name)


@register("isinf", "elemwise")
def _isinf(attrs, ins, outs, ctx):
    x = ins[0]
    pos, neg = bool(attrs["detect_positive"]), bool(attrs["detect_negative"])

    def body(*i):
        v = x[i]
        inf = te.isinf(v)
        if pos and neg:
            return inf
        if pos:
            return tvm.tirx.And(inf, v > _c(0, v))
        if neg:
            return tvm.tirx.And(inf, v < _c(0, v))
        return tvm.tirx.const(False, "bool")
    return te.compute(x.shape, body, name=ctx.name)


@register("logical_not", "elemwise")
def _logical_not(attrs, ins, outs, ctx):
    x = ins[0]
    return te.compute(x.shape, lambda *i: tvm.tirx.Not(x[i]), name=ctx.name)


@register("bitwise_not", "elemwise")
def _bitwise_not(attrs, ins, outs, ctx):
    x = ins[0]
    if str(x.dtype) == "bool":
        return te.compute(x.shape, lambda *i: tvm.tirx.Not(x[i]), name=ctx.name)
    return te.compute(x.shape, lambda *i: ~x[i], name=ctx.name)


# -- binary, broadcasting ------------------------------------------------------------------------

def _safe(b):
    """The divisor with 0 replaced by 1 (the result is then masked), so no SIGFPE."""
    return tvm.tirx.Select(b == _c(0, b), _c(1, b), b)


def _xor(a, b):
    """bool xor (``a != b`` on bools miscompiles to a float compare in TVM 0.27)."""
    return tvm.tirx.Or(tvm.tirx.And(a, tvm.tirx.Not(b)), tvm.tirx.And(tvm.tirx.Not(a), b))


def _float_fmod(a, b):
    """C fmod (LLVM has no fmod intrinsic here): a - trunc(a / b) * b, in float64; a finite
    ``a`` over an infinite ``b`` is ``a`` itself (the formula would give NaN)."""
    dt = _dtype(a)
    a64, b64 = a.astype("float64"), b.astype("float64")
    r = (a64 - te.trunc(a64 / b64) * b64).astype(dt)
    return tvm.tirx.Select(tvm.tirx.And(te.isinf(b), tvm.tirx.Not(te.isinf(a))), a, r)


def _shift_ok(b):
    """0 <= b < bit width: numpy (and ONNX's reference) define other shifts, where C and
    LLVM leave them undefined."""
    bits = tvm.runtime.DataType(_dtype(b)).bits
    return tvm.tirx.And(b >= _c(0, b), b < _c(bits, b))


def _left_shift(a, b):
    return tvm.tirx.Select(_shift_ok(b), a << b, _c(0, a))


def _right_shift(a, b):
    """numpy: an out-of-range shift leaves the sign: -1 for negative ``a``, else 0."""
    sign = tvm.tirx.Select(a < _c(0, a), _c(-1, a), _c(0, a)) if "uint" not in _dtype(a) \
        else _c(0, a)
    return tvm.tirx.Select(_shift_ok(b), a >> b, sign)


def _mod(a, b):
    if "float" in _dtype(a):
        r = _float_fmod(a, b)
        fix = tvm.tirx.And(r != _c(0, r), _xor(r < _c(0, r), b < _c(0, b)))
        return tvm.tirx.Select(fix, r + b, r)
    return tvm.tirx.Select(b == _c(0, b), _c(0, a), te.floormod(a, _safe(b)))


def _fmod(a, b):
    if "float" in _dtype(a):
        return _float_fmod(a, b)
    return tvm.tirx.Select(b == _c(0, b), _c(0, a), te.truncmod(a, _safe(b)))


_BINARY = {
    "broadcast_equal": lambda a, b: a == b, "broadcast_not_equal": lambda a, b: a != b,
    "broadcast_greater": lambda a, b: a > b, "broadcast_greater_equal": lambda a, b: a >= b,
    "broadcast_less": lambda a, b: a < b, "broadcast_less_equal": lambda a, b: a <= b,
    "logical_and": tvm.tirx.And, "logical_or": tvm.tirx.Or,
    "logical_xor": _xor,
    "bitwise_and": lambda a, b: a & b, "bitwise_or": lambda a, b: a | b,
    "bitwise_xor": lambda a, b: a ^ b,
    "broadcast_left_shift": _left_shift, "broadcast_right_shift": _right_shift,
    "broadcast_mod": _mod, "broadcast_fmod": _fmod,
}


def _bool_ops_rule(fn):
    """``bitwise_*`` on bool tensors: TVM has no bit ops on bool, use logic."""
    base = _broadcast_rule(fn)

    def rule(attrs, ins, outs, ctx):
        if str(ins[0].dtype) == "bool" and fn in (_BINARY["bitwise_and"], _BINARY["bitwise_or"],
                                                  _BINARY["bitwise_xor"]):
            logic = {_BINARY["bitwise_and"]: tvm.tirx.And, _BINARY["bitwise_or"]: tvm.tirx.Or,
                     _BINARY["bitwise_xor"]: _BINARY["logical_xor"]}[fn]
            return _broadcast_rule(logic)(attrs, ins, outs, ctx)
        return base(attrs, ins, outs, ctx)
    return rule


for _name, _fn in _BINARY.items():
    register(_name, "elemwise")(_bool_ops_rule(_fn))


@register("prelu", "elemwise")
def _prelu(attrs, ins, outs, ctx):
    x, alpha = ins
    axis = attrs.get("axis")
    if axis is not None:  # NNVM form: a 1-D slope along one axis
        ax = axis % len(x.shape)
        return te.compute(x.shape, lambda *i: tvm.tirx.Select(
            x[i] < _c(0, x), alpha[i[ax]] * x[i], x[i]), name=ctx.name)
    return _broadcast_rule(lambda v, s: tvm.tirx.Select(v < _c(0, v), s * v, v))(
        attrs, ins, outs, ctx)
