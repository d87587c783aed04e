"""SimplifyAlgebra: a rule table of identities that remove or merge no-op data movement.

Frontends emit a lot of glue: ``copy``, ``x * 1``, reshape after reshape, a transpose undone
by the next one, a cast to the dtype the tensor already has, split immediately concatenated
back. Each rule below is one row of data (name, pattern, replacement), applied bottom-up to a
fixed point by ``nnvm.rewrite``; adding an identity is adding a row.
"""

from __future__ import annotations

import numpy as np

from nnvm.dtypes import STRING, np_dtype
from nnvm.errors import NNVMError
from nnvm.graph_attrs import DERIVED
from nnvm.ir import NodeEntry
from nnvm.ops.common import op
from nnvm.pass_manager import PassSet
from nnvm.rewrite import P, Match, Rule, X, rewrite

PASSES = PassSet()


def _scalar_is(value: float):
    return lambda attrs: float(attrs.get("scalar", np.nan)) == value


def _axes(attrs, ndim: int) -> tuple[int, ...]:
    axes = tuple(attrs.get("axes") or ())
    return tuple(a % ndim for a in axes) if axes else tuple(reversed(range(ndim)))


def _transpose_transpose(m: Match) -> NodeEntry | None:
    shape = m.shape("x")
    if shape is None:
        return None
    inner, outer = _axes(m.attrs("inner"), len(shape)), _axes(m.root.attrs, len(shape))
    axes = tuple(inner[a] for a in outer)
    if axes == tuple(range(len(shape))):
        return m["x"]
    return op("transpose", m["x"], axes=axes, node_name=m.root.name)


def _identity_transpose(m: Match) -> NodeEntry | None:
    shape = m.shape("x")
    if shape is None or _axes(m.root.attrs, len(shape)) != tuple(range(len(shape))):
        return None
    return m["x"]


def _same_shape(m: Match) -> NodeEntry | None:
    """reshape / flatten / squeeze / expand_dims that leave the shape unchanged."""
    s_in, s_out = m.shape("x"), m.shape(NodeEntry(m.root, 0))
    return m["x"] if s_in is not None and s_in == s_out else None


def _reshape_reshape(m: Match) -> NodeEntry | None:
    final = m.shape(NodeEntry(m.root, 0))
    if final is None:
        return None
    return op("reshape", m["x"], shape=final, node_name=m.root.name)


def _cast_cast(m: Match) -> NodeEntry | None:
    """cast(cast(x, a), b) == cast(x, b) when the first cast loses nothing."""
    src, mid = m.dtype("x"), m.attrs("inner").get("dtype")
    if src is None or mid is None or STRING in (src, mid):
        return None  # text does not round-trip through a cast (and NumPy can_cast rejects it)
    try:
        lossless = np.can_cast(np_dtype(src), np_dtype(mid), "safe")
    except NNVMError:  # an extended dtype without ml_dtypes installed: leave the casts be
        return None
    if not lossless:
        return None
    return op("cast", m["x"], dtype=m.root.attrs["dtype"], node_name=m.root.name)


def _same_dtype(m: Match) -> NodeEntry | None:
    return m["x"] if m.dtype("x") is not None and m.dtype("x") == m.root.attrs["dtype"] else None


def _split_concat(m: Match) -> NodeEntry | None:
    """concatenate(split(x)[0], ..., split(x)[n-1]) on the same axis == x."""
    ins = m.root.inputs
    src = ins[0].node
    if src.op is None or src.op.name != "split" or len(ins) != src.num_outputs:
        return None
    if any(e.node is not src or e.index != k for k, e in enumerate(ins)):
        return None
    shape = m.shape(src.inputs[0])
    if shape is None:
        return None
    same_axis = src.attrs.get("axis", 1) % len(shape) == m.root.attrs.get("axis", 1) % len(shape)
    return src.inputs[0] if same_axis else None


def _identity(m: Match) -> NodeEntry:
    return m["x"]


RULES = [
    Rule("copy(x) -> x", P("copy", X("x")), _identity),
    Rule("x * 1 -> x", P("__mul_scalar__", X("x"), where=_scalar_is(1.0)), _identity),
    Rule("x / 1 -> x", P("__div_scalar__", X("x"), where=_scalar_is(1.0)), _identity),
    Rule("x + 0 -> x", P("__add_scalar__", X("x"), where=_scalar_is(0.0)), _identity),
    Rule("x - 0 -> x", P("__sub_scalar__", X("x"), where=_scalar_is(0.0)), _identity),
    Rule("x ** 1 -> x", P("__pow_scalar__", X("x"), where=_scalar_is(1.0)), _identity),
    Rule("-(-x) -> x", P("negative", P("negative", X("x"))), _identity),
    Rule("dropout(x) -> x", P("dropout", X("x")), _identity),
    Rule("transpose(transpose(x)) -> transpose(x)",
         P("transpose", P("transpose", X("x"), name="inner")), _transpose_transpose),
    Rule("transpose(x, identity) -> x", P("transpose", X("x")), _identity_transpose),
    Rule("reshape(reshape(x)) -> reshape(x)",
         P("reshape", P(("reshape", "flatten"), X("x"))), _reshape_reshape),
    Rule("reshape(x) to its own shape -> x",
         P(("reshape", "flatten", "squeeze", "expand_dims"), X("x")), _same_shape),
    Rule("cast(cast(x)) -> cast(x)", P("cast", P("cast", X("x"), name="inner")), _cast_cast),
    Rule("cast(x) to its own dtype -> x", P("cast", X("x")), _same_dtype),
    Rule("concatenate(split(x)) -> x", P("concatenate"), _split_concat),
]


@PASSES.define("SimplifyAlgebra", invalidates=DERIVED, opt_level=1)
def simplify_algebra(graph):
    """Apply the identities of ``RULES`` bottom-up to a fixed point.

    Rules needing a shape or dtype (reshape to the same shape, cast to the same dtype) use the
    graph's ``shape``/``dtype`` when present and infer fresh nodes locally; without them those
    rules simply do not fire.
    """
    return rewrite(graph, RULES)
