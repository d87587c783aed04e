"""Sequences and optionals, resolved at import time (see ``importer.SeqValue``).

Every sequence op becomes list surgery on the tensor Values it holds: SequenceAt picks one,
SequenceInsert/Erase build a new list, SplitToSequence slices, ConcatFromSequence is one
``concatenate``, SequenceMap converts its body once per element. Positions must therefore
be known at import time (the backend adapter freezes inputs that carry them). Optionals
are either empty or hold a value, also known at import time.
"""

from __future__ import annotations

import numpy as np

from ..errors import OnnxImportError, format_error
from ..importer import STRUCTURED, OptValue, SeqValue
from ..registry import converter
from ..tensors import onnx_dtype_name
from .common import cast, norm_axis
from .control_flow import inline_graph
from .tensor import reshape_to, slice_axis, strided


def _seq(ctx, i: int) -> SeqValue:
    v = ctx.input(i)
    if isinstance(v, OptValue) and isinstance(v.item, SeqValue):
        v = v.item
    if not isinstance(v, SeqValue):
        raise OnnxImportError(format_error(ctx.where, f"input {i} ('{ctx.node.input[i]}') must "
                                           "be a sequence", "sequence", repr(v)))
    return v


def _position(ctx, i: int, length: int, default: int, insert: bool = False) -> int:
    """A sequence position from input ``i`` (negative counts from the end), range-checked."""
    if not ctx.has_input(i):
        return default
    pos = int(np.asarray(ctx.const(i)).reshape(-1)[0])
    hi = length if insert else length - 1
    if not -length <= pos <= hi:
        raise OnnxImportError(format_error(ctx.where, f"position {pos} is out of range for a "
                                           f"sequence of length {length}",
                                           f"in [{-length}, {hi}]", pos))
    return pos + length if pos < 0 else pos


def _out_name(ctx, k: int = 0) -> str:
    return ctx.node.output[k] if k < len(ctx.node.output) else ctx.base_name


@converter("SequenceConstruct")
def _construct(ctx, node):
    items = [ctx.input(i) for i in range(ctx.num_inputs)]
    dtypes = {v.dtype for v in items if v.dtype is not None}
    if len(dtypes) > 1:
        raise OnnxImportError(format_error(ctx.where, "sequence elements must share one dtype",
                                           got=sorted(dtypes)))
    return [SeqValue(_out_name(ctx), items)]


@converter("SequenceEmpty")
def _empty(ctx, node):
    dtype = onnx_dtype_name(ctx.attr("dtype", 1), ctx.where)
    return [SeqValue(_out_name(ctx), [], dtype)]


@converter("SequenceAt")
def _at(ctx, node):
    seq = _seq(ctx, 0)
    return [seq.items[_position(ctx, 1, len(seq.items), 0)]]


@converter("SequenceInsert")
def _insert(ctx, node):
    seq = _seq(ctx, 0)
    pos = _position(ctx, 2, len(seq.items), len(seq.items), insert=True)
    items = list(seq.items)
    items.insert(pos, ctx.input(1))
    return [SeqValue(_out_name(ctx), items, seq.elem_dtype)]


@converter("SequenceErase")
def _erase(ctx, node):
    seq = _seq(ctx, 0)
    pos = _position(ctx, 1, len(seq.items), len(seq.items) - 1)
    items = list(seq.items)
    del items[pos]
    return [SeqValue(_out_name(ctx), items, seq.elem_dtype)]


@converter("SequenceLength")
def _length(ctx, node):
    return [ctx.constant(np.array(len(_seq(ctx, 0).items), dtype=np.int64))]


@converter("SplitToSequence", requires=("strided_slice",))
def _split_to_sequence(ctx, node):
    x = ctx.input(0)
    shape = ctx.shape(x)
    axis = norm_axis(ctx, ctx.attr("axis", 0), len(shape))
    dim = shape[axis]
    keepdims = bool(ctx.attr("keepdims", 1))
    if ctx.has_input(1) and ctx.data_dependent(1) and ctx.rank(1) == 1:
        return [SeqValue(_out_name(ctx), _split_at_run_time(ctx, x, axis), x.dtype)]
    if ctx.has_input(1):
        split = np.asarray(ctx.const(1)).astype(np.int64)
        if split.ndim == 0:
            step = int(split)
            sizes = [min(step, dim - s) for s in range(0, dim, step)]
        else:
            sizes = [int(s) for s in split]
        keepdims = True  # ONNX: keepdims is ignored when split is given
    else:
        sizes = [1] * dim
    if sum(sizes) != dim:
        raise OnnxImportError(format_error(ctx.where, "split sizes do not add up to the axis "
                                           "length", dim, sizes))
    items, start = [], 0
    for s in sizes:
        part = slice_axis(ctx, x, axis, start, start + s)
        if not keepdims:
            part = reshape_to(ctx, part, shape[:axis] + shape[axis + 1:])
        items.append(part)
        start += s
    return [SeqValue(_out_name(ctx), items, x.dtype)]


def _split_at_run_time(ctx, x, axis: int) -> list:
    """SplitToSequence by a 1-D split known only at run time (a graph input): its length
    fixes the number of items at import time, each item is a ``dynamic_slice`` (host tail)
    between running sums of the sizes."""
    sizes = cast(ctx, ctx.input(1), "int64")
    ends = ctx.op("cumsum", sizes, axis=0, exclusive=False, reverse=False)
    starts = ctx.op("broadcast_sub", ends, sizes)
    axes, steps = (ctx.constant(np.array([v], dtype=np.int64)) for v in (axis, 1))
    return [ctx.op("dynamic_slice", x, strided(ctx, starts, [i], [i + 1], [1]),
                   strided(ctx, ends, [i], [i + 1], [1]), axes, steps)
            for i in range(ctx.shape(1)[0])]


@converter("ConcatFromSequence", requires=("concatenate",))
def _concat_from_sequence(ctx, node):
    seq = _seq(ctx, 0)
    if not seq.items:
        raise OnnxImportError(format_error(ctx.where, "cannot concatenate an empty sequence"))
    new_axis = bool(ctx.attr("new_axis", 0))
    rank = ctx.rank(seq.items[0]) + (1 if new_axis else 0)
    axis = norm_axis(ctx, ctx.attr("axis"), rank)
    items = [ctx.op("expand_dims", v, axis=axis) for v in seq.items] if new_axis \
        else seq.items
    if len(items) == 1:
        return [ctx.op("copy", items[0])]
    return [ctx.op("concatenate", *items, axis=axis)]


@converter("SequenceMap")
def _sequence_map(ctx, node):
    body = ctx.attr("body")
    ins = [ctx.input(i) for i in range(ctx.num_inputs)]
    lengths = {len(v.items) for v in ins if isinstance(v, SeqValue)}
    if not isinstance(ins[0], SeqValue) or len(lengths) != 1:
        raise OnnxImportError(format_error(ctx.where, "the first input must be a sequence and "
                                           "all sequence inputs must have one length",
                                           got=sorted(lengths)))
    n = lengths.pop()
    results: list[list] = [[] for _ in body.output]
    base = ctx.node.name or ctx.node.output[0]
    for i in range(n):
        args = [v.items[i] if isinstance(v, SeqValue) else v for v in ins]
        outs = inline_graph(ctx, body, args, prefix=f"{base}/elem{i}/")
        for acc, v in zip(results, outs):
            acc.append(v)
    dtypes = []
    for o in body.output:
        tt = o.type.sequence_type.elem_type.tensor_type if o.type.HasField("sequence_type") \
            else o.type.tensor_type
        dtypes.append(onnx_dtype_name(tt.elem_type, ctx.where) if tt.elem_type else None)
    return [SeqValue(_out_name(ctx, k), acc, dt) for k, (acc, dt) in
            enumerate(zip(results, dtypes))]


@converter("Optional")
def _optional(ctx, node):
    return [OptValue(_out_name(ctx), ctx.input(0) if ctx.has_input(0) else None)]


@converter("OptionalHasElement")
def _has_element(ctx, node):
    if not ctx.has_input(0):
        return [ctx.constant(np.array(False))]
    v = ctx.input(0)
    return [ctx.constant(np.array(not isinstance(v, OptValue) or v.item is not None))]


@converter("OptionalGetElement")
def _get_element(ctx, node):
    v = ctx.input(0)
    if not isinstance(v, OptValue):
        return [v]
    if v.item is None:
        raise OnnxImportError(format_error(ctx.where, f"optional '{ctx.node.input[0]}' is "
                                           "empty", fix="Check OptionalHasElement first"))
    return [v.item]


__all__ = ["STRUCTURED"]
