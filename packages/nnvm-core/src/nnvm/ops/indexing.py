"""Indexing, scattering, sorting and generator ops with ONNX semantics.

Shape-like ONNX inputs (TopK's K, Tile's repeats, Expand's shape, CumSum's axis) are
attributes here: the importer folds the constant, so every static shape stays inferable.
Ops whose output size depends on data values (``non_zero``, ``compress``, ``unique``,
``range``) leave their output shape unknown and carry ``TDynamicShape=True``; the reference
interpreter runs them, static backends cannot.
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ir import NodeEntry
from ..op import OpPattern, OpSet
from ..params import Param
from .common import first_input_shape, op, same_dtype

defs = OpSet("indexing")

INJ, OPAQUE = OpPattern.INJECTIVE, OpPattern.OPAQUE


def _axis(axis: int, ndim: int, what: str = "axis") -> int:
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise ShapeError(f"{what} {axis} is out of range for rank {ndim}; "
                         f"expected -{ndim} <= {what} < {ndim}")
    return axis % max(ndim, 1)


def _dtype_of(index):
    """Dtype rule: every output takes input ``index``'s dtype."""
    def rule(attrs, ins, outs):
        return ins, [ins[index]] * len(outs)
    return rule


def _known(*shapes):
    return all(s is not None for s in shapes)


def _dynamic(attrs, ins, outs):
    """Shape rule of data-dependent ops: outputs stay unknown until run time."""
    return ins, outs


# -- gather family ------------------------------------------------------------------------------

def _gather_shape(attrs, ins, outs):
    d, i = ins
    if not _known(d, i):
        return ins, outs
    ax = _axis(attrs["axis"], len(d))
    return ins, [tuple(d[:ax]) + tuple(i) + tuple(d[ax + 1:])]


def _norm_index(idx, size):
    idx = idx.astype(np.int64, copy=False)
    out = np.where(idx < 0, idx + size, idx)
    if out.size and (out.min() < 0 or out.max() >= size):
        from ..errors import ExecutionError
        raise ExecutionError(f"index out of range: indices must lie in [-{size}, {size - 1}]; "
                             f"got [{idx.min()}, {idx.max()}]")
    return out


def _gather_ref(attrs, d, i):
    ax = attrs["axis"] % d.ndim
    return np.take(d, _norm_index(i, d.shape[ax]), axis=ax)


def _gather_grad(n, og):
    return [op("_gather_backward", og[0], n.inputs[1], n.inputs[0], axis=n.attrs["axis"]), None]


def _gather_backward_ref(attrs, og, i, d):
    ax = attrs["axis"] % d.ndim
    idx = _norm_index(i, d.shape[ax])
    out = np.zeros(d.shape, dtype=og.dtype)
    moved = np.moveaxis(out, ax, 0)
    g = og.reshape(d.shape[:ax] + (idx.size,) + d.shape[ax + 1:])
    np.add.at(moved, idx.reshape(-1), np.moveaxis(g, ax, 0))
    return out


_AXIS0 = Param("axis", "int", 0, "the axis indexed")
defs.op_once("gather", doc="ONNX Gather: take slices of data along axis at the given indices "
              "(negative indices count from the end).", inputs=("data", "indices"),
              params=[_AXIS0], shape=_gather_shape, dtype=_dtype_of(0), reference=_gather_ref,
              gradient=_gather_grad, pattern=INJ, support_level=3)
defs.op_once("_gather_backward", doc="Gradient of gather: out_grad scatter-added back.",
              inputs=("out_grad", "indices", "data"), params=[_AXIS0],
              shape=lambda attrs, ins, outs: (ins, [ins[2]]), dtype=_dtype_of(0),
              reference=_gather_backward_ref, pattern=OPAQUE,
              FIgnoreInputs=lambda attrs: [2])


def _gather_elements_shape(attrs, ins, outs):
    d, i = ins
    if _known(d, i) and len(d) != len(i):
        raise ShapeError(f"data and indices must have the same rank; got {d} and {i}")
    return ins, [i]


def _gather_elements_ref(attrs, d, i):
    ax = attrs["axis"] % d.ndim
    return np.take_along_axis(d, _norm_index(i, d.shape[ax]), axis=ax)


def _gather_elements_grad(n, og):
    d, i = n.inputs
    return [op("scatter_elements", op("zeros_like", d), i, og[0], axis=n.attrs["axis"],
               reduction="add"), None]


defs.op_once("gather_elements", doc="ONNX GatherElements: out[i][j] = data[index[i][j]][j] "
              "(for axis 0), numpy take_along_axis.", inputs=("data", "indices"),
              params=[_AXIS0], shape=_gather_elements_shape, dtype=_dtype_of(0),
              reference=_gather_elements_ref, gradient=_gather_elements_grad, pattern=INJ,
              support_level=3)


def _gather_nd_shape(attrs, ins, outs):
    d, i = ins
    if not _known(d, i):
        return ins, outs
    b = attrs["batch_dims"]
    if i[-1] > len(d) - b:
        raise ShapeError(f"indices.shape[-1] = {i[-1]} exceeds rank(data) - batch_dims = "
                         f"{len(d) - b}")
    return ins, [tuple(i[:-1]) + tuple(d[b + i[-1]:])]


def _gather_nd_ref(attrs, d, i):
    b = attrs["batch_dims"]
    if b == 0 and i.shape[-1] > 0:  # one fancy index, no batch axis or negative-index
        # pass unless needed: the general path cost ~3x on SSDlite's host tail
        ii = np.asarray(i, dtype=np.int64)
        m = ii.shape[-1]
        if (ii < 0).any():
            ii = np.where(ii < 0, ii + np.array(d.shape[:m]), ii)
        return d[tuple(np.moveaxis(ii, -1, 0))].reshape(i.shape[:-1] + d.shape[m:])
    bshape = d.shape[:b]
    nb = int(np.prod(bshape, dtype=np.int64))
    dd = d.reshape((nb,) + d.shape[b:])
    ii = i.reshape((nb,) + i.shape[b:]).astype(np.int64)
    m = ii.shape[-1]
    ii = np.where(ii < 0, ii + np.array(d.shape[b:b + m]), ii)
    batch = np.arange(nb).reshape((nb,) + (1,) * (ii.ndim - 2))
    out = dd[(batch,) + tuple(ii[..., k] for k in range(m))]
    return out.reshape(i.shape[:-1] + d.shape[b + m:])


defs.op_once("gather_nd", doc="ONNX GatherND: the last indices axis indexes the leading "
              "data axes after batch_dims.", inputs=("data", "indices"),
              params=[Param("batch_dims", "int", 0, "leading axes shared by data and indices")],
              shape=_gather_nd_shape, dtype=_dtype_of(0), reference=_gather_nd_ref,
              pattern=INJ, support_level=3)


# -- scatter family -----------------------------------------------------------------------------

_REDUCTIONS = ("none", "add", "mul", "max", "min")
_UFUNC = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}
_REDUCTION = Param("reduction", "str", "none", "how duplicates combine", _REDUCTIONS)


def _scatter_elements_ref(attrs, d, i, u):
    ax = attrs["axis"] % d.ndim
    idx = _norm_index(i, d.shape[ax])
    out = d.copy()
    grid = list(np.indices(i.shape, sparse=True))
    grid[ax] = idx
    key = tuple(grid)
    if attrs["reduction"] == "none":
        out[key] = u
    else:
        _UFUNC[attrs["reduction"]].at(out, tuple(np.broadcast_arrays(*key)), u)
    return out


def _scatter_nd_ref(attrs, d, i, u):
    out = d.copy()
    m = i.shape[-1]
    ii = i.reshape(-1, m).astype(np.int64)
    ii = np.where(ii < 0, ii + np.array(d.shape[:m]), ii)
    uu = u.reshape((ii.shape[0],) + d.shape[m:])
    key = tuple(ii[:, k] for k in range(m))
    if attrs["reduction"] == "none":
        out[key] = uu
    else:
        _UFUNC[attrs["reduction"]].at(out, key, uu)
    return out


def _scatter_dtype(attrs, ins, outs):
    t = next((x for x in (ins[0], ins[2], outs[0]) if x is not None), None)
    return [t, ins[1], t], [t]


defs.op_once("scatter_elements", doc="ONNX ScatterElements (and Scatter): write updates into a "
              "copy of data at per-element indices along axis; duplicates combine by "
              "reduction.", inputs=("data", "indices", "updates"),
              params=[_AXIS0, _REDUCTION], shape=first_input_shape, dtype=_scatter_dtype,
              reference=_scatter_elements_ref, pattern=OPAQUE, support_level=3)
defs.op_once("scatter_nd", doc="ONNX ScatterND: write update slices at the index tuples of "
              "the last indices axis.", inputs=("data", "indices", "updates"),
              params=[_REDUCTION], shape=first_input_shape, dtype=_scatter_dtype,
              reference=_scatter_nd_ref, pattern=OPAQUE, support_level=3)


# -- sorting ------------------------------------------------------------------------------------

def _topk_shape(attrs, ins, outs):
    d = ins[0]
    if d is None:
        return ins, outs
    ax = _axis(attrs["axis"], len(d))
    if attrs["k"] > d[ax]:
        raise ShapeError(f"k = {attrs['k']} exceeds the axis size {d[ax]}")
    s = tuple(d[:ax]) + (attrs["k"],) + tuple(d[ax + 1:])
    return ins, [s, s]


def _topk_ref(attrs, d):
    ax, k = attrs["axis"] % d.ndim, attrs["k"]
    key = -d if attrs["largest"] else d
    if d.dtype.kind == "u" and attrs["largest"]:
        key = -d.astype(np.int64) if d.dtype.itemsize < 8 else np.iinfo(d.dtype).max - d
    idx = np.argsort(key, axis=ax, kind="stable")  # ties: the lower index first (ONNX)
    idx = np.take(idx, np.arange(k), axis=ax)
    return np.take_along_axis(d, idx, axis=ax), idx.astype(np.int64)


def _topk_grad(n, og):
    d = n.inputs[0]
    idx = NodeEntry(n, 1, 0)
    return [op("scatter_elements", op("zeros_like", d), idx, og[0], axis=n.attrs["axis"],
               reduction="add")]


defs.op_once("topk", doc="ONNX TopK: the k largest (or smallest) values along axis and their "
              "int64 indices; equal values keep the lower index first.", inputs=("data",),
              outputs=("values", "indices"),
              params=[Param("k", "int", doc="how many"), Param("axis", "int", -1, "axis"),
                      Param("largest", "bool", True, "largest (True) or smallest"),
                      Param("sorted", "bool", True, "outputs sorted (always true here)")],
              shape=_topk_shape,
              dtype=lambda attrs, ins, outs: (ins, [ins[0], "int64"]), reference=_topk_ref,
              gradient=_topk_grad, pattern=OPAQUE, support_level=4)


def _cum_ref(fn):
    def ref(attrs, x):
        ax = attrs["axis"] % x.ndim
        y = np.flip(x, ax) if attrs["reverse"] else x
        out = fn(y, axis=ax, dtype=x.dtype)
        if attrs["exclusive"]:
            ident = 0 if fn is np.cumsum else 1
            pad = np.full_like(np.take(out, [0], axis=ax), ident)
            out = np.concatenate([pad, np.take(out, np.arange(out.shape[ax] - 1), axis=ax)],
                                 axis=ax)
        return np.flip(out, ax) if attrs["reverse"] else out
    return ref


def _cumsum_grad(n, og):
    a = n.attrs
    return [op("cumsum", og[0], axis=a["axis"], exclusive=a["exclusive"],
               reverse=not a["reverse"])]


_CUM_PARAMS = [Param("axis", "int", doc="axis"),
               Param("exclusive", "bool", False, "exclude the current element"),
               Param("reverse", "bool", False, "accumulate from the end")]
defs.op_once("cumsum", doc="Cumulative sum along axis (ONNX CumSum).", inputs=("data",),
              params=_CUM_PARAMS, shape=first_input_shape, dtype=same_dtype,
              reference=_cum_ref(np.cumsum), gradient=_cumsum_grad, pattern=OPAQUE,
              support_level=4)
defs.op_once("cumprod", doc="Cumulative product along axis (ONNX CumProd).", inputs=("data",),
              params=_CUM_PARAMS, shape=first_input_shape, dtype=same_dtype,
              reference=_cum_ref(np.cumprod), pattern=OPAQUE, support_level=4)


# -- generators and broadcasting ----------------------------------------------------------------

def _one_hot_shape(attrs, ins, outs):
    i = ins[0]
    if i is None:
        return ins, outs
    ax = _axis(attrs["axis"], len(i) + 1)
    s = list(i)
    s.insert(ax, attrs["depth"])
    return [i, (2,)], [tuple(s)]


def _one_hot_ref(attrs, i, values):
    depth = attrs["depth"]
    idx = i.astype(np.int64)
    idx = np.where(idx < 0, idx + depth, idx)
    ax = attrs["axis"] % (i.ndim + 1)
    hot = np.expand_dims(idx, ax) == np.arange(depth).reshape(
        (1,) * ax + (depth,) + (1,) * (i.ndim - ax))
    return np.where(hot, values[1], values[0]).astype(values.dtype)


defs.op_once("one_hot", doc="ONNX OneHot: values[1] where the position along the new axis "
              "equals the index, values[0] elsewhere.", inputs=("indices", "values"),
              params=[Param("depth", "int", doc="size of the new axis"),
                      Param("axis", "int", -1, "where the new axis goes")],
              shape=_one_hot_shape,
              dtype=lambda attrs, ins, outs: (ins, [ins[1]]), reference=_one_hot_ref,
              pattern=INJ, support_level=4)


def _arange_len(start, stop, step):
    return max(int(np.ceil((stop - start) / step)), 0)


defs.op_once("arange", doc="Evenly spaced values in [start, stop) (static shape).",
              inputs=(), params=[Param("start", "float", 0.0, "first value"),
                                 Param("stop", "float", doc="end (exclusive)"),
                                 Param("step", "float", 1.0, "spacing"),
                                 Param("dtype", "dtype", "float32", "output dtype")],
              shape=lambda attrs, ins, outs: (ins, [(_arange_len(
                  attrs["start"], attrs["stop"], attrs["step"]),)]),
              dtype=lambda attrs, ins, outs: (ins, [attrs["dtype"]]),
              reference=lambda attrs: (attrs["start"] + attrs["step"] * np.arange(
                  _arange_len(attrs["start"], attrs["stop"], attrs["step"]))).astype(
                  attrs["dtype"]),
              pattern=INJ, support_level=4)


def _range_ref(attrs, start, limit, delta):
    n = _arange_len(start.item(), limit.item(), delta.item())
    return (start + delta * np.arange(n)).astype(start.dtype)


defs.op_once("range", doc="ONNX Range with tensor inputs: the length depends on their values "
              "(dynamic shape; fold constant inputs into arange instead).",
              inputs=("start", "limit", "delta"), shape=_dynamic, dtype=same_dtype,
              reference=_range_ref, pattern=OPAQUE, TDynamicShape=True, support_level=4)


def _tile_shape(attrs, ins, outs):
    d, reps = ins[0], attrs["reps"]
    if d is None:
        return ins, outs
    if len(reps) != len(d):
        raise ShapeError(f"reps needs one entry per axis: rank {len(d)}, got {len(reps)}")
    return ins, [tuple(a * r for a, r in zip(d, reps))]


def _tile_grad(n, og):
    return [op("_tile_backward", og[0], reps=n.attrs["reps"])]


def _tile_backward_ref(attrs, og):
    reps = attrs["reps"]
    shape = []
    for r, s in zip(reps, og.shape):
        shape += [r, s // r]
    return og.reshape(shape).sum(axis=tuple(range(0, 2 * len(reps), 2)))


defs.op_once("tile", doc="Repeat the tensor reps[i] times along axis i (ONNX Tile).",
              inputs=("data",), params=[Param("reps", "ints", doc="repeats per axis")],
              shape=_tile_shape, dtype=same_dtype,
              reference=lambda attrs, x: np.tile(x, attrs["reps"]), gradient=_tile_grad,
              pattern=INJ, support_level=4)
defs.op_once("_tile_backward", doc="Gradient of tile: sum of the tiles.", inputs=("out_grad",),
              params=[Param("reps", "ints", doc="repeats per axis")],
              shape=lambda attrs, ins, outs: (ins, outs if ins[0] is None else [tuple(
                  s // r for s, r in zip(ins[0], attrs["reps"]))]),
              dtype=same_dtype, reference=_tile_backward_ref, pattern=OpPattern.COMM_REDUCE)


def _expand_shape(attrs, ins, outs):
    if ins[0] is None:
        return ins, outs
    from .common import broadcast_shapes
    return ins, [broadcast_shapes(tuple(ins[0]), tuple(attrs["shape"]))]


defs.op_once("expand", doc="ONNX Expand: broadcast data against `shape` (bidirectional: a 1 in "
              "shape keeps the data's size).", inputs=("data",),
              params=[Param("shape", "ints", doc="target shape (broadcast with data's)")],
              shape=_expand_shape, dtype=same_dtype,
              reference=lambda attrs, x: np.array(np.broadcast_to(
                  x, np.broadcast_shapes(x.shape, tuple(attrs["shape"])))),
              gradient=lambda n, og: [op("collapse_sum_like", og[0], n.inputs[0])],
              pattern=OpPattern.BROADCAST, support_level=4)


def _trilu_ref(attrs, x):
    fn = np.triu if attrs["upper"] else np.tril
    if x.ndim < 2:
        return x.copy()
    return fn(x, attrs["k"])


defs.op_once("trilu", doc="ONNX Trilu: keep the upper (or lower) triangle from diagonal k of the "
              "last two axes, zero the rest.", inputs=("data",),
              params=[Param("upper", "bool", True, "upper triangle"),
                      Param("k", "int", 0, "diagonal offset")],
              shape=first_input_shape, dtype=same_dtype, reference=_trilu_ref,
              gradient=lambda n, og: [op("trilu", og[0], **n.attrs)], pattern=INJ,
              support_level=4)


def _eye_like_ref(attrs, x):
    dt = attrs["dtype"] or x.dtype
    return np.eye(x.shape[0], x.shape[1], k=attrs["k"], dtype=dt)


defs.op_once("eye_like", doc="ONNX EyeLike: ones on diagonal k of a 2-D tensor shaped like the "
              "input.", inputs=("data",),
              params=[Param("k", "int", 0, "diagonal offset"),
                      Param("dtype", "str", "", "output dtype; empty = the input's")],
              shape=first_input_shape,
              dtype=lambda attrs, ins, outs: (ins, [attrs["dtype"] or ins[0]]),
              reference=_eye_like_ref, FIgnoreInputs=lambda attrs: [0], pattern=INJ,
              support_level=4)


def _reverse_sequence_ref(attrs, x, lens):
    b, t = attrs["batch_axis"], attrs["time_axis"]
    out = x.copy()
    xm, om = np.moveaxis(x, (b, t), (0, 1)), np.moveaxis(out, (b, t), (0, 1))
    for i, n in enumerate(lens.astype(np.int64)):
        om[i, :n] = xm[i, :n][::-1]
    return out


defs.op_once("reverse_sequence", doc="ONNX ReverseSequence: reverse the first lens[b] steps "
              "of every batch entry along time_axis.", inputs=("data", "sequence_lens"),
              params=[Param("batch_axis", "int", 1, "batch axis"),
                      Param("time_axis", "int", 0, "time axis")],
              shape=first_input_shape, dtype=_dtype_of(0), reference=_reverse_sequence_ref,
              pattern=OPAQUE, support_level=4)


# -- data-dependent output shapes ---------------------------------------------------------------

defs.op_once("non_zero", doc="ONNX NonZero: int64 indices (ndim, nnz) of the non-zero elements "
              "in row-major order. Output shape known only at run time.", inputs=("data",),
              shape=_dynamic, dtype=lambda attrs, ins, outs: (ins, ["int64"]),
              reference=lambda attrs, x: np.array(np.nonzero(x), dtype=np.int64).reshape(
                  x.ndim, -1), pattern=OPAQUE, TDynamicShape=True, support_level=4)


def _compress_ref(attrs, x, cond):
    cond = cond.astype(bool)
    if attrs["axis"] is None:
        flat = x.reshape(-1)
        return flat[np.nonzero(cond[:flat.size])[0]]
    ax = attrs["axis"] % x.ndim
    sel = np.nonzero(cond[:x.shape[ax]])[0]
    return np.take(x, sel, axis=ax)


defs.op_once("compress", doc="ONNX Compress: keep slices where condition is true (flattened "
              "when axis is None). Output shape known only at run time.",
              inputs=("data", "condition"),
              params=[Param("axis", "int_or_none", None, "axis; None flattens")],
              shape=_dynamic, dtype=_dtype_of(0), reference=_compress_ref, pattern=OPAQUE,
              TDynamicShape=True, support_level=4)


def _unique_ref(attrs, x):
    ax = attrs["axis"]
    if ax is None:
        vals, first, inverse, counts = np.unique(x.reshape(-1), return_index=True,
                                                 return_inverse=True, return_counts=True)
    else:
        ax %= x.ndim
        vals, first, inverse, counts = np.unique(x, axis=ax, return_index=True,
                                                 return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    if not attrs["sorted"]:  # order of first occurrence
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        vals = vals[order] if ax is None else np.take(vals, order, axis=ax)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    i64 = np.int64
    return vals, first.astype(i64), inverse.astype(i64), counts.astype(i64)


defs.op_once("unique", doc="ONNX Unique: the unique values (or slices along axis), the index "
              "of each one's first occurrence, the inverse map and the counts. Output shapes "
              "known only at run time.", inputs=("data",),
              outputs=("output", "indices", "inverse_indices", "counts"),
              params=[Param("axis", "int_or_none", None, "axis; None flattens"),
                      Param("sorted", "bool", True, "sort the unique values")],
              shape=_dynamic,
              dtype=lambda attrs, ins, outs: (ins, [ins[0], "int64", "int64", "int64"]),
              reference=_unique_ref, pattern=OPAQUE, TDynamicShape=True, support_level=4)

