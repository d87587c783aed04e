"""The TensorFlow-like front end: placeholders, variables, assignment, grouping, gradients.

Everything here builds NNVM symbols; nothing computes. As in TinyFlow, a *placeholder* and a
*variable* are both NNVM variables (graph inputs): a placeholder is marked so the Session
takes its value from ``feed_dict``, a variable's value is Session state that ``assign`` ops
update. Initialisation is itself a graph: ``Variable(init)`` queues ``assign(var, init)`` and
``initialize_all_variables()`` groups the queue.
"""

from __future__ import annotations

import itertools
from typing import Any, Iterable, Sequence

import numpy as np

from nnvm import symbol as _sym
from nnvm.errors import NNVMError, format_error
from nnvm.ir import Graph, NodeEntry
from nnvm.name import NameManager
from nnvm.pass_manager import get_pass
from nnvm.symbol import Symbol

float32, float64, int32, int64 = "float32", "float64", "int32", "int64"

#: Variable attribute that marks a placeholder (a value fed per run, never Session state).
PLACEHOLDER_ATTR = "__tf_placeholder__"

_init_ops: list[Symbol] = []
_seeds = itertools.count()
_seed_base = [0]


class TinyFlowError(NNVMError):
    """Misuse of the TinyFlow API (unfed placeholder, uninitialised variable, bad fetch)."""


class Operation(Symbol):
    """A symbol run for its effect (``group``, ``initialize_all_variables``, ``minimize``):
    ``Session.run`` returns None for it, as TensorFlow does for an op."""

    __slots__ = ()


def set_random_seed(seed: int) -> None:
    """Make the seeds that ``normal`` gives its nodes start from ``seed`` (reproducible runs)."""
    global _seeds
    _seed_base[0] = int(seed)
    _seeds = itertools.count()


def _next_seed() -> int:
    return (_seed_base[0] * 1_000_003 + next(_seeds)) % (2 ** 31)


def placeholder(dtype: str = float32, shape: Sequence[int | None] | None = None,
                name: str | None = None) -> Symbol:
    """A graph input whose value comes from ``feed_dict`` on every ``Session.run``.

    A fully known ``shape`` seeds shape inference; dimensions given as None (the batch, in
    TensorFlow style) leave it to the fed arrays.
    """
    name = NameManager.current().get(name, "placeholder")
    dtype = np.dtype(dtype).name
    known = shape is not None and all(d is not None for d in shape)
    return _sym.Variable(name, shape=tuple(shape) if known else None, dtype=dtype,
                         **{PLACEHOLDER_ATTR: "1"})


def is_placeholder(node) -> bool:
    return node.op is None and node.attrs.get(PLACEHOLDER_ATTR) == "1"


def Variable(init: Symbol | None = None, name: str | None = None,
             dtype: str | None = None) -> Symbol:
    """A trainable variable: Session state updated by ``assign`` (TinyFlow's ``Variable``).

    Args:
        init: a Symbol computing the initial value (``tf.zeros([784, 10])``,
            ``tf.normal([5, 5], 0.1)``); ``initialize_all_variables()`` assigns it. None
            leaves initialisation to the caller (see ``infer_variable_shapes``).
        name: the state key in every Session; default ``variable<N>``.
        dtype: optional dtype hint for inference.
    """
    name = NameManager.current().get(name, "variable")
    var = _sym.Variable(name, dtype=dtype)
    if init is not None:
        if not isinstance(init, Symbol):
            raise TinyFlowError(format_error(
                f"Variable '{name}'", "init must be a Symbol", "Symbol", type(init).__name__,
                fix="Build it with tf.zeros/tf.ones/tf.normal, or set the value with "
                    "Session.set_variable"))
        _init_ops.append(assign(var, init))
    return var


def assign(ref: Symbol, value: Symbol, name: str | None = None) -> Symbol:
    """Write ``value`` into variable ``ref``; the symbol's value is the new content.

    NNVM's ``_assign`` op mutates its first input (FMutateInputs); ``Session.run`` stores the
    result back into the session state after the run.
    """
    _single(ref, "assign: ref")
    if ref.outputs[0].node.op is not None or is_placeholder(ref.outputs[0].node):
        raise TinyFlowError(format_error("assign", f"'{ref.outputs[0].node.name}' is not a "
                                         "Variable", fix="Only tf.Variable values can be "
                                         "assigned"))
    return _sym._assign(ref, _single(value, "assign: value"), name=name)


def initialize_all_variables() -> Operation:
    """The assignments queued by ``Variable(init)`` so far, grouped."""
    return group(*_init_ops)


global_variables_initializer = initialize_all_variables


def reset_default_graph() -> None:
    """Forget the queued variable initialisers (TensorFlow's ``reset_default_graph``), so a
    second model built in the same process does not initialise the first one's variables."""
    _init_ops.clear()


def group(*ops: Symbol | Sequence[Symbol]) -> Operation:
    """One operation running all ``ops`` (symbols or lists of them); its value is None."""
    outs: list[NodeEntry] = []
    for o in _flatten(ops):
        if not isinstance(o, Symbol):
            raise TinyFlowError(format_error("group", "expected Symbols", "Symbol",
                                             type(o).__name__))
        outs.extend(o.outputs)
    return Operation(outs)


def _flatten(items: Iterable[Any]) -> list[Any]:
    out = []
    for it in items:
        if isinstance(it, (list, tuple)):
            out.extend(_flatten(it))
        else:
            out.append(it)
    return out


def _single(s: Any, what: str) -> Symbol:
    if not isinstance(s, Symbol) or len(s.outputs) != 1:
        raise TinyFlowError(format_error(what, "needs a single-output Symbol",
                                         got=type(s).__name__ if not isinstance(s, Symbol)
                                         else f"{len(s.outputs)} outputs"))
    return s


def trainable_variables(loss: Symbol) -> list[Symbol]:
    """The variables ``loss`` reads that are not placeholders, in graph order."""
    return [v for v in loss.list_input_variables() if not is_placeholder(v.outputs[0].node)]


def gradients(ys: Symbol | Sequence[Symbol], xs: Symbol | Sequence[Symbol],
              grad_ys: Symbol | Sequence[Symbol] | None = None,
              mirror: str | None = None) -> list[Symbol]:
    """Symbolic d(sum ys)/d(xs), one Symbol per x, by NNVM's ``Gradient`` pass.

    Args:
        ys, xs: symbols or lists of symbols.
        grad_ys: head gradients (default ones_like(y)).
        mirror: the Gradient pass's memory policy: None keeps every forward value,
            ``"sublinear"`` recomputes forward segments in the backward pass for
            O(sqrt(n)) activation memory (Chen et al. 2016), ``"all"`` mirrors cheap ops.
    """
    try:
        get_pass("Gradient")
    except NNVMError:
        raise TinyFlowError("gradients: NNVM's Gradient pass is not installed; "
                            "pip install nnvm-passes") from None
    ys_l = [ys] if isinstance(ys, Symbol) else list(ys)
    xs_l = [xs] if isinstance(xs, Symbol) else list(xs)
    attrs: dict[str, Any] = {"grad_ys": [e for y in ys_l for e in y.outputs],
                             "grad_xs": [e for x in xs_l for e in x.outputs]}
    if grad_ys is not None:
        gy = [grad_ys] if isinstance(grad_ys, Symbol) else list(grad_ys)
        attrs["grad_ys_out_grad"] = [e for s in gy for e in s.outputs]
    if mirror is not None:
        attrs["grad_mirror"] = mirror
    g = Graph(attrs["grad_ys"], attrs).apply("Gradient")
    return [Symbol([e]) for e in g.outputs]


# -- tensor creation and math --------------------------------------------------------------------

def _shape(shape: Sequence[int] | int) -> tuple[int, ...]:
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)


def zeros(shape: Sequence[int], dtype: str = float32, name: str | None = None) -> Symbol:
    return _sym.zeros(shape=_shape(shape), dtype=dtype, name=name)


def ones(shape: Sequence[int], dtype: str = float32, name: str | None = None) -> Symbol:
    return _sym.ones(shape=_shape(shape), dtype=dtype, name=name)


def normal(shape: Sequence[int], stdev: float = 1.0, mean: float = 0.0, dtype: str = float32,
           seed: int | None = None, name: str | None = None) -> Symbol:
    """Gaussian noise of ``shape`` (TinyFlow's ``normal(shape, stdev)``); the seed is fixed
    per node (from ``set_random_seed`` unless given), so re-running gives the same values."""
    from .ops import NORMAL

    return getattr(_sym, NORMAL)(shape=_shape(shape), stdev=float(stdev), mean=float(mean),
                                 dtype=dtype, seed=_next_seed() if seed is None else int(seed),
                                 name=name)


random_normal = normal


def _axes(axis, reduction_indices) -> tuple[int, ...]:
    axis = reduction_indices if axis is None else axis
    if axis is None:
        return ()
    return (int(axis),) if isinstance(axis, (int, np.integer)) else tuple(int(a) for a in axis)


def reduce_sum(x: Symbol, axis=None, keepdims: bool = False, reduction_indices=None,
               keep_dims: bool | None = None, name: str | None = None) -> Symbol:
    """Sum over ``axis`` (TensorFlow's ``reduction_indices`` accepted); all axes when None."""
    keep = keepdims if keep_dims is None else keep_dims
    return _sym.sum(x, axis=_axes(axis, reduction_indices), keepdims=keep, name=name)


def reduce_mean(x: Symbol, axis=None, keepdims: bool = False, reduction_indices=None,
                keep_dims: bool | None = None, name: str | None = None) -> Symbol:
    """Mean over ``axis`` (TensorFlow's ``reduction_indices`` accepted); all axes when None."""
    keep = keepdims if keep_dims is None else keep_dims
    return _sym.mean(x, axis=_axes(axis, reduction_indices), keepdims=keep, name=name)


def argmax(x: Symbol, axis: int = 0, name: str | None = None) -> Symbol:
    return _sym.argmax(x, axis=(int(axis),), name=name)


def matmul(a: Symbol, b: Symbol, transpose_a: bool = False, transpose_b: bool = False,
           name: str | None = None) -> Symbol:
    return _sym.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b, name=name)


def equal(a: Symbol, b: Symbol, name: str | None = None) -> Symbol:
    return _sym.broadcast_equal(a, b, name=name)


def cast(x: Symbol, dtype: str, name: str | None = None) -> Symbol:
    return _sym.cast(x, dtype=np.dtype(dtype).name, name=name)


def reshape(x: Symbol, shape: Sequence[int], name: str | None = None) -> Symbol:
    return _sym.reshape(x, shape=_shape(shape), name=name)


def square(x: Symbol, name: str | None = None) -> Symbol:
    return _sym.elemwise_mul(x, x, name=name)


def _unary(op_name: str):
    def fn(x: Symbol, name: str | None = None) -> Symbol:
        return getattr(_sym, op_name)(x, name=name)

    fn.__name__ = op_name
    fn.__doc__ = f"NNVM's ``{op_name}``, elementwise."
    return fn


log, exp, sqrt, tanh, sigmoid, negative, abs = (
    _unary(n) for n in ("log", "exp", "sqrt", "tanh", "sigmoid", "negative", "abs"))
zeros_like, ones_like = _unary("zeros_like"), _unary("ones_like")
