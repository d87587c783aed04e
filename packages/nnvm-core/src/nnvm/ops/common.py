"""Rules shared by many ops: shape/dtype helpers and the gradient-graph builder.

Ops are records with their shape rule, dtype rule, NumPy reference kernel and gradient side by
side (see ``elemwise.py`` for the pattern). Rules receive the known input and output values
(``None`` = unknown) and return both lists refined; raising ``ShapeError`` with *what* and
*expected vs got* is enough, the engine prefixes the node name and op.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..errors import ShapeError, TypeInferenceError
from ..ir import NodeEntry, make_node

Shape = tuple[int, ...]


def same_shape(attrs, ins, outs):
    """Elementwise ops: every input and output has one shape (inferred in both directions)."""
    known = next((s for s in (*ins, *outs) if s is not None), None)
    if known is None:
        return ins, outs
    for s in (*ins, *outs):
        if s is not None and s != known:
            raise ShapeError(f"operands must have the same shape; got {known} and {s}. "
                             f"Use the broadcast_* op for numpy-style broadcasting")
    return [known] * len(ins), [known] * len(outs)


def broadcast_shapes(*shapes: Shape) -> Shape:
    """NumPy broadcasting of several shapes, with a ShapeError naming both on mismatch."""
    ndim = max(len(s) for s in shapes)
    out = []
    for axis in range(ndim):
        dims = {s[axis - ndim + len(s)] for s in shapes if axis - ndim + len(s) >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise ShapeError(f"shapes {' and '.join(map(str, shapes))} do not broadcast "
                             f"(axis {axis}: sizes {sorted(dims)})")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def broadcast_shape(attrs, ins, outs):
    """Broadcasting binary ops: output = numpy broadcast of the inputs (forward only)."""
    if all(s is not None for s in ins):
        return ins, [broadcast_shapes(*ins)] + list(outs[1:])
    if ins and all(s is None for s in ins[1:]) and outs[0] is not None and ins[0] is not None:
        return ins, outs
    return ins, outs


def first_input_shape(attrs, ins, outs):
    """Output 0 has the shape of input 0 (e.g. softmax, dropout), both directions."""
    if ins[0] is not None:
        return ins, [ins[0]] + list(outs[1:])
    if outs[0] is not None:
        return [outs[0]] + list(ins[1:]), outs
    return ins, outs


def same_dtype(attrs, ins, outs):
    """Every input and output shares one dtype (the default rule, explicit)."""
    known = next((t for t in (*ins, *outs) if t is not None), None)
    if known is None:
        return ins, outs
    for t in (*ins, *outs):
        if t is not None and t != known:
            raise TypeInferenceError(f"operands must share one dtype; got {known} and {t}. "
                                     f"Insert a cast")
    return [known] * len(ins), [known] * len(outs)


def fixed_dtype(dtype: str):
    """Rule for ops whose outputs have a fixed dtype (comparisons -> bool, argmax -> int64)."""
    def rule(attrs, ins, outs):
        return ins, [dtype] * len(outs)
    return rule


def inplace_first(attrs) -> list[tuple[int, int]]:
    """FInplaceOption for elementwise ops: output 0 may reuse input 0's memory."""
    return [(0, 0)]


def to_dtype(x: np.ndarray, like: np.ndarray) -> np.ndarray:
    """Cast a kernel result back to the input dtype (NumPy promotes float32*python float)."""
    return x.astype(like.dtype, copy=False)


# -- gradient-graph builder --------------------------------------------------------------------

def op(name: str, *inputs: NodeEntry, node_name: str | None = None, **attrs: Any) -> NodeEntry:
    """Create a node in a gradient graph and return its first output entry."""
    return NodeEntry(make_node(name, list(inputs), attrs, node_name), 0, 0)


def outputs(node) -> list[NodeEntry]:
    """The forward node's outputs as entries (for gradients that reuse them)."""
    return [NodeEntry(node, i, 0) for i in range(node.num_outputs)]


def sum_to_like(grad: NodeEntry, like: NodeEntry) -> NodeEntry:
    """Reduce a broadcast gradient back to the shape of ``like`` (NNVM's collapse_sum)."""
    return op("collapse_sum_like", grad, like)


def as_tuple(x: Sequence[int] | int) -> tuple[int, ...]:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)
