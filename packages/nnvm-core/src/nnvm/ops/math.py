"""Elementwise math for ONNX: rounding, trigonometry, activations, logic, bit ops, mod.

Each op is one ``defs.op`` record (shape rule, dtype rule, NumPy kernel, gradient,
fusion pattern). A differentiable unary op ``f`` gets a hidden ``_<f>_backward(out_grad,
data)`` op whose kernel is ``out_grad * f'(data)``: one elementwise kernel per gradient, so
a backend that fuses the forward op fuses its gradient as well.
"""

from __future__ import annotations

import math

import numpy as np

from ..op import OpPattern, OpSet
from ..params import Param
from .common import (broadcast_shape, inplace_first, op, same_dtype, same_shape,
                     sum_to_like, to_dtype)

defs = OpSet("math")

E, B = OpPattern.ELEMWISE, OpPattern.BROADCAST


def _erf(x):
    try:
        from scipy.special import erf
        return erf(x)
    except ImportError:  # scipy is optional: exact but slower fallback
        return np.vectorize(math.erf, otypes=[np.float64])(x)


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _softplus(x):
    return np.logaddexp(0, x)


_SELU_A, _SELU_G = 1.6732632423543772, 1.0507009873554805


def _no_gradient(n, og):
    return [None] * len(n.inputs)


def _derivative_op(name, deriv, plist):
    """Register ``_<name>_backward`` (out_grad * f'(data)); return the FGradient using it."""
    bname = f"_{name}_backward"

    def bref(attrs, og, x):
        return to_dtype(og * deriv(x.astype(np.float64), attrs), og)

    defs.op_once(bname, doc=f"Gradient of {name}: out_grad * {name}'(data).",
                  inputs=("out_grad", "data"), params=plist, shape=same_shape,
                  dtype=same_dtype, reference=bref, pattern=E, inplace=inplace_first)
    keys = [p.name for p in plist]
    return lambda n, og: [op(bname, og[0], n.inputs[0], **{k: n.attrs[k] for k in keys})]


def _unary(name, doc, kernel, deriv=None, level=3, **params):
    """Register ``name`` and, with ``deriv(x, attrs)`` given, ``_<name>_backward``."""
    plist = [Param(k, kind, default, doc_) for k, (kind, default, doc_) in params.items()]
    gradient = _no_gradient if deriv is None else _derivative_op(name, deriv, plist)

    def ref(attrs, x):
        return to_dtype(kernel(x, attrs), x)

    defs.op_once(name, doc=doc, inputs=("data",), params=plist, shape=same_shape,
                  dtype=same_dtype, reference=ref, gradient=gradient, pattern=E,
                  inplace=inplace_first, support_level=level)


_NOGRAD = None  # not differentiable almost everywhere: FGradient gives no gradient
_unary("erf", "Gauss error function.", lambda x, a: _erf(x),
       lambda x, a: 2.0 / math.sqrt(math.pi) * np.exp(-x * x))
_unary("floor", "Round toward minus infinity.", lambda x, a: np.floor(x), _NOGRAD)
_unary("ceil", "Round toward plus infinity.", lambda x, a: np.ceil(x), _NOGRAD)
_unary("round", "Round half to even (ONNX Round, numpy.round).", lambda x, a: np.round(x),
       _NOGRAD)
_unary("trunc", "Round toward zero.", lambda x, a: np.trunc(x), _NOGRAD)
_unary("sin", "Sine.", lambda x, a: np.sin(x), lambda x, a: np.cos(x))
_unary("cos", "Cosine.", lambda x, a: np.cos(x), lambda x, a: -np.sin(x))
_unary("tan", "Tangent.", lambda x, a: np.tan(x), lambda x, a: 1.0 + np.tan(x) ** 2)
_unary("asin", "Arc sine.", lambda x, a: np.arcsin(x), lambda x, a: 1.0 / np.sqrt(1 - x * x))
_unary("acos", "Arc cosine.", lambda x, a: np.arccos(x), lambda x, a: -1.0 / np.sqrt(1 - x * x))
_unary("atan", "Arc tangent.", lambda x, a: np.arctan(x), lambda x, a: 1.0 / (1 + x * x))
_unary("sinh", "Hyperbolic sine.", lambda x, a: np.sinh(x), lambda x, a: np.cosh(x))
_unary("cosh", "Hyperbolic cosine.", lambda x, a: np.cosh(x), lambda x, a: np.sinh(x))
_unary("asinh", "Inverse hyperbolic sine.", lambda x, a: np.arcsinh(x),
       lambda x, a: 1.0 / np.sqrt(x * x + 1))
_unary("acosh", "Inverse hyperbolic cosine.", lambda x, a: np.arccosh(x),
       lambda x, a: 1.0 / np.sqrt(x * x - 1))
_unary("atanh", "Inverse hyperbolic tangent.", lambda x, a: np.arctanh(x),
       lambda x, a: 1.0 / (1 - x * x))
_unary("reciprocal", "1 / x.", lambda x, a: np.reciprocal(x) if x.dtype.kind == "f"
       else 1 / x, lambda x, a: -1.0 / (x * x))
_unary("softplus", "log(1 + exp(x)), computed without overflow.",
       lambda x, a: _softplus(x), lambda x, a: _sigmoid(x))
_unary("softsign", "x / (1 + |x|).", lambda x, a: x / (1 + np.abs(x)),
       lambda x, a: 1.0 / (1 + np.abs(x)) ** 2)
_unary("hard_swish", "x * max(0, min(1, x / 6 + 1/2)).",
       lambda x, a: x * np.clip(x / 6 + 0.5, 0, 1),
       lambda x, a: np.where(x < -3, 0.0, np.where(x > 3, 1.0, x / 3 + 0.5)))
_unary("mish", "x * tanh(softplus(x)).", lambda x, a: x * np.tanh(_softplus(x)),
       lambda x, a: np.tanh(_softplus(x)) + x * _sigmoid(x) * (1 - np.tanh(_softplus(x)) ** 2))
_unary("elu", "x if x > 0 else alpha * (exp(x) - 1).",
       lambda x, a: np.where(x > 0, x, a["alpha"] * np.expm1(np.minimum(x, 0))),
       lambda x, a: np.where(x > 0, 1.0, a["alpha"] * np.exp(np.minimum(x, 0))),
       alpha=("float", 1.0, "slope of the negative part"))
_unary("selu", "gamma * (x if x > 0 else alpha * (exp(x) - 1)).",
       lambda x, a: a["gamma"] * np.where(x > 0, x, a["alpha"] * np.expm1(np.minimum(x, 0))),
       lambda x, a: a["gamma"] * np.where(x > 0, 1.0, a["alpha"] * np.exp(np.minimum(x, 0))),
       alpha=("float", _SELU_A, "alpha"), gamma=("float", _SELU_G, "gamma"))
_unary("celu", "max(0, x) + min(0, alpha * (exp(x / alpha) - 1)).",
       lambda x, a: np.maximum(x, 0) + np.minimum(0, a["alpha"] * np.expm1(
           np.minimum(x, 0) / a["alpha"])),
       lambda x, a: np.where(x > 0, 1.0, np.exp(np.minimum(x, 0) / a["alpha"])),
       alpha=("float", 1.0, "alpha"))
_unary("hard_sigmoid", "max(0, min(1, alpha * x + beta)).",
       lambda x, a: np.clip(a["alpha"] * x + a["beta"], 0, 1),
       lambda x, a: np.where((a["alpha"] * x + a["beta"] > 0) & (a["alpha"] * x + a["beta"] < 1),
                             a["alpha"], 0.0),
       alpha=("float", 0.2, "slope"), beta=("float", 0.5, "offset"))
_unary("thresholded_relu", "x if x > alpha else 0.", lambda x, a: np.where(x > a["alpha"], x, 0),
       lambda x, a: np.where(x > a["alpha"], 1.0, 0.0), alpha=("float", 1.0, "threshold"))
_unary("swish", "x * sigmoid(alpha * x).", lambda x, a: x * _sigmoid(a["alpha"] * x),
       lambda x, a: _sigmoid(a["alpha"] * x) * (1 + a["alpha"] * x * (
           1 - _sigmoid(a["alpha"] * x))), alpha=("float", 1.0, "alpha"))
_unary("shrink", "x - bias if x > lambd, x + bias if x < -lambd, else 0.",
       lambda x, a: np.where(x > a["lambd"], x - a["bias"],
                             np.where(x < -a["lambd"], x + a["bias"], 0)),
       lambda x, a: np.where(np.abs(x) > a["lambd"], 1.0, 0.0),
       bias=("float", 0.0, "shift"), lambd=("float", 0.5, "threshold"))


def _gelu(x, a):
    if a["approximate"] == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def _gelu_deriv(x, a):
    if a["approximate"] == "tanh":
        c = math.sqrt(2 / math.pi)
        t = np.tanh(c * (x + 0.044715 * x ** 3))
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x)
    return 0.5 * (1 + _erf(x / math.sqrt(2))) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


defs.op_once("gelu", doc="Gaussian error linear unit, exact (erf) or tanh-approximated.",
              inputs=("data",), params=[Param("approximate", "str", "none", "none or tanh",
                                              ("none", "tanh"))],
              shape=same_shape, dtype=same_dtype,
              reference=lambda attrs, x: to_dtype(_gelu(x, attrs), x),
              gradient=lambda n, og: [op("_gelu_backward", og[0], n.inputs[0],
                                         approximate=n.attrs["approximate"])],
              pattern=E, inplace=inplace_first, support_level=3)
defs.op_once("_gelu_backward", doc="Gradient of gelu.", inputs=("out_grad", "data"),
              params=[Param("approximate", "str", "none", "none or tanh", ("none", "tanh"))],
              shape=same_shape, dtype=same_dtype,
              reference=lambda attrs, og, x: to_dtype(og * _gelu_deriv(
                  x.astype(np.float64), attrs), og), pattern=E, inplace=inplace_first)


# -- predicates ---------------------------------------------------------------------------------

def _same_in_bool_out(attrs, ins, outs):
    return ins, ["bool"] * len(outs)


defs.op_once("isnan", doc="True where the input is NaN.", inputs=("data",), shape=same_shape,
              dtype=_same_in_bool_out, reference=lambda attrs, x: np.isnan(x),
              gradient=lambda n, og: [None], pattern=E, support_level=4)


def _isinf_ref(attrs, x):
    pos, neg = attrs["detect_positive"], attrs["detect_negative"]
    return np.isinf(x) & ((x > 0) & pos | (x < 0) & neg)


defs.op_once("isinf", doc="True where the input is +inf and/or -inf (ONNX IsInf).",
              inputs=("data",), params=[Param("detect_positive", "bool", True, "match +inf"),
                                        Param("detect_negative", "bool", True, "match -inf")],
              shape=same_shape, dtype=_same_in_bool_out, reference=_isinf_ref,
              gradient=lambda n, og: [None], pattern=E, support_level=4)


# -- logic and bits -----------------------------------------------------------------------------

def _bool_rule(attrs, ins, outs):
    for t in ins:
        if t is not None and t != "bool":
            from ..errors import TypeInferenceError
            raise TypeInferenceError(f"logical ops take bool inputs; got {t}. Cast to bool first")
    return ["bool"] * len(ins), ["bool"] * len(outs)


def _int_rule(attrs, ins, outs):
    ins, outs = same_dtype(attrs, ins, outs)
    t = outs[0]
    if t is not None and not (t.startswith("int") or t.startswith("uint") or t == "bool"):
        from ..errors import TypeInferenceError
        raise TypeInferenceError(f"bitwise ops take integer inputs; got {t}")
    return ins, outs


def _nograd(n, og):
    return [None] * len(n.inputs)


for _name, _fn, _rule in (("logical_and", np.logical_and, _bool_rule),
                          ("logical_or", np.logical_or, _bool_rule),
                          ("logical_xor", np.logical_xor, _bool_rule),
                          ("bitwise_and", np.bitwise_and, _int_rule),
                          ("bitwise_or", np.bitwise_or, _int_rule),
                          ("bitwise_xor", np.bitwise_xor, _int_rule),
                          ("broadcast_left_shift", np.left_shift, _int_rule),
                          ("broadcast_right_shift", np.right_shift, _int_rule)):
    defs.op_once(_name, doc=f"Elementwise `{_fn.__name__}` with numpy-style broadcasting.",
                  inputs=("lhs", "rhs"), shape=broadcast_shape, dtype=_rule,
                  reference=(lambda f: lambda attrs, a, b: np.asarray(f(a, b)).astype(
                      a.dtype, copy=False))(_fn),
                  gradient=_nograd, pattern=B, support_level=4)

defs.op_once("logical_not", doc="Elementwise boolean negation.", inputs=("data",),
              shape=same_shape, dtype=_bool_rule, reference=lambda attrs, x: np.logical_not(x),
              gradient=_nograd, pattern=E, support_level=4)
defs.op_once("bitwise_not", doc="Elementwise bit inversion of integers.", inputs=("data",),
              shape=same_shape, dtype=_int_rule, reference=lambda attrs, x: np.invert(x),
              gradient=_nograd, pattern=E, support_level=4)


def _mod_kernel(fmod):
    def ref(attrs, a, b):
        if fmod:
            return np.fmod(a, b).astype(a.dtype, copy=False)
        with np.errstate(divide="ignore", invalid="ignore"):  # x mod 0 -> nan/0 as numpy
            return np.mod(a, b).astype(a.dtype, copy=False)
    return ref


def _mod_grad(fmod):
    def grad(n, og):
        a, b = n.inputs
        q = op("trunc" if fmod else "floor", op("broadcast_div", a, b))
        return [sum_to_like(og[0], a),
                sum_to_like(op("negative", op("broadcast_mul", og[0], q)), b)]
    return grad


defs.op_once("broadcast_mod", doc="Remainder with the sign of the divisor (numpy.mod, ONNX Mod "
              "fmod=0), broadcasting.", inputs=("lhs", "rhs"), shape=broadcast_shape,
              dtype=same_dtype, reference=_mod_kernel(False), gradient=_mod_grad(False),
              pattern=B, support_level=4)
defs.op_once("broadcast_fmod", doc="Remainder with the sign of the dividend (C fmod, ONNX Mod "
              "fmod=1), broadcasting.", inputs=("lhs", "rhs"), shape=broadcast_shape,
              dtype=same_dtype, reference=_mod_kernel(True), gradient=_mod_grad(True),
              pattern=B, support_level=4)


# -- prelu --------------------------------------------------------------------------------------

def _prelu_slope(attrs, x, alpha):
    axis = attrs["axis"]
    if axis is None:
        return alpha
    shape = [1] * x.ndim
    shape[axis % x.ndim] = -1
    return alpha.reshape(shape)


def _prelu_shape(attrs, ins, outs):
    x, a = ins
    if x is None:
        return ins, outs
    if attrs["axis"] is None:
        if a is not None:
            from .common import broadcast_shapes
            if broadcast_shapes(x, a) != tuple(x):
                from ..errors import ShapeError
                raise ShapeError(f"slope shape {a} must broadcast to data shape {x}")
        return ins, [x]
    return [x, (x[attrs["axis"] % len(x)],)], [x]


def _prelu_ref(attrs, x, alpha):
    return to_dtype(np.where(x < 0, _prelu_slope(attrs, x, alpha) * x, x), x)


def _prelu_backward_ref(attrs, og, x, alpha):
    slope = _prelu_slope(attrs, x, alpha)
    gx = og * np.where(x < 0, slope, 1)
    ga = og * np.where(x < 0, x, 0)
    if attrs["axis"] is not None:
        axis = attrs["axis"] % x.ndim
        ga = ga.sum(axis=tuple(i for i in range(x.ndim) if i != axis))
    else:
        extra = x.ndim - alpha.ndim
        axes = tuple(range(extra)) + tuple(i + extra for i, d in enumerate(alpha.shape)
                                           if d == 1 and x.shape[i + extra] != 1)
        ga = ga.sum(axis=axes, keepdims=True).reshape(alpha.shape) if axes else ga
    return to_dtype(gx, x), to_dtype(ga, alpha)


_PRELU_AXIS = Param("axis", "int_or_none", None,
                    "None: ONNX (slope broadcasts to data); k: NNVM (1-D slope along axis k)")
defs.op_once("prelu", doc="Parametric ReLU: x if x >= 0 else slope * x.",
              inputs=("data", "alpha"), params=[_PRELU_AXIS], shape=_prelu_shape,
              dtype=same_dtype, reference=_prelu_ref,
              gradient=lambda n, og: _prelu_grad(n, og), pattern=B, support_level=1)


def _prelu_grad(n, og):
    from ..ir import NodeEntry, make_node
    node = make_node("_prelu_backward", [og[0], *n.inputs], {"axis": n.attrs["axis"]})
    return [NodeEntry(node, 0, 0), NodeEntry(node, 1, 0)]


defs.op_once("_prelu_backward", doc="Gradients of prelu for data and slope.",
              inputs=("out_grad", "data", "alpha"), outputs=("data_grad", "alpha_grad"),
              params=[_PRELU_AXIS],
              shape=lambda attrs, ins, outs: (ins, [ins[1], ins[2]]),
              dtype=lambda attrs, ins, outs: (ins, [ins[1], ins[2]]),
              reference=_prelu_backward_ref, pattern=OpPattern.OPAQUE)


# -- linear algebra -----------------------------------------------------------------------------

def _det_shape(attrs, ins, outs):
    s = ins[0]
    if s is None:
        return ins, outs
    if len(s) < 2 or s[-1] != s[-2]:
        from ..errors import ShapeError
        raise ShapeError(f"det needs square matrices in the last two axes; got shape {s}")
    return ins, [tuple(s[:-2])]


defs.op_once("det", doc="Determinant of the square matrices in the last two axes.",
              inputs=("data",), shape=_det_shape, dtype=same_dtype,
              reference=lambda attrs, x: np.asarray(np.linalg.det(x)).astype(x.dtype),
              pattern=OpPattern.OPAQUE, support_level=4)

