"""TinyFlow's own operators, returned to NNVM by this package's plugin (``plugin.py``).

Only what no core op covers lives here, each op one record with its rules side by side:

- ``tf_random_normal``: a tensor of Gaussian noise (core has no random op). The seed is an
  attribute fixed when the symbol is built, so a graph is a pure function: rebuilding or
  re-running it gives the same initial weights, and folding it into a constant is sound.
- ``tf_sparse_softmax_cross_entropy``: per-example ``-log softmax(logits)[label]`` with
  integer class labels. Composing it from core ops would need ``one_hot(depth=C)`` with the
  class count ``C`` known when the symbol is built; this op learns ``C`` from shape inference,
  and its fused backward op (``softmax - one_hot``) is both cheaper and stabler.

The module builds records (``records()``) and registers nothing: NNVM registers them when it
calls the plugin's ``nnvm_ops`` hook, credited to ``tinyflow``.
"""

from __future__ import annotations

import numpy as np

from nnvm.errors import ExecutionError, ShapeError, TypeInferenceError
from nnvm.op import OpPattern, define_op
from nnvm.ops.common import op
from nnvm.params import Param

NORMAL = "tf_random_normal"
SPARSE_XENT = "tf_sparse_softmax_cross_entropy"
SPARSE_XENT_BACKWARD = "_tf_sparse_softmax_cross_entropy_backward"


# -- tf_random_normal ----------------------------------------------------------------------------

def _normal_shape(attrs, ins, outs):
    return ins, [tuple(attrs["shape"])]


def _normal_dtype(attrs, ins, outs):
    return ins, [attrs["dtype"]]


def _normal_ref(attrs):
    rng = np.random.default_rng(attrs["seed"])
    values = rng.normal(attrs["mean"], attrs["stdev"], size=tuple(attrs["shape"]))
    return values.astype(attrs["dtype"])


# -- tf_sparse_softmax_cross_entropy ------------------------------------------------------------

def _xent_shape(attrs, ins, outs):
    """logits (..., C), labels (...) -> loss (...); labels and loss are filled from logits."""
    logits, labels = ins
    ins, outs = list(ins), list(outs)
    if logits is not None:
        if len(logits) < 1:
            raise ShapeError(f"logits must have a class axis; got a scalar (shape {logits})")
        batch = tuple(logits[:-1])
        for what, vals, k in (("labels", ins, 1), ("loss", outs, 0)):
            if vals[k] is not None and tuple(vals[k]) != batch:
                raise ShapeError(f"{what} has shape {vals[k]}; expected {batch} (logits "
                                 f"{logits} without the class axis)")
            vals[k] = batch
    elif labels is not None or outs[0] is not None:
        batch = tuple(labels if labels is not None else outs[0])
        ins[1], outs[0] = batch, batch
    return ins, outs


def _check_float(t: str | None, what: str) -> None:
    if t is not None and not t.startswith("float"):
        raise TypeInferenceError(f"{what} must be floating point; got {t}. Insert a cast")


def _xent_dtype(attrs, ins, outs):
    """The loss has the logits' dtype; labels keep their own (any integer or float type)."""
    logits = ins[0] if ins[0] is not None else outs[0]
    _check_float(logits, "logits")
    if logits is None:
        return ins, outs
    return [logits, ins[1]], [logits]


def _log_softmax_pick(logits, labels):
    classes = logits.shape[-1]
    idx = np.asarray(labels).astype(np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= classes):
        bad = idx[(idx < 0) | (idx >= classes)].ravel()[0]
        raise ExecutionError(f"op {SPARSE_XENT}: label {bad} is out of range; expected class "
                             f"indices in [0, {classes}). Check the labels fed to the graph")
    z = logits - logits.max(axis=-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return logp, idx


def _xent_ref(attrs, logits, labels):
    logp, idx = _log_softmax_pick(logits, labels)
    picked = np.take_along_axis(logp, idx[..., None], axis=-1)[..., 0]
    return (-picked).astype(logits.dtype)


def _xent_grad(n, og):
    logits, labels = n.inputs
    return [op(SPARSE_XENT_BACKWARD, og[0], logits, labels), None]


# -- its backward op -----------------------------------------------------------------------------

def _xent_backward_shape(attrs, ins, outs):
    og, logits, labels = ins
    fwd_ins, fwd_outs = _xent_shape(attrs, [logits if logits is not None else outs[0], labels],
                                    [og])
    outs = [fwd_ins[0]] if fwd_ins[0] is not None else list(outs)
    return [fwd_outs[0], fwd_ins[0], fwd_ins[1]], outs


def _xent_backward_dtype(attrs, ins, outs):
    og, logits, labels = ins
    t = next((v for v in (og, logits, outs[0]) if v is not None), None)
    _check_float(t, "logits")
    if t is None:
        return ins, outs
    return [t, t, labels], [t]


def _xent_backward_ref(attrs, og, logits, labels):
    logp, idx = _log_softmax_pick(logits, labels)
    d = np.exp(logp)
    np.put_along_axis(d, idx[..., None], np.take_along_axis(d, idx[..., None], -1) - 1.0, -1)
    return (d * og[..., None]).astype(logits.dtype)


def _xent_backward_grad(n, og):
    """Second order: the op is ``og * (p - y)`` with ``p = softmax(logits)``.

    d/d og = sum_c G * (p - y);  d/d logits = og * p * (G - sum_c G * p).
    """
    out_grad, logits, labels = n.inputs
    g = og[0]
    unit = op(SPARSE_XENT_BACKWARD, op("ones_like", out_grad), logits, labels)
    d_og = op("sum", op("elemwise_mul", g, unit), axis=(-1,))
    p = op("softmax", logits, axis=-1)
    gp = op("sum", op("elemwise_mul", g, p), axis=(-1,), keepdims=True)
    d_logits = op("broadcast_mul", op("expand_dims", out_grad, axis=-1),
                  op("elemwise_mul", p, op("broadcast_sub", g, gp)))
    return [d_og, d_logits, None]


def records() -> list:
    """TinyFlow's ops as ``OpDef`` records, returned by the plugin's ``nnvm_ops`` hook."""
    return [define_op(
        NORMAL, doc="Gaussian noise of `shape` (TinyFlow's `normal`): mean + stdev * N(0, 1), "
        "drawn from a generator seeded by `seed`, so the graph stays a pure function.",
        inputs=(), params=[Param("shape", "ints", doc="output shape"),
                           Param("mean", "float", 0.0, "mean of the distribution"),
                           Param("stdev", "float", 1.0, "standard deviation"),
                           Param("seed", "int", 0, "generator seed (fixed per node)"),
                           Param("dtype", "dtype", "float32", "output dtype")],
        shape=_normal_shape, dtype=_normal_dtype, reference=_normal_ref,
        gradient=lambda n, og: [], pattern=OpPattern.OPAQUE, support_level=4),
            define_op(
        SPARSE_XENT, doc="Softmax cross-entropy with integer class labels, per example: "
        "loss[...] = -log(softmax(logits)[..., label]); logits (..., C), labels (...).",
        inputs=("logits", "labels"), shape=_xent_shape, dtype=_xent_dtype,
        reference=_xent_ref, gradient=_xent_grad, pattern=OpPattern.OPAQUE, support_level=4),
            define_op(
        SPARSE_XENT_BACKWARD, doc="Gradient of tf_sparse_softmax_cross_entropy with respect "
        "to the logits: out_grad[..., None] * (softmax(logits) - one_hot(labels)).",
        inputs=("out_grad", "logits", "labels"), shape=_xent_backward_shape,
        dtype=_xent_backward_dtype, reference=_xent_backward_ref,
        gradient=_xent_backward_grad, pattern=OpPattern.OPAQUE, TIsBackward=True,
        support_level=10)]
