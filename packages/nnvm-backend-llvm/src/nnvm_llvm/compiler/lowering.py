"""The lowering table: one compute rule per op, keyed by op name.

A rule is ``rule(attrs, ins, outs, ctx) -> te.Tensor | list[te.Tensor]`` where ``ins`` are
the TE tensors of the node's inputs, ``outs`` the ``(shape, dtype)`` of its outputs (from
shape/type inference, so rules never re-derive them), and ``ctx`` a ``LowerContext``.
``Lowering.kind`` names the schedule template of a group whose master is this op (see
``schedules``); ``pack`` says which weight input the kernel wants in a blocked layout.

An op without a rule is not an error: the executor runs its NumPy reference kernel and
``stats()`` reports it. ``unsupported_reason`` says why a node cannot be lowered.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np
import tvm
from tvm import te, topi

from ..runtime.packing import conv_nd_layout, packed_shape
from .flat_window import FlatPlane, flat_planes, flat_window
from .window_blocked import blocked_planes, blocked_weights, blocked_window, wants_blocked


@dataclasses.dataclass
class Lowering:
    """One op's lowering record.

    Attributes:
        compute: the TE compute rule.
        kind: schedule template: ``elemwise``, ``injective``, ``reduce``, ``softmax``,
            ``dense``, ``conv2d``, ``depthwise``, ``pool``.
        pack: ``f(attrs, in_shapes, ctx) -> {input index: (layout, block)}`` for weights the
            kernel reads pre-packed (applied only when that input is a param).
        supports: ``f(attrs, in_shapes) -> None | reason`` for attribute values the rule
            does not cover (those nodes fall back to the reference kernel).
    """

    compute: Callable
    kind: str = "injective"
    pack: Callable | None = None
    supports: Callable | None = None


@dataclasses.dataclass
class LowerContext:
    """What a rule may ask: the vector width, the packing decided for this node, names."""

    vector_lanes: int = 16
    packed: dict[int, tuple[str, int]] = dataclasses.field(default_factory=dict)
    name: str = "op"


LOWERINGS: dict[str, Lowering] = {}


def register(names: str | tuple, kind: str = "injective", pack=None, supports=None):
    """Decorator adding a rule for one op name or several."""
    def deco(fn):
        for n in (names,) if isinstance(names, str) else names:
            LOWERINGS[n] = Lowering(fn, kind, pack, supports)
        return fn
    return deco


def lookup(op_name: str) -> Lowering | None:
    return LOWERINGS.get(op_name)


def unsupported_reason(node, in_shapes) -> str | None:
    """None if ``node`` can be lowered, else a one-line reason."""
    rule = LOWERINGS.get(node.op.name)
    if rule is None:
        return f"no llvm lowering rule for op '{node.op.name}'"
    if rule.supports is not None:
        return rule.supports(node.attrs, in_shapes)
    return None


def _const(value, dtype):
    return tvm.tirx.const(value, dtype)


def expr_dtype(e) -> str:
    """dtype of a TIR expression (TVM 0.27 intrinsic calls and immediates carry it on
    ``ty`` only)."""
    dt = getattr(e, "dtype", None)
    return str(dt) if dt is not None else str(e.ty.dtype)


def _is_float(x) -> bool:
    return "float" in expr_dtype(x)


def _float_constant(x):
    """The value of ``x`` when it is a float constant or reads a constant tensor (a Clip
    bound folded by the optimiser), else None."""
    if isinstance(x, tvm.tirx.FloatImm):
        return x.value
    if isinstance(x, te.tensor.TensorSlice):
        tensor = x.tensor
    elif getattr(getattr(x, "op", None), "name", None) == "te.tensor_load":
        tensor = x.args[0]
    else:
        return None
    body = getattr(tensor.op, "body", None)
    if body is not None and len(body) == 1 and isinstance(body[0], tvm.tirx.FloatImm):
        return body[0].value
    return None


def keep_nan(x, y):
    """``y``, or ``x`` where ``x`` is NaN. Why: LLVM's min/max and TVM's clamped intrinsics
    (tanh clamps to [-9, 9]) turn NaN into a number, where NumPy and the reference target
    propagate it; a model fed NaN must return NaN on every target. A constant ``x`` is
    decided here: TVM folds neither ``isnan(6.0)`` nor the select around it, and its
    vectoriser then ran every ReLU6 epilogue one lane at a time."""
    if not _is_float(x):
        return y
    c = _float_constant(x)
    if c is not None:
        return x if np.isnan(c) else y
    return tvm.tirx.Select(te.isnan(x), x, y)


def nan_max(a, b):
    """``np.maximum``: NaN if either side is NaN (``te.max`` would return the other side)."""
    if not _is_float(a):
        return te.max(a, b)
    return keep_nan(b, keep_nan(a, te.max(a, b)))


def nan_min(a, b):
    """``np.minimum``: NaN if either side is NaN."""
    if not _is_float(a):
        return te.min(a, b)
    return keep_nan(b, keep_nan(a, te.min(a, b)))


def relu(x):
    """max(x, 0) that keeps NaN: one compare and a blend, as cheap as a max."""
    zero = _const(0, expr_dtype(x))
    return tvm.tirx.Select(x < zero, zero, x) if _is_float(x) else te.max(x, zero)


def _tanh(x):
    """tanh with its Taylor series near 0: TVM's float32 tanh approximation is off by ~6e-7
    absolute there, a large relative error on tiny inputs (mish of very negative x); NaN is
    kept (TVM's clamps it to 1)."""
    dtype = expr_dtype(x)
    if "float" not in dtype or dtype == "float64":
        return te.tanh(x)
    x2 = x * x
    c = [_const(v, dtype) for v in (1, 1 / 3, 2 / 15)]
    series = x * (c[0] - x2 * (c[1] - x2 * c[2]))
    return keep_nan(x, tvm.tirx.Select(te.abs(x) < _const(0.0625, dtype), series,
                                       te.tanh(x)))


# -- elementwise ------------------------------------------------------------------------------

_UNARY: dict[str, Callable[[Any], Any]] = {
    "relu": relu,
    "tanh": _tanh, "sigmoid": te.sigmoid, "exp": te.exp, "log": te.log, "sqrt": te.sqrt,
    "erf": te.erf, "sin": te.sin, "cos": te.cos, "floor": te.floor, "ceil": te.ceil,
    "round": te.round, "trunc": te.trunc, "negative": lambda x: -x, "abs": te.abs,
    "reciprocal": lambda x: _const(1, x.dtype) / x,
    "sign": lambda x: tvm.tirx.Select(x > 0, _const(1, x.dtype), tvm.tirx.Select(
        x < 0, _const(-1, x.dtype), _const(0, x.dtype))),
    "softplus": lambda x: relu(x) + te.log(_const(1, x.dtype) + te.exp(-te.abs(x))),
    "softsign": lambda x: x / (_const(1, x.dtype) + te.abs(x)),
    "copy": lambda x: x, "block_grad": lambda x: x, "dropout": lambda x: x,
    "zeros_like": lambda x: _const(0, x.dtype), "ones_like": lambda x: _const(1, x.dtype),
}


def _unary_rule(fn):
    def rule(attrs, ins, outs, ctx):
        x = ins[0]
        return te.compute(x.shape, lambda *i: fn(x[i]), name=ctx.name)
    return rule


for _n, _f in _UNARY.items():
    register(_n, "elemwise")(_unary_rule(_f))


@register("leaky_relu", "elemwise")
def _leaky_relu(attrs, ins, outs, ctx):
    x, a = ins[0], attrs["alpha"]
    return te.compute(x.shape, lambda *i: tvm.tirx.Select(
        x[i] > 0, x[i], x[i] * _const(a, x.dtype)), name=ctx.name)


@register("clip", "elemwise")
def _clip(attrs, ins, outs, ctx):
    x = ins[0]
    lo, hi = _const(attrs["a_min"], x.dtype), _const(attrs["a_max"], x.dtype)
    if "float" not in str(x.dtype):
        return te.compute(x.shape, lambda *i: te.min(te.max(x[i], lo), hi), name=ctx.name)
    # np.clip keeps NaN (LLVM's min/max would turn it into a bound: a saturating cast to
    # float8 then yields +-448 instead of NaN)
    return te.compute(x.shape, lambda *i: tvm.tirx.Select(
        te.isnan(x[i]), x[i], te.min(te.max(x[i], lo), hi)), name=ctx.name)


@register("cast", "elemwise")
def _cast(attrs, ins, outs, ctx):
    x, dtype = ins[0], outs[0][1]
    return te.compute(x.shape, lambda *i: x[i].astype(dtype), name=ctx.name)


_SCALAR = {
    "__add_scalar__": lambda x, s: x + s, "__sub_scalar__": lambda x, s: x - s,
    "__rsub_scalar__": lambda x, s: s - x, "__mul_scalar__": lambda x, s: x * s,
    "__div_scalar__": lambda x, s: x / s, "__rdiv_scalar__": lambda x, s: s / x,
    "__pow_scalar__": lambda x, s: te.power(x, s), "__rpow_scalar__": lambda x, s: te.power(s, x),
}


def _scalar_rule(fn):
    def rule(attrs, ins, outs, ctx):
        x = ins[0]
        s = _const(attrs["scalar"], x.dtype)
        return te.compute(x.shape, lambda *i: fn(x[i], s), name=ctx.name)
    return rule


for _n, _f in _SCALAR.items():
    register(_n, "elemwise")(_scalar_rule(_f))

_BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "pow": te.power, "maximum": nan_max, "minimum": nan_min,
}


def _broadcast_rule(fn):
    """numpy broadcasting by right-aligned index mapping onto the known output shape."""
    def rule(attrs, ins, outs, ctx):
        shape = outs[0][0]
        nd = len(shape)

        def at(t, idx):
            off = nd - len(t.shape)
            return t[tuple(0 if int(t.shape[d]) == 1 and int(shape[d + off]) != 1 else idx[d + off]
                       for d in range(len(t.shape)))]
        return te.compute(shape, lambda *i: fn(*[at(t, i) for t in ins]), name=ctx.name)
    return rule


for _n, _f in _BINARY.items():
    if _n not in ("maximum", "minimum", "pow"):
        register(f"elemwise_{_n}", "elemwise")(_broadcast_rule(_f))
    register(f"broadcast_{_n}", "elemwise")(_broadcast_rule(_f))


@register("elemwise_sum", "elemwise")
def _elemwise_sum(attrs, ins, outs, ctx):
    def body(*i):
        acc = ins[0][i]
        for t in ins[1:]:
            acc = acc + t[i]
        return acc
    return te.compute(ins[0].shape, body, name=ctx.name)


@register("where", "elemwise")
def _where(attrs, ins, outs, ctx):
    c, x, y = ins
    cmp = te.compute(c.shape, lambda *i: c[i].astype("bool"), name=ctx.name + "_cond") \
        if c.dtype != "bool" else c
    return _broadcast_rule(lambda a, b, d: tvm.tirx.Select(a, b, d))(attrs, [cmp, x, y], outs,
                                                                      ctx)


# -- injective: shape changes -----------------------------------------------------------------

@register(("reshape", "flatten", "expand_dims", "squeeze", "reshape_like"))
def _reshape(attrs, ins, outs, ctx):
    x, shape = ins[0], tuple(outs[0][0])
    axes = unit_axes_map(tuple(int(d) for d in x.shape), shape)
    if axes is None:
        return topi.reshape(x, shape)
    return te.compute(shape, lambda *i: x[tuple(i[d] if d is not None else 0 for d in axes)],
                      name="T_reshape", tag="injective")


def unit_axes_map(src: tuple, dst: tuple) -> list | None:
    """For each ``src`` axis, the ``dst`` axis indexing it (None: a size-1 axis, index 0),
    when ``dst`` is ``src`` with size-1 axes inserted or removed; else None.

    Why: topi.reshape flattens the index and divides it back out, and the divisions stay in
    a kernel that inlines the reshape (the (N, C, W) -> (N, C, 1, W) input of an imported 1-D
    conv folded into its conv2d: a 64 x 300 pointwise conv ran 10% slower than reading a
    copy); this map has no arithmetic at all.
    """
    kept_src = [k for k, d in enumerate(src) if d != 1]
    kept_dst = [k for k, d in enumerate(dst) if d != 1]
    if [src[k] for k in kept_src] != [dst[k] for k in kept_dst]:
        return None
    to_dst = dict(zip(kept_src, kept_dst))
    return [to_dst.get(k) for k in range(len(src))]


@register("transpose")
def _transpose(attrs, ins, outs, ctx):
    axes = attrs.get("axes") or ()
    return topi.transpose(ins[0], list(axes) if axes else None)


@register("concatenate")
def _concatenate(attrs, ins, outs, ctx):
    """A chain of selects on the concatenated axis whose every branch indexes in bounds
    (the index clamped into its input). topi's ``if_then_else`` chain reads ``x[j - off]``
    at negative ``j - off`` in the branches not taken; vectorised, both branches are loaded,
    and for AVX-512 (znver4) LLVM treated the out-of-bounds load as impossible and returned
    garbage (RotaryEmbedding's concat of two rotated halves, 1e23 instead of ~1)."""
    shape = outs[0][0]
    axis = attrs["axis"] % len(shape)
    parts, start = [], 0
    for t in ins:
        size = int(t.shape[axis])
        if size:
            parts.append((t, start, size))
        start += size
    if not parts:
        return te.compute(shape, lambda *i: ins[0][i], name=ctx.name)

    def body(*i):
        j = i[axis]

        def read(t, off, size):
            k = tvm.tirx.max(tvm.tirx.min(j - off, size - 1), 0)
            return t[i[:axis] + (k,) + i[axis + 1:]]
        if axis != len(shape) - 1:
            return _branch_tree(j, parts, read)
        value = read(*parts[-1])
        for t, off, size in reversed(parts[:-1]):
            value = tvm.tirx.Select(j < off + size, read(t, off, size), value)
        return value
    return te.compute(shape, body, name=ctx.name)


def _branch_tree(j, parts, read):
    """The part holding index ``j`` by a balanced tree of lazy ``if_then_else`` (real
    branches, only the taken side loads). For a concatenation along an outer axis ``j`` is
    the same across the vectorised innermost axis, so each branch is decided once per row;
    the eager ``Select`` chain loaded every input for every element: DenseNet's
    concatenations of up to 49 inputs (fused with BatchNorm and ReLU) ran at 1 GFLOP/s."""
    if len(parts) == 1:
        return read(*parts[0])
    mid = len(parts) // 2
    return tvm.tirx.if_then_else(j < parts[mid][1], _branch_tree(j, parts[:mid], read),
                                 _branch_tree(j, parts[mid:], read))


@register("broadcast_to")
def _broadcast_to(attrs, ins, outs, ctx):
    return topi.broadcast_to(ins[0], outs[0][0])


@register("pad", supports=lambda attrs, shapes: None if np.isfinite(attrs["pad_value"])
          else "non-finite pad_value")
def _pad(attrs, ins, outs, ctx):
    width = [tuple(int(v) for v in p) for p in attrs["pad_width"]]
    return topi.nn.pad(ins[0], [p[0] for p in width], [p[1] for p in width],
                       pad_value=attrs["pad_value"], name=ctx.name)


# -- reductions ---------------------------------------------------------------------------

def _reduce_axes(attrs, ndim):
    axes = tuple(a % ndim for a in (attrs.get("axis") or ()))
    if not axes:
        axes = tuple(range(ndim))
        if attrs.get("exclude"):
            return ()
    elif attrs.get("exclude"):
        axes = tuple(d for d in range(ndim) if d not in axes)
    return axes


def _split_last_axis(fn, combine, lanes: int):
    """``fn`` over the last axis as two reductions, its whole vectors and its tail, joined
    by ``combine``. Why: the row template keeps partial results in vector lanes only when
    the reduced extent is a multiple of the vector; magika's GELU + global max pool over
    508 positions (508 = 31 x 16 + 12) ran scalar, tanh and all: 4.4 of its 13 ms."""
    def split(x, axis, keepdims):
        shape = [int(d) for d in x.shape]
        n = shape[-1]
        n0 = n - n % lanes
        head = te.compute(shape[:-1] + [n0], lambda *i: x[i], name="row_head")
        tail = te.compute(shape[:-1] + [n - n0], lambda *i: x[i[:-1] + (i[-1] + n0,)],
                          name="row_tail")
        a, b = fn(head, axis=axis, keepdims=keepdims), fn(tail, axis=axis, keepdims=keepdims)
        return te.compute(a.shape, lambda *i: combine(a[i], b[i]), name="row_join")
    return split


def _reduce_rule(fn, mean=False, combine=None):
    def rule(attrs, ins, outs, ctx):
        x = ins[0]
        if str(x.dtype) == "bool":  # max/min of bools: any/all, computed on int8
            xi = te.compute(x.shape, lambda *i: x[i].astype("int8"), name=ctx.name + "_i8")
            y = rule(attrs, [xi], [(outs[0][0], "int8")], ctx)
            return te.compute(y.shape, lambda *i: y[i] != _const(0, "int8"), name=ctx.name)
        axes = _reduce_axes(attrs, len(x.shape))
        if not axes:
            return te.compute(outs[0][0], lambda *i: x[i], name=ctx.name)
        n, lanes = int(x.shape[-1]), ctx.vector_lanes
        split = combine is not None and _is_float(x[(0,) * len(x.shape)]) and \
            axes == (len(x.shape) - 1,) and n % lanes and n >= 2 * lanes
        out = (_split_last_axis(fn, combine, lanes) if split else fn)(
            x, axis=list(axes), keepdims=bool(attrs.get("keepdims")))
        if mean:
            count = _const(int(np.prod([int(x.shape[a]) for a in axes])), x.dtype)
            # integers: truncating division, as the reference's mean cast back to the dtype
            # (TVM refuses a bare "/" on ints; found by scripts/fuzz_onnx.py --target llvm)
            div = (lambda v: tvm.tirx.truncdiv(v, count)) if "int" in str(x.dtype) else \
                (lambda v: v / count)
            out = te.compute(out.shape, lambda *i: div(out[i]), name=ctx.name)
        return topi.reshape(out, outs[0][0]) if tuple(out.shape) != tuple(outs[0][0]) else out
    return rule


def _nan_reduce(combine, plain):
    """max/min reductions that return NaN when a reduced element is NaN (``np.max``);
    ``te.max``'s reducer skips NaN. Non-float dtypes keep topi's own reducer.

    An all -inf row (+inf for min; a fully masked attention row) reduces to -inf, as NumPy
    and onnxruntime do, not to the lowest finite value ``te.max``'s identity gives, or
    ``max == -inf`` tests downstream never fire.

    Both are read from a second reduction, of a flag per element (2: NaN, 0: the infinite
    identity, 1: anything else), next to topi's plain one. Why not one NaN-aware reducer:
    TVM's rfactor recognises only its own reducers, so a custom one never took vector
    lanes and every float max/min reduction (a global max pool after GELU included) ran
    scalar; max and max over int32 both vectorise. ``combine`` joins partial results."""
    extreme = {"max": -np.inf, "min": np.inf}[plain.__name__]

    def fn(x, axis, keepdims):
        if not _is_float(x):
            return plain(x, axis=axis, keepdims=keepdims)
        inf, flag = _const(extreme, x.dtype), lambda v: _const(v, "int32")
        value = plain(x, axis=axis, keepdims=keepdims)
        kinds = te.compute(x.shape, lambda *i: tvm.tirx.Select(
            te.isnan(x[i]), flag(2), tvm.tirx.Select(x[i] == inf, flag(0), flag(1))),
            name=f"nan_{plain.__name__}_flag")
        seen = topi.max(kinds, axis=axis, keepdims=keepdims)
        nan = _const(np.nan, x.dtype)
        return te.compute(value.shape, lambda *i: tvm.tirx.Select(
            seen[i] == flag(2), nan, tvm.tirx.Select(seen[i] == flag(0), inf, value[i])),
            name=f"nan_{plain.__name__}")
    return fn


register("sum", "reduce")(_reduce_rule(topi.sum, combine=lambda a, b: a + b))
register("max", "reduce")(_reduce_rule(_nan_reduce(nan_max, topi.max), combine=nan_max))
register("min", "reduce")(_reduce_rule(_nan_reduce(nan_min, topi.min), combine=nan_min))
register("prod", "reduce")(_reduce_rule(topi.prod))
register("mean", "reduce")(_reduce_rule(topi.sum, mean=True, combine=lambda a, b: a + b))


# -- dense / matmul -------------------------------------------------------------------------

def dense_block(n: int, lanes: int) -> int:
    """Output columns per register tile: two vectors when they divide N, else smaller."""
    for bn in (2 * lanes, lanes, lanes // 2, 4, 2):
        if bn and n % bn == 0:
            return bn
    return 1


def _dense_pack(attrs, shapes, ctx):
    n = shapes[1][0]
    bn = dense_block(n, ctx.vector_lanes)
    return {1: ("dense", bn)} if bn > 1 else {}


@register("dense", "dense", pack=_dense_pack)
def _dense(attrs, ins, outs, ctx):
    x, w = ins[0], ins[1]
    out_shape, dtype = outs[0]
    k_dim = int(x.shape[-1])
    rows = int(np.prod([int(d) for d in x.shape[:-1]]))
    x2 = topi.reshape(x, (rows, k_dim)) if len(x.shape) != 2 else x
    m = int(x2.shape[0])
    k = te.reduce_axis((0, k_dim), "k")
    if 1 in ctx.packed:
        bn = ctx.packed[1][1]
        n = int(w.shape[0]) * bn
        y = te.compute((m, n), lambda i, j: te.sum(x2[i, k] * w[j // bn, k, j % bn], axis=k),
                       name="anchor_dense")
    else:
        n = int(w.shape[0])
        y = te.compute((m, n), lambda i, j: te.sum(x2[i, k] * w[j, k], axis=k),
                       name="anchor_dense")
    if len(ins) > 2:
        b = ins[2]
        y = te.compute((m, n), lambda i, j: y[i, j] + b[j], name=ctx.name + "_bias")
    return topi.reshape(y, out_shape) if tuple(out_shape) != (m, n) else y


@register("matmul", "reduce")
def _matmul(attrs, ins, outs, ctx):
    """Batched matmul with numpy broadcasting of the batch axes; 1-D operands are promoted
    to matrices (a row for the left, a column for the right) as numpy.matmul does."""
    a, b = ins
    ta, tb = bool(attrs["transpose_a"]), bool(attrs["transpose_b"])
    out_shape = outs[0][0]
    if len(a.shape) == 1 or len(b.shape) == 1:
        a2 = topi.reshape(a, (1, int(a.shape[0]))) if len(a.shape) == 1 else a
        b2 = topi.reshape(b, (int(b.shape[0]), 1)) if len(b.shape) == 1 else b
        ta = ta and len(a.shape) > 1
        tb = tb and len(b.shape) > 1
        mid = list(np.broadcast_shapes(tuple(int(d) for d in a2.shape[:-2]),
                                       tuple(int(d) for d in b2.shape[:-2])))
        mid += [int(a2.shape[-1] if ta else a2.shape[-2]), int(b2.shape[-2] if tb else
                                                               b2.shape[-1])]
        y = _matmul(dict(attrs, transpose_a=ta, transpose_b=tb), [a2, b2],
                    [(tuple(mid), outs[0][1])], ctx)
        return topi.reshape(y, out_shape)
    n = int(out_shape[-1])
    if not tb and n % ctx.vector_lanes and n >= 2 * ctx.vector_lanes:
        return _lane_padded_matmul(attrs, a, b, outs, ctx)
    nb = len(out_shape) - 2
    k_dim = int(a.shape[-2] if ta else a.shape[-1])
    k = te.reduce_axis((0, k_dim), "k")

    def batch(t, idx):
        off = nb - (len(t.shape) - 2)
        return [0 if int(t.shape[d]) == 1 else idx[d + off] for d in range(len(t.shape) - 2)]

    dtype = outs[0][1]
    acc = "float32" if dtype in ("float16", "bfloat16") else dtype  # as the reference

    def body(*idx):
        i, j = idx[-2], idx[-1]
        ai = batch(a, idx) + ([k, i] if ta else [i, k])
        bi = batch(b, idx) + ([j, k] if tb else [k, j])
        return te.sum(a[tuple(ai)].astype(acc) * b[tuple(bi)].astype(acc), axis=k)
    y = te.compute(out_shape, body, name="anchor_matmul")
    if acc != dtype:
        return te.compute(out_shape, lambda *i: y[i].astype(dtype), name=ctx.name)
    return y


def _lane_padded_matmul(attrs, a, b, outs, ctx):
    """An activation x activation matmul whose N no vector divides (ViT's 197 tokens:
    ``Q @ K^T`` is 197 x 197) as one over N zero-padded to whole vectors (and M to a
    multiple of 4 rows), sliced after. Why: the batch-matmul template vectorises along N;
    a 197-wide row split into 16-lane tiles leaves a predicated tail that TVM refuses to
    vectorise, and the kernel ran scalar at 1 GFLOP/s (42% of ViT's run). M is padded too
    because the template's uneven row tiles lose their row bound when the slice is inlined
    into the write-back (TVM's reverse_compute_inline keeps only the slice's own
    predicate: rows past M were written, corrupting the heap). The padded copies are small
    and named ``T_transpose...`` so the ``matmul`` template keeps them materialised, as it
    keeps a transposed K, instead of inlining a bounds test into every vector load."""
    out_shape, dtype = outs[0]
    ta = bool(attrs["transpose_a"])
    n, m = int(out_shape[-1]), int(out_shape[-2])
    n_pad = -(-n // ctx.vector_lanes) * ctx.vector_lanes
    m_pad = -(-m // 4) * 4

    def pad_axis(t, axis, extra):
        after = [0] * len(t.shape)
        after[axis] = extra
        return topi.nn.pad(t, [0] * len(t.shape), after, name="T_transpose_lane_pad") \
            if extra else t
    ap = pad_axis(a, len(a.shape) - (1 if ta else 2), m_pad - m)
    bp = pad_axis(b, len(b.shape) - 1, n_pad - n)
    y = _matmul(attrs, [ap, bp], [(tuple(out_shape[:-2]) + (m_pad, n_pad), dtype)], ctx)
    return te.compute(out_shape, lambda *i: y[i], name=ctx.name + "_unpad")


# -- conv2d -------------------------------------------------------------------------------

def _conv_geometry(attrs):
    kh, kw = attrs["kernel_size"]
    sh, sw = attrs["strides"]
    dh, dw = attrs["dilation"]
    p = tuple(attrs["padding"])
    pt, pl, pb, pr = (p[0], p[1], p[0], p[1]) if len(p) == 2 else p
    return (kh, kw), (sh, sw), (dh, dw), (pt, pl, pb, pr)


def _conv_supports(attrs, shapes):
    if attrs.get("layout", "NCHW") != "NCHW" or attrs.get("kernel_layout", "OIHW") != "OIHW":
        return f"layout {attrs.get('layout')}/{attrs.get('kernel_layout')} (llvm lowers NCHW/OIHW)"
    if attrs.get("out_layout", "__undef__") not in ("__undef__", "", "NCHW"):
        return f"out_layout {attrs['out_layout']}"
    if attrs.get("out_dtype", "same") not in ("same", "", None):
        return f"out_dtype {attrs['out_dtype']} (llvm computes in the input dtype)"
    return None


def _depthwise(attrs, in_channels) -> bool:
    groups = attrs.get("groups", 1)
    return groups != 1 and groups == in_channels and attrs["channels"] == in_channels


def conv_block(oc: int, lanes: int) -> int:
    """Output channels per vector. A count no small block divides (257 STFT bins, 3 or 5
    classes) gets a full vector anyway: the packed weight is zero-padded to a multiple and
    the kernel computes the padded channels into scratch, never writing them out. Without
    this a prime channel count ran unvectorised at ~4 GFLOP/s."""
    for bn in (lanes, lanes // 2, 4):
        if oc % bn == 0:
            return bn
    if oc >= lanes // 2:
        return lanes if oc >= lanes else lanes // 2
    return 2 if oc % 2 == 0 else 1


#: most outputs (batch x channels x positions) of a conv whose reduction is split across
#: vector lanes (``lane_split``), and of one whose (padded) input plane is a single element,
#: so that each lane vector is a contiguous load, not a gather: 1x1 convs over 1x1 maps
#: measured 5 outputs 0.57 -> 0.07 us, 16 outputs of 256 channels 0.33 -> 0.23 us; 8 outputs
#: read by gathers (128 channels x 8 positions) 0.15 -> 0.20 us, so those are not split
LANE_SPLIT_MAX_OUTPUTS = 4
LANE_SPLIT_MAX_OUTPUTS_CONTIGUOUS = 64


def _conv_plane(attrs, x_shape, lanes: int) -> FlatPlane:
    """A ``conv2d``'s window geometry over its input plane, its output plane included."""
    (kh, kw), (sh, sw), (dh, dw), (pt, pl, pb, pr) = _conv_geometry(attrs)
    h, w = (int(d) for d in x_shape[2:])
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (w + pl + pr - dw * (kw - 1) - 1) // sw + 1
    return FlatPlane(kh, kw, sh, sw, dh, dw, pt, pl, h, w, oh, ow, lanes)


def _conv_outputs(attrs, x_shape, w_shape) -> int:
    """Output elements (batch x channels x positions) of a ``conv2d``."""
    g = _conv_plane(attrs, x_shape, 1)
    return int(x_shape[0]) * int(w_shape[0]) * g.oh * g.ow


def lane_split(attrs, x_shape, w_shape, lanes: int) -> int:
    """Lanes a tiny conv's input channels are split over (0: the conv is not split).

    Why: a conv with fewer outputs than a vector (a 1-D conv of 128 channels to one output)
    gave the channel-blocked kernel a one-lane vector, so its reduction ran as one scalar
    chain of dependent FMAs (Conv 1x128x1 by 1x128x1: 0.15 us, 5.7x its roofline). Split,
    each lane sums every ``lanes``-th input channel (one vector FMA per step) and a last
    stage adds the lanes up."""
    if attrs.get("groups", 1) != 1:
        return 0
    (kh, kw), _, _, (pt, pl, pb, pr) = _conv_geometry(attrs)
    n, ic, h, w = (int(d) for d in x_shape)
    outputs = _conv_outputs(attrs, x_shape, w_shape)
    contiguous = (h + pt + pb) * (w + pl + pr) == 1
    if outputs > (LANE_SPLIT_MAX_OUTPUTS_CONTIGUOUS if contiguous else LANE_SPLIT_MAX_OUTPUTS):
        return 0
    split = next((b for b in (lanes, lanes // 2, 4) if ic % b == 0 and ic >= 2 * b), 0)
    if outputs > LANE_SPLIT_MAX_OUTPUTS and outputs * split > ic * kh * kw:
        return 0  # the lane sums would outweigh the dot: SE-block convs (8 -> 32) 4x slower
    return split


def exact_block(cog: int, lanes: int) -> int:
    """One vector of exactly ``cog`` lanes per group (0: the usual blocks) for a grouped
    conv whose channels per group no block divides. Why: padded to whole blocks (3 channels
    per group to 4 lanes, 6 to 8), the kernel computed zeros, wrote a scratch output and
    copied its real channels out with the bias in a second pass, and a conv2d weight was
    repacked on every call (no ``conv2d`` block divided the group). Exact, measured at
    1 thread: Conv 2x4x6 by 6x2x3, 2 groups 0.171 -> 0.048 us; 1x12x32x32 by 20x3x3x3,
    4 groups 62 -> 25 us; 1x96x56x56 by 96x6x3x3, 16 groups, stride 2 227 -> 163 us;
    3 channels per group over 1x8x56x56 alike (40.5 / 41.5 us)."""
    if not 2 < cog < lanes or any(cog % b == 0 for b in (lanes, lanes // 2, 4)):
        return 0
    return cog


#: channels per group of a grouped ``conv2d`` (or folded 1-D conv) that takes ``conv_nd``'s
#: kernel of channels x output columns per vector (``columns_packed``)
COLUMN_GROUP_CHANNELS = (3, 4)


def columns_packed(attrs) -> bool:
    """Whether a grouped ``conv2d`` (or folded 1-D conv) with a constant weight takes
    ``conv_nd``'s kernel of 3 or 4 channels per group times 2 output columns per vector
    (``conv_nd.column_block``), its weight packed at load in copies (``conv_nd_{G}g``),
    instead of the ``conv2d`` template's one vector of 3 or 4 lanes. Decided from the
    attributes alone, so that ``packed_conv_kind`` (which sees only the node) names the
    template that reads the layout ``_conv_pack`` chose.

    Why: half-empty vectors (Conv 2x4x6x5 by 6x2x3x2 in 2 groups 0.190 -> 0.108 us), and
    packed at load no per-call copy of the weight in copies (measured at 1 thread, one
    process: Conv 2x4x6 by 6x2x3 in 2 groups 0.038 -> 0.029 us, 2x4x6x5 by 6x2x3x2
    0.104 -> 0.092 us, 1x8x56x56 by 12x2x3x3 in 4 groups 44.7 -> 26.3 us, 1x128x28x28
    by 128x4x3x3 in 32 groups 185 -> 149 us). Not for a strided column (the pair is no
    longer one 64-bit load: 1x256x56x56 by 256x4x3x3 stride 2 ran 1.4x slower) nor a padded
    conv, whose ``conv2d`` kernel pads each parallel task's own plane
    (``schedules._pads_per_channel_block``) where ``conv_nd`` pads in one pass first."""
    groups = attrs.get("groups", 1)
    return groups != 1 and groups != attrs.get("channels") \
        and attrs["channels"] // groups in COLUMN_GROUP_CHANNELS \
        and attrs["strides"][-1] == 1 and not any(attrs["padding"])


def columns_per_call(cog: int, outputs: int, lanes: int) -> bool:
    """Whether a tiny grouped ``conv2d`` (or folded 1-D conv) that ``columns_packed`` does
    not take (padded, or strided columns) is left unpacked, so that it takes ``conv_nd``'s
    kernel of channels x output columns per vector with its weight copied per call, not
    the ``conv2d`` template's one vector of ``cog`` lanes. Why: the per-call copy of 36 to
    72 weights cost less than the half-empty vectors (Conv 2x4x6x5 by 6x2x3x2 in 2 groups
    0.190 -> 0.108 us at 1 thread, before it was packed at load)."""
    from .conv_nd import channel_block, column_block  # conv_nd builds on this module

    return channel_block(cog, lanes) > cog and column_block(cog, outputs, lanes) > 1


def _conv_pack(attrs, shapes, ctx):
    groups = attrs.get("groups", 1)
    if lane_split(attrs, shapes[0], shapes[1], ctx.vector_lanes):
        return {}  # the split kernel reads the weight in its model layout
    if groups == 1:
        bn = conv_block(shapes[1][0], ctx.vector_lanes)
        return {1: ("conv2d", bn)} if bn > 1 else {}
    if _depthwise(attrs, shapes[0][1]):
        # the channel-blocked kernel reads 16 channels' taps as one vector: packed at load
        # as (channels / 16, 1, kh, kw, 16), zero past the last channel, not re-laid out
        # every call (about 8% of a 5x5 over 1152 x 7 x 7)
        blocked = wants_blocked(_conv_plane(attrs, shapes[0], ctx.vector_lanes),
                                int(shapes[1][0]))
        return {1: ("conv2d", ctx.vector_lanes)} if blocked else {}
    # grouped (ResNeXt, RegNet, ShuffleNet): the blocked template applies when a vector of
    # output channels never straddles two groups, i.e. the block divides channels per group
    cog = shapes[1][0] // groups
    if columns_packed(attrs):  # the conv_nd kernel (``grouped_conv2d``)
        from .conv_nd import channel_block  # conv_nd builds on this module

        return {1: (conv_nd_layout(groups), channel_block(cog, ctx.vector_lanes))}
    if columns_per_call(cog, _conv_outputs(attrs, shapes[0], shapes[1]), ctx.vector_lanes):
        return {}  # the conv_nd kernel, its weight copied per call (``grouped_conv2d``)
    bn = next((b for b in (ctx.vector_lanes, ctx.vector_lanes // 2, 4) if cog % b == 0), 1)
    bn = exact_block(cog, ctx.vector_lanes) or bn
    return {1: ("conv2d", bn)} if bn > 1 else {}


def _live_taps(k: int, s: int, d: int, pad: int, size: int, out: int) -> tuple:
    """``(first, count, pad_before, pad_after)`` of the kernel taps along one axis that read
    at least one input element; taps that read only padding contribute nothing. Why: the
    ASPP convs of DeepLabV3 (3x3, dilation 24 and 36 on a 16x16 map) are 1x1 convs in
    disguise; computed whole, two of them took 35 of its 72 ms multiplying zeros. The
    padding shrinks with the taps; when the live taps would start past the padding (no
    real model) the axis is left as it is."""
    live = [r for r in range(k) if any(0 <= o * s - pad + r * d < size for o in range(out))]
    if not live or live[0] * d > pad:
        return 0, k, pad, max(0, (out - 1) * s + (k - 1) * d + 1 - pad - size)
    first, count = live[0], live[-1] - live[0] + 1
    before = pad - first * d
    return first, count, before, max(0, (out - 1) * s + (count - 1) * d + 1 - before - size)


def _padded(x, pads, name):
    pt, pl, pb, pr = pads
    if not any(pads):
        return x
    return topi.nn.pad(x, [0, 0, pt, pl], [0, 0, pb, pr], name="pad_" + name)


@register("conv2d", "conv2d", pack=_conv_pack, supports=_conv_supports)
def _conv2d(attrs, ins, outs, ctx):
    x, w = ins[0], ins[1]
    groups = attrs.get("groups", 1)
    grouped = groups != 1 and not _depthwise(attrs, int(x.shape[1]))
    if grouped and (1 not in ctx.packed or columns_packed(attrs)):
        from .lowering_nn import grouped_conv2d

        return grouped_conv2d(attrs, ins, outs, ctx)
    (kh, kw), (sh, sw), (dh, dw), pads = _conv_geometry(attrs)
    (n, oc, oh, ow), dtype = outs[0]
    depthwise = groups != 1 and not grouped
    # taps that read only padding are dropped (h0/w0: the first live tap)
    (h0, kh, pt, pb), (w0, kw, pl, pr) = (
        _live_taps(kh, sh, dh, pads[0], int(x.shape[2]), oh),
        _live_taps(kw, sw, dw, pads[1], int(x.shape[3]), ow)) if not depthwise else (
        (0, kh, pads[0], pads[2]), (0, kw, pads[1], pads[3]))
    if depthwise:
        g = FlatPlane(kh, kw, sh, sw, dh, dw, pt, pl, int(x.shape[2]), int(x.shape[3]), oh, ow,
                      ctx.vector_lanes)
        if wants_blocked(g, oc):  # small planes: 16 channels in a vector
            if 1 in ctx.packed:  # (channels / lanes, 1, kh, kw, lanes) from _conv_pack
                def tap(v, k, ci, rh, rw):
                    return v * w[k, 0, rh, rw, ci]
            else:
                wb = blocked_weights(w, ctx.vector_lanes, ctx.name)

                def tap(v, k, ci, rh, rw):
                    return v * wb[k, rh, rw, ci]
            y = blocked_window(blocked_planes(x, g, 0.0, ctx.name), g, oc, te.sum, tap,
                               "anchor_depthwise")
        else:
            y = flat_window(flat_planes(x, g, 0.0, ctx.name, depthwise=True), g, te.sum,
                            lambda v, c, rh, rw: v * w[c, 0, rh, rw], "anchor_depthwise")
    else:
        xp = _padded(x, (pt, pl, pb, pr), ctx.name)
        rh, rw = te.reduce_axis((0, kh), "rh"), te.reduce_axis((0, kw), "rw")
        ic = int(x.shape[1]) // groups  # input channels per group
        cog = oc // groups
        rc = te.reduce_axis((0, ic), "rc")
        split = 0 if grouped or 1 in ctx.packed else lane_split(
            attrs, x.shape, w.shape, ctx.vector_lanes)
        if split:
            y = _lane_split_conv(xp, w, split, (n, oc, oh, ow), (sh, sw, dh, dw, h0, w0),
                                 (rc, rh, rw), ctx.name)
        elif 1 in ctx.packed:
            bn = ctx.packed[1][1]
            ocp = int(w.shape[0]) * bn  # oc rounded up to the block (zero-padded weights)

            def chan(c):  # the input channel of reduction step rc for output channel c
                return rc if groups == 1 else (c // cog) * ic + rc
            y = te.compute((n, ocp, oh, ow), lambda b, c, i, j: te.sum(
                xp[b, chan(c), i * sh + rh * dh, j * sw + rw * dw] *
                w[c // bn, rc, rh + h0, rw + w0, c % bn],
                axis=[rc, rh, rw]), name="anchor_conv2d")
            if ocp != oc:
                full = y
                y = te.compute((n, oc, oh, ow), lambda b, c, i, j: full[b, c, i, j],
                               name=ctx.name + "_unpad")
        else:
            y = te.compute((n, oc, oh, ow), lambda b, c, i, j: te.sum(
                xp[b, rc, i * sh + rh * dh, j * sw + rw * dw] * w[c, rc, rh + h0, rw + w0],
                axis=[rc, rh, rw]), name="anchor_conv2d")
    if len(ins) > 2:
        bias = ins[2]
        y = te.compute(y.shape, lambda b, c, i, j: y[b, c, i, j] + bias[c],
                       name=ctx.name + "_bias")
    return y


def _lane_split_conv(xp, w, split, out_shape, geometry, axes, name):
    """``lane_split``'s kernel: ``anchor_conv2d`` over ``oc * split`` channels, channel
    ``c * split + l`` summing input channels ``l, l + split, ...`` for output channel ``c``
    (the conv2d template's channel vector is then the lanes of one dot product), and a
    ``_lanes`` stage adding each output's ``split`` partial sums."""
    n, oc, oh, ow = out_shape
    sh, sw, dh, dw, h0, w0 = geometry
    _, rh, rw = axes
    rc = te.reduce_axis((0, int(xp.shape[1]) // split), "rc")
    part = te.compute((n, oc * split, oh, ow), lambda b, c, i, j: te.sum(
        xp[b, rc * split + c % split, i * sh + rh * dh, j * sw + rw * dw] *
        w[c // split, rc * split + c % split, rh + h0, rw + w0],
        axis=[rc, rh, rw]), name="anchor_conv2d")
    lane = te.reduce_axis((0, split), "lane")
    return te.compute(out_shape, lambda b, c, i, j: te.sum(part[b, c * split + lane, i, j],
                                                           axis=lane), name=name + "_lanes")


def _lowering_kind_of_conv(attrs):
    """Grouped (not depthwise) convs without packed weights are built by ``conv_nd`` (the
    channel-blocked N-d kernel); packed ones are switched to ``conv2d`` by codegen."""
    if attrs.get("groups", 1) == 1:
        return "conv2d"
    return "depthwise" if attrs.get("groups") == attrs.get("channels") else "conv_nd"


# -- pooling ------------------------------------------------------------------------------

def _pool_supports(attrs, shapes):
    if attrs.get("layout", "NCHW") != "NCHW":
        return f"layout {attrs['layout']} (llvm lowers NCHW pooling)"
    return None


def _pool_rule(kind):
    def rule(attrs, ins, outs, ctx):
        x = ins[0]
        (n, c, oh, ow), dtype = outs[0]
        h, w = int(x.shape[2]), int(x.shape[3])
        kh, kw = attrs["pool_size"]
        sh, sw = attrs["strides"]
        p = tuple(attrs["padding"])
        pt, pl, pb, pr = (p[0], p[1], p[0], p[1]) if len(p) == 2 else p
        pb = max(pb, (oh - 1) * sh + kh - h - pt)
        pr = max(pr, (ow - 1) * sw + kw - w - pl)
        dt = str(x.dtype)
        low = (-np.inf if "float" in dt else np.iinfo(dt).min) if kind == "max" else 0
        combine = te.max if kind == "max" else te.sum
        g = FlatPlane(kh, kw, sh, sw, 1, 1, pt, pl, h, w, oh, ow, ctx.vector_lanes)
        s = _pool_window(x, g, (pt, pl, pb, pr), low, combine, ctx)
        if kind == "max":
            return s
        if attrs.get("count_include_pad"):
            return te.compute(s.shape, lambda *i: s[i] / _const(kh * kw, x.dtype),
                              name=ctx.name)

        def count(i, j):
            h0, w0 = i * sh - pt, j * sw - pl
            ch = te.min(h0 + kh, h) - te.max(h0, 0)
            cw = te.min(w0 + kw, w) - te.max(w0, 0)
            return (ch * cw).astype(x.dtype)
        return te.compute(s.shape, lambda b, ch, i, j: s[b, ch, i, j] / count(i, j),
                          name=ctx.name)
    return rule


#: output positions per plane below which a pool keeps the flat kernel over the blocked one
POOL_BLOCKED_MIN_OUTPUTS = 49


def _pool_window(x, g: FlatPlane, pads, low, combine, ctx):
    """The window reduction of a pool: channel-blocked on small unit-stride planes
    (``window_blocked``), flattened for other unit strides (``flat_window``), else along the
    output rows of the padded input. Measured at 1 thread, interleaved: 3 x 3 over 832 x 7 x 7
    blocked 69 us (max) / 28 us (avg) against flat 93 / 47 and rows 102; over 512 x 14 x 14
    flat 94 us (max) / 43 us (avg) against rows 127 / 133. A pool has too few taps to pay
    for the blocked kernel's two re-layouts elsewhere: 480 x 5 x 5 blocked 16 us, flat 13;
    stride 2 over 256 x 7 x 7 blocked 18 us, rows 7. Stride-2 pools ran alike flat and in
    rows (the phase copy costs what the flat vectors save), so they keep the row kernel."""
    if g.sh == g.sw == 1 and g.oh * g.ow >= POOL_BLOCKED_MIN_OUTPUTS \
            and wants_blocked(g, int(x.shape[1])):
        return blocked_window(blocked_planes(x, g, low, ctx.name), g, int(x.shape[1]),
                              combine, lambda v, *_: v, "anchor_pool")
    if g.sh == g.sw == 1:
        return flat_window(flat_planes(x, g, low, ctx.name), g, combine, lambda v, *_: v,
                           "anchor_pool")
    (n, c), (pt, pl, pb, pr) = x.shape[:2], pads
    xp = topi.nn.pad(x, [0, 0, pt, pl], [0, 0, pb, pr], pad_value=low,
                     name="pad_" + ctx.name) if any(pads) else x
    rh, rw = te.reduce_axis((0, g.kh), "rh"), te.reduce_axis((0, g.kw), "rw")
    return te.compute((n, c, g.oh, g.ow), lambda b, ch, i, j: combine(
        xp[b, ch, i * g.sh + rh, j * g.sw + rw], axis=[rh, rw]), name="anchor_pool")


register("max_pool2d", "pool", supports=_pool_supports)(_pool_rule("max"))
register("avg_pool2d", "pool", supports=_pool_supports)(_pool_rule("avg"))


def _global_rule(kind):
    def rule(attrs, ins, outs, ctx):
        x = ins[0]
        n, c, h, w = (int(d) for d in x.shape)
        rh, rw = te.reduce_axis((0, h), "rh"), te.reduce_axis((0, w), "rw")
        if kind == "max":
            return te.compute((n, c, 1, 1), lambda b, ch, i, j: te.max(
                x[b, ch, rh, rw], axis=[rh, rw]), name="anchor_gpool")
        s = te.compute((n, c, 1, 1), lambda b, ch, i, j: te.sum(
            x[b, ch, rh, rw], axis=[rh, rw]), name="anchor_gpool")
        return te.compute(s.shape, lambda *i: s[i] / _const(h * w, x.dtype), name=ctx.name)
    return rule


register("global_max_pool2d", "reduce", supports=_pool_supports)(_global_rule("max"))
register("global_avg_pool2d", "reduce", supports=_pool_supports)(_global_rule("avg"))


def kind_of(node) -> str:
    """The schedule template a group mastered by ``node`` uses."""
    if node.op.name == "conv2d":
        return _lowering_kind_of_conv(node.attrs)
    if node.op.name == "conv_integer":
        return lowering_quant.conv_kind(node.attrs)
    rule = LOWERINGS.get(node.op.name)
    return rule.kind if rule is not None else "injective"


def packed_conv_kind(node, kind: str) -> str:
    """The template of a conv2d group whose weights are packed at load: grouped convs use
    the blocked conv2d template, but for those ``columns_packed`` takes (its weight in the
    ``conv_nd_{G}g`` layout); depthwise keeps its own."""
    if kind == "depthwise" or columns_packed(node.attrs):
        return kind
    return "conv2d"


def packed_input_shape(layout: str, shape, block: int) -> tuple:
    return packed_shape(layout, tuple(shape), block)


# the ONNX-family rules live next door; importing them registers them here
from . import (lowering_math, lowering_nn, lowering_quant, lowering_softmax,  # noqa: E402,F401
               lowering_transform)
