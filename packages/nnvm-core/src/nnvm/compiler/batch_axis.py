"""Batch-axis analysis: does every sample of a batch flow through the graph on its own?

Why this exists: a model built with a symbolic batch (``shape={"x": ("N", 3, 224, 224)}``)
must run any batch size without recompiling, on every target. Two designs fit: symbolic
shapes in the generated code (each backend's lowering, memory planner and kernel templates
would have to handle a variable extent), or one compiled size with the batch split into runs
of that size. The second works unchanged on ``reference``, ``llvm``, ``opencl`` and ``cuda``
and keeps every kernel specialised, but it is only correct when sample ``n`` of each output
depends on sample ``n`` of the inputs alone. This module proves that, or says why not, so
that :mod:`nnvm.runtime.batching` can split, and the caller can fall back to one build per
batch size when it cannot.

How: the graph is imported and shape-inferred at two batch sizes (``b1``, ``b2``). The axis
whose extent is ``b1`` in one and ``b2`` in the other is the batch axis of that tensor (none:
the tensor does not depend on the batch). ONNX shape-computation subgraphs (``Shape ->
Gather -> Concat -> Reshape``) are folded by the importer at each size, so they show up as a
``reshape`` whose target contains the batch, and the reshape rule below checks it. Every op
that receives a batched input must have a rule that says it keeps samples apart with the
batch on exactly the observed output axis: elementwise and broadcast ops (right-aligned),
convolutions and pools (batch on axis 0), dense/matmul on non-contracted axes, reductions,
softmax-like and normalisation ops over other axes, transpose (follows the permutation),
reshape-like ops (only when the elements before and after the batch axis are the same
before and after, i.e. the batch is not folded into another dimension), concatenate/split/
gather/pad/tile away from the batch axis. Anything else (a reduction over the batch, a
``Shape`` read, an op without a rule) makes the graph non-separable: refusing is always safe.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Mapping

from ..ir import Graph
from ..op import OpPattern


@dataclasses.dataclass(frozen=True)
class BatchPlan:
    """Where the batch lives: ``inputs`` maps each batched input to its batch axis,
    ``outputs`` gives each graph output's batch axis (None: the same for every sample)."""

    inputs: dict
    outputs: tuple


class NotSeparable(Exception):
    """Internal: carries the reason a graph cannot be split along its batch."""


def _norm(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _axes(attrs: Mapping, key: str, rank: int, default=()) -> set[int]:
    value = attrs.get(key, default)
    if value is None:
        return set()
    if isinstance(value, int):
        value = (value,)
    return {_norm(int(a), rank) for a in value}


# -- rules: (attrs, input batch axes, input shapes, output shapes, observed) -> reason | None -----
Rule = Callable[[Mapping, list, list, list, list], "str | None"]


def _aligned(attrs, ins, in_shapes, out_shapes, observed):
    """Elementwise and broadcast ops: a batched input's axis lands, right-aligned, on the
    output's batch axis (a batch-independent input cannot index the batch: its extent is
    the same at both batch sizes)."""
    for k, out in enumerate(out_shapes):
        for a, shp in zip(ins, in_shapes):
            if a is not None and a + len(out) - len(shp) != observed[k]:
                return "a batched input is broadcast onto another axis"
    return None


def _first_input_on(axis0: bool = True, axis_keys: tuple = (), require_layout: bool = False,
                    no_keys: tuple = ()):
    """Ops that act per sample on input 0 (others batch-independent): convolutions, pools,
    normalisations. ``axis_keys`` name attributes that must not point at the batch,
    ``no_keys`` attributes that must be empty (resize's ``roi`` could crop the batch)."""
    def rule(attrs, ins, in_shapes, out_shapes, observed):
        a = ins[0]
        if a is None or any(x is not None for x in ins[1:]):
            return "only its data input may carry the batch"
        if axis0 and a != 0:
            return "the batch is not on axis 0"
        layout = str(attrs.get("layout", "N"))
        if require_layout and not layout.startswith("N"):
            return f"layout {layout} does not put the batch first"
        rank = len(in_shapes[0])
        if any(attrs.get(key) for key in no_keys):
            return f"its {', '.join(no_keys)} may reach the batch axis"
        for key in axis_keys:
            if key in attrs and a in _axes(attrs, key, rank):
                return f"its {key} is the batch axis"
        if any(o not in (a, None) for o in observed) or observed[0] != a:
            return "the batch moves"
        return None
    return rule


def _normalised_from(key: str):
    """layer_norm / rms_norm normalise over the axes from ``key`` on: the batch must be before."""
    def rule(attrs, ins, in_shapes, out_shapes, observed):
        a, rank = ins[0], len(in_shapes[0])
        if a is None or any(x is not None for x in ins[1:]):
            return "only its data input may carry the batch"
        if a >= _norm(int(attrs.get(key, -1)), rank):
            return "it normalises over the batch axis"
        return None if all(o == a for o in observed) else "the batch moves"
    return rule


def _dense(attrs, ins, in_shapes, out_shapes, observed):
    a = ins[0]
    if a is None or any(x is not None for x in ins[1:]) or a == len(in_shapes[0]) - 1:
        return "the batch is on the contracted axis or in the weight"
    return None if observed == [a] else "the batch moves"


def _matmul(attrs, ins, in_shapes, out_shapes, observed):
    ra, rb, ro = len(in_shapes[0]), len(in_shapes[1]), len(out_shapes[0])
    if min(ra, rb) < 2:
        return "vector operands"
    a, b = ins[0], ins[1]
    # per operand: its batch axis, rank, own free (row/column) axis, the other operand's
    # batch axis, and where that free axis lands in the output
    operands = ((a, ra, ra - 1 if attrs.get("transpose_a") else ra - 2, b, ro - 2),
                (b, rb, rb - 2 if attrs.get("transpose_b") else rb - 1, a, ro - 1))
    want = set()
    for axis, rank, free, other, out_free in operands:
        if axis is None:
            continue
        if axis < rank - 2:  # a stacked (batch-of-matrices) axis, right-aligned
            want.add(axis + ro - rank)
        elif axis == free and other is None:
            want.add(out_free)
        else:
            return "the batch is on a contracted axis"
    return None if len(want) == 1 and observed == [want.pop()] else "the batch moves"


def _reduce(attrs, ins, in_shapes, out_shapes, observed):
    a, rank = ins[0], len(in_shapes[0])
    axes = _axes(attrs, "axis", rank)
    if not axes:
        axes = set(range(rank))
    if attrs.get("exclude"):
        axes = set(range(rank)) - axes
    if a in axes:
        return "it reduces over the batch"
    want = a if attrs.get("keepdims") else a - sum(1 for x in axes if x < a)
    return None if observed == [want] else "the batch moves"


def _reshape_like(attrs, ins, in_shapes, out_shapes, observed):
    """Row-major reshape keeps sample ``n`` in place exactly when the element counts before
    and after the batch axis are unchanged (otherwise the batch is folded into other dims)."""
    a, o = ins[0], observed[0]
    if a is None or any(x is not None for x in ins[1:]) or o is None:
        return "the batch is folded into other dimensions"
    i_shape, o_shape = in_shapes[0], out_shapes[0]
    if math.prod(i_shape[:a]) != math.prod(o_shape[:o]) or \
            math.prod(i_shape[a + 1:]) != math.prod(o_shape[o + 1:]):
        return "the batch is folded into other dimensions"
    return None


def _transpose(attrs, ins, in_shapes, out_shapes, observed):
    rank = len(in_shapes[0])
    perm = [_norm(int(x), rank) for x in attrs.get("axes") or ()] or list(range(rank))[::-1]
    return None if observed == [perm.index(ins[0])] else "the batch moves"


def _along_axis(key: str, default: int):
    """concatenate / split / cumsum / softmax-like: every batched input on the same axis,
    and the op's own axis elsewhere."""
    def rule(attrs, ins, in_shapes, out_shapes, observed):
        batched = {x for x in ins if x is not None}
        if len(batched) != 1 or any(x is None for x in ins[:1]):
            return "inputs carry the batch on different axes"
        a = batched.pop()
        if a == _norm(int(attrs.get(key, default)), len(in_shapes[0])):
            return f"its {key} is the batch axis"
        return None if all(o == a for o in observed) else "the batch moves"
    return rule


def _gather(attrs, ins, in_shapes, out_shapes, observed):
    """gather/take: ``out = data[:axis] + indices + data[axis+1:]``."""
    if attrs.get("axis", 0) is None:
        return "it flattens the data"
    rank = len(in_shapes[0])
    axis = _norm(int(attrs.get("axis", 0)), rank)
    a, i = ins[0], ins[1]
    if a is not None and i is not None:
        return "both data and indices carry the batch"
    if a is not None:
        if a == axis:
            return "it indexes along the batch"
        want = a if a < axis else a - 1 + len(in_shapes[1])
    else:
        want = axis + i
    return None if observed == [want] else "the batch moves"


def _untouched(key: str):
    """pad / tile: the batch axis's own entry must be the identity."""
    def rule(attrs, ins, in_shapes, out_shapes, observed):
        a = ins[0]
        if a is None or any(x is not None for x in ins[1:]):
            return "only its data input may carry the batch"
        entry = tuple(attrs.get(key) or ())[a] if len(tuple(attrs.get(key) or ())) > a else 1
        if entry not in ((0, 0), [0, 0], 1):
            return f"its {key} changes the batch axis"
        return None if observed == [a] else "the batch moves"
    return rule


def _strided_slice(attrs, ins, in_shapes, out_shapes, observed):
    """A unit-stride slice whose output keeps the batch's whole extent (at both probe sizes)
    is the identity on the batch axis; any other slice of it changes the extent or the
    order (a negative stride), and is refused."""
    a = ins[0]
    if a is None or any(x is not None for x in ins[1:]) or observed != [a]:
        return "it slices the batch axis"
    stride = tuple(attrs.get("stride") or ())
    if a < len(stride) and stride[a] not in (None, 1):
        return "it strides along the batch axis"
    return None


def _rows(attrs, ins, in_shapes, out_shapes, observed):
    """ONNX-ML ops (scalers, trees, SVMs, linear models...): one result per row of a
    ``(samples, features)`` input."""
    batched = [(a, s) for a, s in zip(ins, in_shapes) if a is not None]
    if any(a != 0 or len(s) < 2 for a, s in batched) or len(batched) != len(ins):
        return "the batch is not the rows of its inputs"
    return None if all(o == 0 for o in observed) else "the batch moves"


def _recurrent(op_name: str):
    """ONNX LSTM/GRU/RNN: each sequence of the batch runs its own recurrence. The batch is
    axis 1 of X and the initial states (axis 0 with ``layout=1``), axis 0 of
    ``sequence_lens``; the weights must not depend on it; Y has it on axis 2 (0), the
    final states on axis 1 (0)."""
    def rule(attrs, ins, in_shapes, out_shapes, observed):
        from ..op import get_op

        first = int(attrs.get("layout", 0)) == 1
        want_in = {"X": 0 if first else 1, "initial_h": 0 if first else 1,
                   "initial_c": 0 if first else 1, "sequence_lens": 0}
        names = get_op(op_name).input_names(attrs)
        for name, a in zip(names, ins):
            if a is not None and want_in.get(name) != a:
                return f"its input {name} carries the batch on axis {a}"
        want_out = [0 if first else 2] + [0 if first else 1] * (len(observed) - 1)
        return None if observed == want_out else "the batch moves"
    return rule


_PER_SAMPLE = _first_input_on(require_layout=True)

RULES: dict[str, Rule] = {
    **{n: _PER_SAMPLE for n in (
        "conv", "conv2d", "_contrib_conv2d_NCHWc", "conv_transpose", "avg_pool", "max_pool",
        "lp_pool", "avg_pool2d", "max_pool2d", "global_avg_pool2d", "global_max_pool2d",
        "global_avg_pool", "global_max_pool", "global_lp_pool", "instance_norm", "group_norm",
        "depth_to_space", "space_to_depth", "__layout_transform__")},
    "resize": _first_input_on(require_layout=True, axis_keys=("axes",), no_keys=("roi",)),
    "lrn": _first_input_on(axis_keys=("axis",)),
    "batch_norm": _first_input_on(axis_keys=("axis",)),
    "dropout": _first_input_on(axis0=False),
    "mean_variance_normalization": _first_input_on(axis0=False, axis_keys=("axes",)),
    "dense": _dense,
    "matmul": _matmul,
    **{n: _reduce for n in ("sum", "mean", "max", "min", "prod", "argmax", "argmin")},
    **{n: _reshape_like for n in ("reshape", "flatten", "squeeze", "expand_dims",
                                  "reshape_like")},
    "transpose": _transpose,
    **{n: _along_axis("axis", -1) for n in ("softmax", "log_softmax", "hardmax",
                                             "lp_normalization")},
    "cumsum": _along_axis("axis", 0),
    "cumprod": _along_axis("axis", 0),
    "concatenate": _along_axis("axis", 1),
    "split": _along_axis("axis", 1),
    "layer_norm": _normalised_from("axis"),
    "rms_norm": _normalised_from("axis"),
    "gather": _gather,
    "take": _gather,
    "strided_slice": _strided_slice,
    **{n: _recurrent(n) for n in ("lstm", "gru", "rnn")},
    **{n: _rows for n in (
        "scaler", "normalizer", "imputer", "array_feature_extractor", "feature_vectorizer",
        "linear_classifier", "linear_regressor", "svm_classifier", "svm_regressor",
        "tree_ensemble", "tree_ensemble_classifier")},
    # one result per element (OneHotEncoder appends its category axis): a 1-D batch of
    # labels (N,) splits as well as rows do
    **{n: _first_input_on(axis0=False) for n in (
        "binarizer", "label_encoder", "one_hot_encoder")},
    "pad": _untouched("pad_width"),
    "tile": _untouched("reps"),
}

#: Ops whose output depends on more than the same position of their inputs, though their
#: pattern says elementwise/broadcast: per-axis quantisation could index the batch axis.
_NOT_ELEMENTWISE = {"quantize_linear", "dequantize_linear"}


def _rule_for(op) -> Rule | None:
    if op.name in RULES:
        return RULES[op.name]
    if op.name not in _NOT_ELEMENTWISE and not op.name.startswith("_") and \
            op.get_attr("TOpPattern") in (OpPattern.ELEMWISE, OpPattern.BROADCAST):
        return _aligned
    return None


def batch_plan(g1: Graph, g2: Graph, inputs: Mapping[str, int], b1: int, b2: int
               ) -> BatchPlan | str:
    """The batch plan of a graph shape-inferred at batch ``b1`` (``g1``) and ``b2`` (``g2``),
    with ``inputs`` ``{name: batch axis}``; or, when samples are not independent, the reason
    (a string naming the first node that mixes them)."""
    try:
        return _plan(g1, g2, dict(inputs), b1, b2)
    except NotSeparable as exc:
        return str(exc)


def _plan(g1: Graph, g2: Graph, inputs: dict, b1: int, b2: int) -> BatchPlan:
    idx1, idx2 = g1.index, g2.index
    if idx1.num_nodes != idx2.num_nodes or idx1.inputs != idx2.inputs:
        raise NotSeparable("the graph's structure depends on the batch size")
    s1, s2, rptr = g1.attrs["shape"], g2.attrs["shape"], idx1.entry_rptr
    axes: list = [None] * idx1.num_node_entries
    for nid, (n1, n2) in enumerate(zip(idx1.nodes, idx2.nodes)):
        op = n1.op
        where = f"node '{n1.name}'" + (f" ({op.name})" if op is not None else "")
        if (op and op.name) != (n2.op and n2.op.name):
            raise NotSeparable("the graph's structure depends on the batch size")
        observed = [_batch_axis(s1[e], s2[e], b1, b2, where)
                    for e in range(rptr[nid], rptr[nid + 1])]
        if op is None:
            if observed[0] != inputs.get(n1.name):
                raise NotSeparable(f"{where}: its shape depends on the batch, but it is not a "
                                   "batched input")
            axes[rptr[nid]] = observed[0]
            continue
        ins = [axes[rptr[i] + j] for i, j, _ in idx1.inputs[nid]]
        if all(a is None for a in ins):
            if any(o is not None for o in observed):
                raise NotSeparable(f"{where}: makes a batch-sized tensor from batch-independent "
                                   "inputs")
            continue
        rule = _rule_for(op)
        if rule is None:
            raise NotSeparable(f"{where}: no rule says it keeps the samples of a batch apart")
        in_shapes = [s1[rptr[i] + j] for i, j, _ in idx1.inputs[nid]]
        out_shapes = [s1[e] for e in range(rptr[nid], rptr[nid + 1])]
        reason = rule(n1.attrs, ins, in_shapes, out_shapes, observed)
        if reason:
            raise NotSeparable(f"{where}: {reason}")
        axes[rptr[nid]:rptr[nid + 1]] = observed
    missing = sorted(set(inputs) - set(idx1.input_names))
    if missing:
        raise NotSeparable(f"inputs {missing} are not graph inputs")
    return BatchPlan(dict(inputs), tuple(axes[e] for e in idx1.output_entries))


def _batch_axis(a, b, b1: int, b2: int, where: str) -> int | None:
    if a is None or b is None or len(a) != len(b):
        raise NotSeparable(f"{where}: its shape is unknown or its rank depends on the batch")
    diff = [k for k in range(len(a)) if a[k] != b[k]]
    if not diff:
        return None
    if len(diff) == 1 and a[diff[0]] == b1 and b[diff[0]] == b2:
        return diff[0]
    raise NotSeparable(f"{where}: the batch is folded into other dimensions ({tuple(a)} at "
                       f"batch {b1}, {tuple(b)} at batch {b2})")
