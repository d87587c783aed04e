"""Elementwise and broadcast arithmetic: unary math, binary ops, scalar ops, comparisons.

Each op is one ``defs.op`` record holding its shape rule, dtype rule, NumPy reference
kernel, gradient and fusion pattern. Gradients are graphs of registered ops, so every backend
that runs the forward ops runs the backward ones too.
"""

from __future__ import annotations

import numpy as np

from ..op import OpPattern, OpSet
from ..params import Param
from .common import (broadcast_shape, fixed_dtype, inplace_first, op, outputs, same_dtype,
                     same_shape, sum_to_like, to_dtype)

defs = OpSet("elemwise")

E, B = OpPattern.ELEMWISE, OpPattern.BROADCAST


def _unary(name, doc, kernel, grad, level=1, pattern=E, **kw):
    defs.op(name, doc=doc, inputs=("data",), shape=same_shape, dtype=same_dtype,
                reference=lambda attrs, x: to_dtype(kernel(x), x), gradient=grad,
                pattern=pattern, inplace=inplace_first, support_level=level, **kw)


def _relu_backward_ref(attrs, og, y):
    return np.where(y > 0, og, np.zeros_like(og))


defs.op("_relu_backward", doc="Gradient of relu: out_grad where the output is positive.",
            inputs=("out_grad", "output"), shape=same_shape, dtype=same_dtype,
            reference=_relu_backward_ref, pattern=E, inplace=inplace_first)

_unary("relu", "Rectified linear unit, max(x, 0).", lambda x: np.maximum(x, 0),
       lambda n, og: [op("_relu_backward", og[0], outputs(n)[0])])
_unary("tanh", "Hyperbolic tangent.", np.tanh,
       lambda n, og: [op("elemwise_mul", og[0], op("__rsub_scalar__", op(
           "elemwise_mul", outputs(n)[0], outputs(n)[0]), scalar=1.0))])
_unary("sigmoid", "Logistic sigmoid, 1 / (1 + exp(-x)).",
       lambda x: 1.0 / (1.0 + np.exp(-x)),
       lambda n, og: [op("elemwise_mul", og[0], op("elemwise_mul", outputs(n)[0], op(
           "__rsub_scalar__", outputs(n)[0], scalar=1.0)))])
_unary("exp", "Exponential.", np.exp,
       lambda n, og: [op("elemwise_mul", og[0], outputs(n)[0])])
_unary("log", "Natural logarithm.", np.log,
       lambda n, og: [op("elemwise_div", og[0], n.inputs[0])])
_unary("sqrt", "Square root.", np.sqrt,
       lambda n, og: [op("elemwise_div", og[0], op("__mul_scalar__", outputs(n)[0],
                                                     scalar=2.0))])
_unary("negative", "Numerical negative, -x.", np.negative,
       lambda n, og: [op("negative", og[0])], level=3)
_unary("abs", "Absolute value.", np.abs,
       lambda n, og: [op("elemwise_mul", og[0], op("sign", n.inputs[0]))], level=3)
_unary("sign", "Sign of x: -1, 0 or 1.", np.sign, lambda n, og: [None], level=3)
_unary("copy", "Identity copy of the input.", lambda x: x.copy(),
       lambda n, og: [og[0]], level=3, FInplaceIdentity=lambda attrs: [True])
_unary("block_grad", "Identity in the forward pass; stops gradients flowing backward.",
       lambda x: x.copy(), lambda n, og: [None], aliases=("stop_gradient",),
       FInplaceIdentity=lambda attrs: [True])


def _like(name, doc, fill):
    defs.op(name, doc=doc, inputs=("data",), shape=same_shape, dtype=same_dtype,
                reference=lambda attrs, x: np.full_like(x, fill), gradient=lambda n, og: [None],
                pattern=E, FIgnoreInputs=lambda attrs: [0], support_level=4)


_like("zeros_like", "Zeros with the shape and dtype of the input.", 0)
_like("ones_like", "Ones with the shape and dtype of the input.", 1)


# -- binary ops -----------------------------------------------------------------------------

def _binary(name, doc, kernel, grad, shape=same_shape, pattern=E, level=1, dtype=same_dtype,
            **kw):
    defs.op(name, doc=doc, inputs=("lhs", "rhs"), shape=shape, dtype=dtype,
                reference=lambda attrs, a, b: to_dtype(kernel(a, b), a) if dtype is same_dtype
                else kernel(a, b), gradient=grad, pattern=pattern, support_level=level, **kw)


def _arith_grads(prefix: str, reduce: bool):
    """Gradients of add/sub/mul/div built from ``<prefix>_*`` ops; summed back to each
    input's shape when the op broadcasts."""
    def fin(n, gs):
        if not reduce:
            return gs
        return [None if g is None else sum_to_like(g, i) for g, i in zip(gs, n.inputs)]

    def add(n, og):
        return fin(n, [og[0], og[0]])

    def sub(n, og):
        return fin(n, [og[0], op("negative", og[0])])

    def mul(n, og):
        a, b = n.inputs
        return fin(n, [op(prefix + "_mul", og[0], b), op(prefix + "_mul", og[0], a)])

    def div(n, og):
        a, b = n.inputs
        ga = op(prefix + "_div", og[0], b)
        return fin(n, [ga, op("negative", op(prefix + "_mul", ga, outputs(n)[0]))])

    return add, sub, mul, div


_E_GRADS = _arith_grads("elemwise", reduce=False)
_B_GRADS = _arith_grads("broadcast", reduce=True)
_both = dict(inplace=lambda attrs: [(0, 0), (1, 0)])
_binary("elemwise_add", "Elementwise sum of two same-shape tensors.", np.add, _E_GRADS[0],
        **_both)
_binary("elemwise_sub", "Elementwise difference of two same-shape tensors.", np.subtract,
        _E_GRADS[1], **_both)
_binary("elemwise_mul", "Elementwise product of two same-shape tensors.", np.multiply,
        _E_GRADS[2], **_both)
_binary("elemwise_div", "Elementwise quotient of two same-shape tensors.", np.divide,
        _E_GRADS[3], **_both)


def _pow_grad(n, og):
    a, b = n.inputs
    ga = op("broadcast_mul", og[0], op("broadcast_mul", b, op("broadcast_pow", a, op(
        "__sub_scalar__", b, scalar=1.0))))
    gb = op("broadcast_mul", og[0], op("broadcast_mul", outputs(n)[0], op("log", a)))
    return [sum_to_like(ga, a), sum_to_like(gb, b)]


def _select_grad(cmp):
    def grad(n, og):
        a, b = n.inputs
        mask = op(cmp, a, b)
        zero = op("zeros_like", og[0])
        return [sum_to_like(op("where", mask, og[0], zero), a),
                sum_to_like(op("where", mask, zero, og[0]), b)]
    return grad


_binary("broadcast_add", "Sum with numpy-style broadcasting.", np.add, _B_GRADS[0],
        broadcast_shape, B, aliases=("add", "__add_symbol__"))
_binary("broadcast_sub", "Difference with numpy-style broadcasting.", np.subtract,
        _B_GRADS[1], broadcast_shape, B, aliases=("subtract", "__sub_symbol__"))
_binary("broadcast_mul", "Product with numpy-style broadcasting.", np.multiply,
        _B_GRADS[2], broadcast_shape, B, aliases=("multiply", "__mul_symbol__"))
_binary("broadcast_div", "Quotient with numpy-style broadcasting.", np.divide,
        _B_GRADS[3], broadcast_shape, B, aliases=("divide", "__div_symbol__"))
_binary("broadcast_pow", "Power with numpy-style broadcasting.", np.power, _pow_grad,
        broadcast_shape, B, aliases=("power", "__pow_symbol__"))
_binary("broadcast_maximum", "Elementwise maximum with broadcasting.", np.maximum,
        _select_grad("broadcast_greater_equal"), broadcast_shape, B, aliases=("maximum",))
_binary("broadcast_minimum", "Elementwise minimum with broadcasting.", np.minimum,
        _select_grad("broadcast_less_equal"), broadcast_shape, B, aliases=("minimum",))

for _name, _fn in (("equal", np.equal), ("not_equal", np.not_equal), ("greater", np.greater),
                   ("greater_equal", np.greater_equal), ("less", np.less),
                   ("less_equal", np.less_equal)):
    _binary(f"broadcast_{_name}", f"Comparison `{_name}` with broadcasting; returns bool.",
            _fn, lambda n, og: [None, None], broadcast_shape, B, level=4,
            dtype=lambda attrs, ins, outs: (_same_inputs(ins), ["bool"]))


def _same_inputs(ins):
    known = next((t for t in ins if t is not None), None)
    return [known] * len(ins) if known is not None else ins


def _where_shape(attrs, ins, outs):
    if all(s is not None for s in ins):
        from .common import broadcast_shapes

        return ins, [broadcast_shapes(*ins)]
    return ins, outs


def _where_dtype(attrs, ins, outs):
    vals = [t for t in (ins[1], ins[2], outs[0]) if t is not None]
    t = vals[0] if vals else None
    if t is not None and any(v != t for v in vals):
        from ..errors import TypeInferenceError

        raise TypeInferenceError(f"x and y must share one dtype; got {vals}")
    return ["bool", t, t], [t]


def _where_grad(n, og):
    c, x, y = n.inputs
    zero = op("zeros_like", og[0])
    return [None, sum_to_like(op("where", c, og[0], zero), x),
            sum_to_like(op("where", c, zero, og[0]), y)]


defs.op("where", doc="Select x where condition is true, else y (numpy broadcasting).",
            inputs=("condition", "x", "y"), shape=_where_shape, dtype=_where_dtype,
            reference=lambda attrs, c, x, y: np.where(c, x, y), gradient=_where_grad,
            pattern=B, support_level=4)


def _collapse_ref(attrs, g, like):
    extra = g.ndim - like.ndim
    axes = tuple(range(extra)) + tuple(
        i + extra for i, d in enumerate(like.shape) if d == 1 and g.shape[i + extra] != 1)
    out = g.sum(axis=axes, keepdims=True) if axes else g
    return out.reshape(like.shape).astype(g.dtype, copy=False)


defs.op("collapse_sum_like", doc="Sum a broadcast result back to the shape of `shape_like` "
            "(the gradient of broadcasting).", inputs=("data", "shape_like"),
            shape=lambda attrs, ins, outs: (ins, [ins[1]]),
            dtype=lambda attrs, ins, outs: (ins, [ins[0]]), reference=_collapse_ref,
            gradient=lambda n, og: [op("broadcast_add", og[0], op("zeros_like", n.inputs[0])),
                                    None],
            pattern=OpPattern.COMM_REDUCE, FIgnoreInputs=lambda attrs: [1], support_level=4)


def _sum_ref(attrs, *xs):
    out = xs[0].copy()
    for x in xs[1:]:
        out += x
    return out


defs.op("elemwise_sum", doc="Sum of any number of same-shape tensors (gradient aggregation).",
            inputs=lambda attrs: [f"arg{i}" for i in range(attrs["num_args"])],
            params=[Param("num_args", "int", doc="number of inputs")], shape=same_shape,
            dtype=same_dtype, reference=_sum_ref,
            gradient=lambda n, og: [og[0]] * len(n.inputs), pattern=E,
            inplace=lambda attrs: [(0, 0)], support_level=1)


# -- scalar ops ------------------------------------------------------------------------------

def _scalar(name, doc, kernel, grad):
    defs.op(name, doc=doc, inputs=("data",), params=[Param("scalar", "float", doc="scalar")],
                shape=same_shape, dtype=same_dtype,
                reference=lambda attrs, x: to_dtype(kernel(x, attrs["scalar"]), x),
                gradient=grad, pattern=E, inplace=inplace_first, support_level=3)


def _s(n):
    return n.attrs["scalar"]


_scalar("__add_scalar__", "x + scalar.", lambda x, s: x + s, lambda n, og: [og[0]])
_scalar("__sub_scalar__", "x - scalar.", lambda x, s: x - s, lambda n, og: [og[0]])
_scalar("__rsub_scalar__", "scalar - x.", lambda x, s: s - x,
        lambda n, og: [op("negative", og[0])])
_scalar("__mul_scalar__", "x * scalar.", lambda x, s: x * s,
        lambda n, og: [op("__mul_scalar__", og[0], scalar=_s(n))])
_scalar("__div_scalar__", "x / scalar.", lambda x, s: x / s,
        lambda n, og: [op("__div_scalar__", og[0], scalar=_s(n))])
_scalar("__rdiv_scalar__", "scalar / x.", lambda x, s: s / x,
        lambda n, og: [op("negative", op("elemwise_div", op("elemwise_mul", og[0], outputs(
            n)[0]), n.inputs[0]))])
_scalar("__pow_scalar__", "x ** scalar.", lambda x, s: np.power(x, s),
        lambda n, og: [op("elemwise_mul", og[0], op("__mul_scalar__", op(
            "__pow_scalar__", n.inputs[0], scalar=_s(n) - 1.0), scalar=_s(n)))])
_scalar("__rpow_scalar__", "scalar ** x.", lambda x, s: np.power(s, x),
        lambda n, og: [op("elemwise_mul", og[0], op("__mul_scalar__", outputs(n)[0],
                                                     scalar=float(np.log(_s(n)))))])
