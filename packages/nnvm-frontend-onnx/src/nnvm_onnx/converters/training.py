"""ai.onnx.preview.training optimizers (Adagrad, Adam, Momentum) as elementwise NNVM ops.

Each update is a handful of broadcast arithmetic ops per optimised tensor, so no dedicated
kernels are needed and the fusion pass turns each update into one kernel. The iteration
count T selects the bias correction (Adam) or the first-step momentum coefficient, so it
must be known at import time (the backend adapter freezes it).
"""

from __future__ import annotations

import numpy as np

from ..errors import OnnxImportError, format_error
from ..registry import converter

TRAINING = "ai.onnx.preview.training"


def _num(ctx, like, value):
    """A scalar constant in the dtype of ``like``."""
    from ..tensors import np_dtype

    return ctx.constant(np.array(value, dtype=np_dtype(ctx.dtype(like))))


def _groups(ctx, per_tensor: int):
    """Split inputs (R, T, X..., G..., state...) into per-tensor groups."""
    n, rem = divmod(ctx.num_inputs - 2, per_tensor)
    if rem or n == 0:
        raise OnnxImportError(format_error(ctx.where, f"expects 2 + {per_tensor}*n inputs",
                                           got=ctx.num_inputs))
    return n, [[ctx.input(2 + k * n + i) for k in range(per_tensor)] for i in range(n)]


def _regularized(ctx, x, g, coefficient):
    if coefficient == 0:
        return g
    return ctx.op("broadcast_add", ctx.op("broadcast_mul", _num(ctx, x, coefficient), x), g)


def _step(ctx) -> float:
    return float(np.asarray(ctx.const(1)).reshape(-1)[0])


@converter("Adagrad", domain=TRAINING)
def _adagrad(ctx, node):
    decay, eps = ctx.attr("decay_factor", 0.0), ctx.attr("epsilon", 0.0)
    norm = ctx.attr("norm_coefficient", 0.0)
    t = _step(ctx)
    n, groups = _groups(ctx, 3)
    xs, hs = [], []
    for x, g, h in groups:
        r = ctx.op("broadcast_mul", ctx.input(0), _num(ctx, ctx.input(0), 1.0 / (1 + t * decay)))
        gr = _regularized(ctx, x, g, norm)
        h_new = ctx.op("broadcast_add", h, ctx.op("broadcast_mul", gr, gr))
        denom = ctx.op("broadcast_add", ctx.op("sqrt", h_new), _num(ctx, h_new, eps))
        step = ctx.op("broadcast_div", ctx.op("broadcast_mul", r, gr), denom)
        xs.append(ctx.op("broadcast_sub", x, step))
        hs.append(h_new)
    return xs + hs


@converter("Adam", domain=TRAINING)
def _adam(ctx, node):
    alpha, beta = ctx.attr("alpha", 0.9), ctx.attr("beta", 0.999)
    eps, norm = ctx.attr("epsilon", 0.0), ctx.attr("norm_coefficient", 0.0)
    post = ctx.attr("norm_coefficient_post", 0.0)
    t = _step(ctx)
    scale = np.sqrt(1 - beta ** t) / (1 - alpha ** t) if t > 0 else 1.0
    n, groups = _groups(ctx, 4)
    xs, vs, hs = [], [], []
    for x, g, v, h in groups:
        gr = _regularized(ctx, x, g, norm)
        v_new = ctx.op("broadcast_add", ctx.op("broadcast_mul", _num(ctx, v, alpha), v),
                       ctx.op("broadcast_mul", _num(ctx, gr, 1 - alpha), gr))
        h_new = ctx.op("broadcast_add", ctx.op("broadcast_mul", _num(ctx, h, beta), h),
                       ctx.op("broadcast_mul", _num(ctx, gr, 1 - beta),
                              ctx.op("broadcast_mul", gr, gr)))
        denom = ctx.op("broadcast_add", ctx.op("sqrt", h_new), _num(ctx, h_new, eps))
        r = ctx.op("broadcast_mul", ctx.input(0), _num(ctx, ctx.input(0), scale))
        x_new = ctx.op("broadcast_sub", x, ctx.op("broadcast_mul", r,
                                                   ctx.op("broadcast_div", v_new, denom)))
        if post:
            x_new = ctx.op("broadcast_mul", _num(ctx, x_new, 1 - post), x_new)
        xs.append(x_new)
        vs.append(v_new)
        hs.append(h_new)
    return xs + vs + hs


@converter("Momentum", domain=TRAINING)
def _momentum(ctx, node):
    alpha, beta = ctx.attr("alpha"), ctx.attr("beta")
    norm, mode = ctx.attr("norm_coefficient"), ctx.attr("mode")
    if mode not in ("standard", "nesterov"):
        raise OnnxImportError(format_error(ctx.where, f"unknown mode '{mode}'",
                                           fix="Use 'standard' or 'nesterov'"))
    t = _step(ctx)
    n, groups = _groups(ctx, 3)
    xs, vs = [], []
    r = ctx.input(0)
    for x, g, v in groups:
        gr = _regularized(ctx, x, g, norm)
        v_new = ctx.op("broadcast_add", ctx.op("broadcast_mul", _num(ctx, v, alpha), v),
                       ctx.op("broadcast_mul", _num(ctx, gr, beta if t > 0 else 1.0), gr))
        direction = v_new if mode == "standard" else ctx.op(
            "broadcast_add", gr, ctx.op("broadcast_mul", _num(ctx, v_new, alpha), v_new))
        xs.append(ctx.op("broadcast_sub", x, ctx.op("broadcast_mul", r, direction)))
        vs.append(v_new)
    return xs + vs


@converter("Gradient", domain=TRAINING)
def _gradient(ctx, node):
    """d y / d xs by NNVM's own autodiff (the Gradient pass), seeded with ones like ONNX.

    The ``xs`` and ``zs`` tensors are the node's inputs; ``y`` is named by attribute and must
    already be computed upstream in the same graph."""
    from nnvm.compiler.graph_util import gradients
    from nnvm.symbol import Symbol

    from ..importer import Value

    names = [x.decode() if isinstance(x, bytes) else x for x in ctx.attr("xs")]
    y_name = ctx.attr("y")
    y_name = y_name.decode() if isinstance(y_name, bytes) else y_name
    y = ctx.scope.lookup(y_name)
    if y is None or y.entry is None:
        raise OnnxImportError(format_error(ctx.where, f"y '{y_name}' is not a computed tensor "
                                           "of this graph", "a tensor computed before the "
                                           "Gradient node", repr(y)))
    xs = [ctx.input(i) for i in range(len(names))]
    entries = [ctx.builder.materialize(x) for x in xs]
    grads = gradients(Symbol([y.entry]), [Symbol([e]) for e in entries])
    return [Value(f"{ctx.base_name}:{k}", entry=g.outputs[0], shape=ctx.shape(x),
                  dtype=ctx.dtype(x)) for k, (g, x) in enumerate(zip(grads, xs))]
