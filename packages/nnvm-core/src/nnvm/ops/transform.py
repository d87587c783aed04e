"""Shape, layout and dtype transforms, slicing and tensor creation.

flatten, reshape (with MXNet's special codes), reshape_like, concatenate, split, transpose,
expand_dims, squeeze, broadcast_to, strided_slice, pad, take, cast, cast_like, clip, and the
input-free creators full, zeros and ones. Adjoints that are not compositions of forward ops
(``_split_like``, ``_strided_slice_backward``, ``_take_backward``) are full records too.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import AttrError, ShapeError, TypeInferenceError
from ..op import OpPattern, OpSet
from ..params import Param, parse_value
from .common import (broadcast_shapes, inplace_first, op, outputs, same_dtype, same_shape,
                     sum_to_like, to_dtype)

defs = OpSet("transform")

INJ, E = OpPattern.INJECTIVE, OpPattern.ELEMWISE
_INT_MAX = 2 ** 31 - 1


def _expect(cond: bool, msg: str) -> None:
    if not cond:
        raise ShapeError(msg)


def _reshape_back(n, og):
    return [op("reshape_like", og[0], n.inputs[0])]


def _view(**kw):
    """Attributes shared by ops whose output is a re-view of input 0's buffer."""
    return dict(inplace=inplace_first, FInplaceIdentity=lambda attrs: [True], pattern=INJ, **kw)


def _size(shape) -> int:
    return math.prod(shape)


# -- flatten, reshape, reshape_like ----------------------------------------------------------

def _flatten_shape(attrs, ins, outs):
    if ins[0] is None:
        return ins, outs
    _expect(len(ins[0]) >= 1, "data must have at least 1 dimension; got a scalar")
    return ins, [(ins[0][0], _size(ins[0][1:]))]


defs.op("flatten", doc="Collapse every axis but the first: (N, d1, d2, ...) -> "
            "(N, d1*d2*...).", shape=_flatten_shape, dtype=same_dtype,
            reference=lambda attrs, x: x.reshape(x.shape[0], -1), gradient=_reshape_back,
            support_level=1, **_view())


def reshape_target(src: tuple[int, ...], spec: tuple[int, ...]) -> tuple[int, ...]:
    """Output shape of MXNet/NNVM ``reshape``: 0 copies a dim, -1 infers one, -2 copies the
    rest, -3 merges two dims, -4 splits one into the next two values (one may be -1).

    Raises:
        ShapeError: the spec is malformed or the sizes do not match.
    """
    out: list[int] = []
    i, k, infer = 0, 0, None

    def src_dim(j: int) -> int:
        if j >= len(src):
            raise ShapeError(f"reshape spec {spec} reads input dimension {j}, but the input "
                             f"{src} has only {len(src)}")
        return src[j]

    while k < len(spec):
        s = spec[k]
        if s == 0:
            out.append(src_dim(i))
            i += 1
        elif s == -1:
            _expect(infer is None, f"reshape spec {spec} has more than one -1")
            infer = len(out)
            out.append(-1)
            i += 1
        elif s == -2:
            out.extend(src[i:])
            i = len(src)
        elif s == -3:
            out.append(src_dim(i) * src_dim(i + 1))
            i += 2
        elif s == -4:
            _expect(k + 2 < len(spec), f"reshape spec {spec}: -4 must be followed by two sizes")
            d = src_dim(i)
            a, b = spec[k + 1], spec[k + 2]
            _expect(not (a == -1 and b == -1), f"reshape spec {spec}: -4 split has two -1")
            a = d // b if a == -1 else a
            b = d // a if b == -1 else b
            _expect(a * b == d, f"reshape spec {spec}: -4 cannot split dimension {d} into "
                                f"{spec[k + 1]} x {spec[k + 2]}")
            out += [a, b]
            i += 1
            k += 2
        elif s > 0:
            out.append(s)
            i += 1
        else:
            raise ShapeError(f"reshape spec {spec} has invalid code {s}; valid: positive "
                             f"sizes, 0, -1, -2, -3, -4")
        k += 1
    if infer is not None:
        rest = _size(d for j, d in enumerate(out) if j != infer)
        _expect(rest > 0 and _size(src) % rest == 0,
                f"cannot reshape {src} ({_size(src)} elements) with spec {spec}")
        out[infer] = _size(src) // rest
    _expect(_size(out) == _size(src), f"cannot reshape {src} ({_size(src)} elements) to "
                                      f"{tuple(out)} ({_size(out)} elements)")
    return tuple(out)


def _reshape_shape(attrs, ins, outs):
    if ins[0] is None:
        return ins, outs
    return ins, [reshape_target(tuple(ins[0]), tuple(attrs["shape"]))]


defs.op("reshape", doc="Reshape; the target may use MXNet's codes 0 (copy), -1 (infer), "
            "-2 (copy rest), -3 (merge two), -4 (split one in two).",
            params=[Param("shape", "ints", doc="target shape with special codes")],
            shape=_reshape_shape, dtype=same_dtype,
            reference=lambda attrs, x: x.reshape(reshape_target(x.shape, attrs["shape"])),
            gradient=_reshape_back, support_level=3, **_view())


def _reshape_like_shape(attrs, ins, outs):
    data, like = ins
    if like is None:
        return ins, outs
    if data is not None:
        _expect(_size(data) == _size(like), f"data {data} ({_size(data)} elements) cannot "
                                            f"take the shape of {like} ({_size(like)})")
    return ins, [tuple(like)]


def _reshape_like_dtype(attrs, ins, outs):
    t = ins[0] if ins[0] is not None else outs[0]
    return [t, ins[1]], [t]


defs.op("reshape_like", doc="Reshape data to the shape of `shape_like` (same size).",
            inputs=("data", "shape_like"), shape=_reshape_like_shape, dtype=_reshape_like_dtype,
            reference=lambda attrs, x, like: x.reshape(like.shape),
            gradient=lambda n, og: [op("reshape_like", og[0], n.inputs[0]), None],
            FIgnoreInputs=lambda attrs: [1], support_level=4, **_view())


# -- concatenate and split ------------------------------------------------------------------------

def _norm_axis(axis: int, ndim: int) -> int:
    _expect(-ndim <= axis < ndim, f"axis {axis} is out of range for a {ndim}-D input")
    return axis % ndim


def _concat_shape(attrs, ins, outs):
    known = [s for s in ins if s is not None]
    ref = known[0] if known else outs[0]
    if ref is None:
        return ins, outs
    ax = _norm_axis(attrs["axis"], len(ref))
    for j, s in enumerate(ins):
        if s is None:
            continue
        _expect(len(s) == len(ref) and all(a == b for d, (a, b) in enumerate(zip(s, ref))
                                           if d != ax),
                f"input {j} has shape {s}; every input must match {ref} except on axis {ax}")
    ins, outs = list(ins), list(outs)
    missing = [j for j, s in enumerate(ins) if s is None]
    if not missing:
        out = tuple(ref[:ax]) + (sum(s[ax] for s in ins),) + tuple(ref[ax + 1:])
        if outs[0] is not None and tuple(outs[0]) != out:
            raise ShapeError(f"output has shape {outs[0]}; expected {out}")
        outs[0] = out
    elif len(missing) == 1 and outs[0] is not None:  # one input follows from the output
        rest = outs[0][ax] - sum(s[ax] for s in ins if s is not None)
        _expect(rest > 0, f"output {outs[0]} is too small for the known inputs")
        ins[missing[0]] = tuple(outs[0][:ax]) + (rest,) + tuple(outs[0][ax + 1:])
    return ins, outs


def _concat_grad(n, og):
    k = len(n.inputs)
    node_inputs = [og[0], *n.inputs]
    pieces = op("_split_like", *node_inputs, axis=n.attrs["axis"], num_outputs=k).node
    return [pieces[i] for i in range(k)]


defs.op("concatenate", doc="Join tensors along axis (all other axes must match).",
            inputs=lambda attrs: [f"arg{i}" for i in range(attrs["num_args"])],
            params=[Param("num_args", "int", doc="number of inputs"),
                    Param("axis", "int", 1, "the joined axis")],
            shape=_concat_shape, dtype=same_dtype,
            reference=lambda attrs, *xs: np.concatenate(xs, axis=attrs["axis"]),
            gradient=_concat_grad, pattern=INJ, support_level=1)


def _split_like_shape(attrs, ins, outs):
    likes = list(ins[1:])
    if ins[0] is not None and all(s is not None for s in likes):
        _concat_shape({"axis": attrs["axis"]}, likes, [ins[0]])  # pieces must tile data
    return ins, [s if s is not None else o for s, o in zip(likes, outs)]


def _split_like_ref(attrs, x, *likes):
    ax = attrs["axis"]
    cuts = np.cumsum([l.shape[ax] for l in likes])[:-1]
    return tuple(np.split(x, cuts, axis=ax))


def _split_like_dtype(attrs, ins, outs):
    t = ins[0] if ins[0] is not None else next((o for o in outs if o is not None), None)
    return ins, [t] * len(outs)


defs.op("_split_like", doc="Split data along axis into pieces shaped like the other "
            "inputs (the gradient of concatenate; the like inputs supply only shapes).",
            inputs=lambda attrs: ["data"] + [f"like{i}" for i in range(attrs["num_outputs"])],
            outputs=lambda attrs: [f"output{i}" for i in range(attrs["num_outputs"])],
            params=[Param("num_outputs", "int", doc="number of pieces"),
                    Param("axis", "int", 1, "the split axis")],
            shape=_split_like_shape, dtype=_split_like_dtype, reference=_split_like_ref,
            gradient=lambda n, og: [_concat_of(n, og)] + [None] * (len(n.inputs) - 1),
            pattern=INJ, FIgnoreInputs=lambda attrs: list(range(1, attrs["num_outputs"] + 1)),
            TIsBackward=True, support_level=10)


def _concat_of(n, og):
    """Concatenate the output gradients of a split (zeros for outputs that received none)."""
    gs = [g if g is not None else op("zeros_like", e) for g, e in zip(og, outputs(n))]
    return op("concatenate", *gs, axis=n.attrs["axis"], num_args=len(gs))


def split_spec(attrs) -> tuple[str, tuple[int, ...]]:
    """('sections', (k,)) for an int, ('indices', (...)) for a tuple, as NNVM/numpy."""
    v = attrs["indices_or_sections"]
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        if v < 1:
            raise AttrError(f"indices_or_sections={v}: the number of sections must be >= 1")
        return "sections", (int(v),)
    try:
        idx = parse_value(Param("indices_or_sections", "ints"), v, "split")
    except AttrError:
        raise AttrError(f"indices_or_sections must be an int (sections) or a tuple of ints "
                        f"(split points); got {v!r}") from None
    return "indices", idx


def _split_outputs(attrs):
    kind, v = split_spec(attrs)
    k = v[0] if kind == "sections" else len(v) + 1
    return [f"output{i}" for i in range(k)]


def _split_shape(attrs, ins, outs):
    if ins[0] is None:
        return ins, outs
    s = tuple(ins[0])
    ax = _norm_axis(attrs["axis"], len(s))
    kind, v = split_spec(attrs)
    if kind == "sections":
        _expect(s[ax] % v[0] == 0, f"axis {ax} of size {s[ax]} does not split into {v[0]} "
                                   f"equal sections")
        sizes = [s[ax] // v[0]] * v[0]
    else:
        pts = (0,) + v + (s[ax],)
        _expect(all(a <= b for a, b in zip(pts, pts[1:])),
                f"split indices {v} must be increasing and within axis {ax} of size {s[ax]}")
        sizes = [b - a for a, b in zip(pts, pts[1:])]
    return ins, [s[:ax] + (d,) + s[ax + 1:] for d in sizes]


def _split_ref(attrs, x):
    kind, v = split_spec(attrs)
    return tuple(np.split(x, v[0] if kind == "sections" else list(v), axis=attrs["axis"]))


defs.op("split", doc="Split along axis into `indices_or_sections` equal sections (an "
            "int) or at the given indices (a tuple).", outputs=_split_outputs,
            params=[Param("indices_or_sections", "any", doc="int sections or tuple of indices"),
                    Param("axis", "int", 1, "the split axis")],
            shape=_split_shape, dtype=lambda attrs, ins, outs: (ins, [ins[0]] * len(outs)),
            reference=_split_ref,
            gradient=lambda n, og: [_concat_of(n, og)],
            pattern=INJ, support_level=1)


# -- transpose, expand_dims, squeeze, broadcast_to --------------------------------------------

def _axes(attrs, ndim):
    axes = tuple(attrs["axes"]) or tuple(reversed(range(ndim)))
    _expect(sorted(a % ndim for a in axes if -ndim <= a < ndim) == list(range(ndim))
            and len(axes) == ndim, f"axes {axes} is not a permutation of {ndim} axes")
    return tuple(a % ndim for a in axes)


def _transpose_shape(attrs, ins, outs):
    if ins[0] is not None:
        ax = _axes(attrs, len(ins[0]))
        return ins, [tuple(ins[0][a] for a in ax)]
    if outs[0] is not None:
        ax = _axes(attrs, len(outs[0]))
        inv = np.argsort(ax)
        return [tuple(outs[0][a] for a in inv)], outs
    return ins, outs


def _transpose_grad(n, og):
    axes = tuple(n.attrs["axes"])
    inv = tuple(int(i) for i in np.argsort([a % len(axes) for a in axes])) if axes else ()
    return [op("transpose", og[0], axes=inv)]


defs.op("transpose", doc="Permute axes; empty axes reverses them.",
            params=[Param("axes", "ints", (), "the permutation; empty = reverse")],
            shape=_transpose_shape, dtype=same_dtype,
            reference=lambda attrs, x: np.transpose(x, _axes(attrs, x.ndim)),
            gradient=_transpose_grad, pattern=INJ, support_level=4)


def _expand_dims_shape(attrs, ins, outs):
    if ins[0] is None:
        return ins, outs
    s, a, k = tuple(ins[0]), attrs["axis"], attrs["num_newaxis"]
    _expect(-len(s) - 1 <= a <= len(s), f"axis {a} is out of range for a {len(s)}-D input; "
                                        f"valid: {-len(s) - 1}..{len(s)}")
    _expect(k >= 0, f"num_newaxis must be >= 0; got {k}")
    a = a % (len(s) + 1)
    return ins, [s[:a] + (1,) * k + s[a:]]


defs.op("expand_dims", doc="Insert num_newaxis axes of size 1 at axis.",
            params=[Param("axis", "int", doc="where to insert"),
                    Param("num_newaxis", "int", 1, "how many axes")],
            shape=_expand_dims_shape, dtype=same_dtype,
            reference=lambda attrs, x: x.reshape(_expand_dims_shape(attrs, [x.shape], [None])[
                1][0]), gradient=_reshape_back, support_level=1, **_view())


def _squeeze_out(attrs, s):
    axes = tuple(attrs["axis"])
    if not axes:
        return tuple(d for d in s if d != 1)
    norm = {_norm_axis(a, len(s)) for a in axes}
    for a in norm:
        _expect(s[a] == 1, f"cannot squeeze axis {a} of size {s[a]} (shape {s})")
    return tuple(d for i, d in enumerate(s) if i not in norm)


defs.op("squeeze", doc="Remove axes of size 1 (all of them when axis is empty).",
            params=[Param("axis", "ints", (), "axes to remove; empty = every size-1 axis")],
            shape=lambda attrs, ins, outs: (ins, outs) if ins[0] is None else (
                ins, [_squeeze_out(attrs, tuple(ins[0]))]), dtype=same_dtype,
            reference=lambda attrs, x: x.reshape(_squeeze_out(attrs, x.shape)),
            gradient=_reshape_back, support_level=1, **_view())


def _broadcast_to_shape(attrs, ins, outs):
    target = tuple(attrs["shape"])
    if ins[0] is not None:
        s = tuple(ins[0])
        _expect(len(s) <= len(target) and broadcast_shapes(s, target) == target,
                f"cannot broadcast shape {s} to {target}: each input dimension must equal "
                f"the target's or be 1")
    return ins, [target]


defs.op("broadcast_to", doc="Broadcast to `shape` (numpy rules).",
            params=[Param("shape", "ints", doc="target shape")], shape=_broadcast_to_shape,
            dtype=same_dtype,
            reference=lambda attrs, x: np.broadcast_to(x, tuple(attrs["shape"])).copy(),
            gradient=lambda n, og: [sum_to_like(og[0], n.inputs[0])],
            pattern=OpPattern.BROADCAST, support_level=4)


# -- strided_slice, pad, take ---------------------------------------------------------------------

def slice_spec(attrs, shape):
    """The Python ``slice`` per axis that ``strided_slice`` with ``attrs`` takes of ``shape``
    (validated); public so kernel generators index exactly as the reference kernel."""
    begin, end, stride = tuple(attrs["begin"]), tuple(attrs["end"]), tuple(attrs["stride"])
    _expect(len(begin) <= len(shape) and len(end) <= len(shape) and len(stride) <= len(shape),
            f"begin {begin}, end {end} and stride {stride} may not be longer than the input "
            f"rank {len(shape)}")
    _expect(all(s != 0 for s in stride), f"stride {stride} contains 0")
    out = []
    for d in range(len(shape)):
        st = stride[d] if d < len(stride) else 1
        b = begin[d] if d < len(begin) else None
        e = end[d] if d < len(end) else None
        out.append(slice(b, e, st))
    return tuple(out)


def _strided_slice_shape(attrs, ins, outs):
    if ins[0] is None:
        return ins, outs
    s = tuple(ins[0])
    return ins, [tuple(len(range(*sl.indices(d))) for sl, d in zip(slice_spec(attrs, s), s))]


def _slice_params():
    return [Param("begin", "ints", doc="start per axis (python semantics, clamped)"),
            Param("end", "ints", doc="stop per axis (exclusive, clamped)"),
            Param("stride", "ints", (), "step per axis; default 1")]


defs.op("strided_slice", doc="Python-style slice x[b0:e0:s0, b1:e1:s1, ...]; axes beyond "
            "begin are kept whole.", params=_slice_params(), shape=_strided_slice_shape,
            dtype=same_dtype,
            reference=lambda attrs, x: x[slice_spec(attrs, x.shape)].copy(),
            gradient=lambda n, og: [op("_strided_slice_backward", og[0], n.inputs[0],
                                       **{k: n.attrs[k] for k in ("begin", "end", "stride")})],
            pattern=INJ, support_level=4)


def _scatter_back_shape(forward_rule, attrs, ins, outs):
    """Backward ops (out_grad, ..., data): out_grad must have the forward output's shape of
    data; the result has data's shape."""
    data = ins[-1] if ins[-1] is not None else outs[0]
    if data is None:
        return ins, outs
    _, (want,) = forward_rule(attrs, [data, *ins[1:-1]], [None])
    if want is not None and ins[0] is not None and tuple(ins[0]) != tuple(want):
        raise ShapeError(f"out_grad has shape {ins[0]}; expected {want} (the forward output "
                         f"for data {data})")
    return [want if want is not None else ins[0], *ins[1:-1], data], [data]


def _slice_bwd_ref(attrs, g, x):
    out = np.zeros(x.shape, dtype=g.dtype)
    out[slice_spec(attrs, x.shape)] = g
    return out


defs.op("_strided_slice_backward", doc="Gradient of strided_slice: out_grad scattered "
            "into zeros shaped like data (data supplies only the shape).",
            inputs=("out_grad", "data"), params=_slice_params(),
            shape=lambda attrs, ins, outs: _scatter_back_shape(_strided_slice_shape, attrs, ins,
                                                               outs),
            dtype=lambda attrs, ins, outs: (ins, [ins[0]]), reference=_slice_bwd_ref,
            gradient=lambda n, og: [op("strided_slice", og[0], **{
                k: n.attrs[k] for k in ("begin", "end", "stride")}), None],
            pattern=INJ, FIgnoreInputs=lambda attrs: [1], TIsBackward=True, support_level=10)


def pad_spec(attrs, ndim):
    """``pad``'s ``pad_width`` as validated ``((before, after), ...)`` for an ``ndim``-D input."""
    pw = attrs["pad_width"]
    try:
        pairs = tuple((int(a), int(b)) for a, b in pw)
    except (TypeError, ValueError):
        raise ShapeError(f"pad_width must be ((before, after), ...) per axis; got {pw!r}"
                         ) from None
    _expect(len(pairs) == ndim, f"pad_width has {len(pairs)} pairs for a {ndim}-D input")
    _expect(all(a >= 0 and b >= 0 for a, b in pairs), f"pad_width {pairs} must be >= 0")
    return pairs


def _pad_shape(attrs, ins, outs):
    if ins[0] is None:
        return ins, outs
    pairs = pad_spec(attrs, len(ins[0]))
    return ins, [tuple(d + a + b for d, (a, b) in zip(ins[0], pairs))]


def _pad_grad(n, og):
    pairs = tuple(tuple(p) for p in n.attrs["pad_width"])
    return [op("strided_slice", og[0], begin=tuple(a for a, _ in pairs),
               end=tuple(-b if b else _INT_MAX for _, b in pairs))]


defs.op("pad", doc="Constant padding: pad_width ((before, after), ...) per axis.",
            params=[Param("pad_width", "any", doc="((before, after), ...) per axis"),
                    Param("pad_value", "float", 0.0, "the fill value")],
            shape=_pad_shape, dtype=same_dtype,
            reference=lambda attrs, x: np.pad(x, pad_spec(attrs, x.ndim),
                                              constant_values=attrs["pad_value"]),
            gradient=_pad_grad, pattern=INJ, support_level=1)


def _take_shape(attrs, ins, outs):
    data, idx = ins
    if data is None or idx is None:
        return ins, outs
    ax = attrs["axis"]
    if ax is None:
        return ins, [tuple(idx)]
    a = _norm_axis(ax, len(data))
    return ins, [tuple(data[:a]) + tuple(idx) + tuple(data[a + 1:])]


def _take_dtype(attrs, ins, outs):
    if ins[1] is not None and not ins[1].startswith(("int", "uint")):
        raise TypeInferenceError(f"indices must be an integer tensor; got {ins[1]}")
    t = ins[0] if ins[0] is not None else outs[0]
    return [t, ins[1]], [t]


def _take_ref(attrs, x, idx):
    return np.take(x, idx, axis=attrs["axis"], mode="clip")


def _take_bwd_ref(attrs, g, idx, x):
    ax = attrs["axis"]
    out = np.zeros(x.size if ax is None else x.shape, dtype=g.dtype)
    if ax is None:
        np.add.at(out, np.clip(idx, 0, x.size - 1), g)
        return out.reshape(x.shape)
    a = ax % x.ndim
    moved = np.moveaxis(out, a, 0)  # a view: writes land in out
    gm = np.moveaxis(g, tuple(range(a, a + idx.ndim)), tuple(range(idx.ndim)))
    np.add.at(moved, np.clip(idx, 0, x.shape[a] - 1), gm)
    return out


_take_axis = [Param("axis", "int_or_none", None, "gather axis; None = flattened input")]
defs.op("take", doc="Gather elements of data at integer `indices` along axis (indices "
            "are clipped to the valid range, as TVM).", inputs=("data", "indices"),
            params=_take_axis, shape=_take_shape, dtype=_take_dtype, reference=_take_ref,
            gradient=lambda n, og: [op("_take_backward", og[0], n.inputs[1], n.inputs[0],
                                       axis=n.attrs["axis"]), None],
            pattern=INJ, support_level=1)
defs.op("_take_backward", doc="Gradient of take: out_grad scatter-added into zeros "
            "shaped like data (data supplies only the shape).",
            inputs=("out_grad", "indices", "data"), params=_take_axis,
            shape=lambda attrs, ins, outs: _scatter_back_shape(
                lambda a, i, o: _take_shape(a, [i[0], i[1]], o), attrs, ins, outs),
            dtype=lambda attrs, ins, outs: (ins, [ins[0]]), reference=_take_bwd_ref,
            gradient=lambda n, og: [op("take", og[0], n.inputs[1], axis=n.attrs["axis"]),
                                    None, None],
            pattern=OpPattern.OPAQUE, FIgnoreInputs=lambda attrs: [2], TIsBackward=True,
            support_level=10)


# -- dtype conversion and clip ------------------------------------------------------------------

defs.op("cast", doc="Convert to `dtype`.", params=[Param("dtype", "dtype", doc="target")],
            shape=same_shape, dtype=lambda attrs, ins, outs: (ins, [attrs["dtype"]]),
            reference=lambda attrs, x: x.astype(attrs["dtype"]),
            gradient=lambda n, og: [op("cast_like", og[0], n.inputs[0])], pattern=E,
            support_level=4)
defs.op("cast_like", doc="Convert data to the dtype of `dtype_like` (the gradient of cast).",
            inputs=("data", "dtype_like"), shape=lambda attrs, ins, outs: (ins, [ins[0]]),
            dtype=lambda attrs, ins, outs: (ins, [ins[1]]),
            reference=lambda attrs, x, like: x.astype(like.dtype),
            gradient=lambda n, og: [op("cast_like", og[0], n.inputs[0]), None], pattern=E,
            FIgnoreInputs=lambda attrs: [1], support_level=4)


def _clip_ref(attrs, x):
    return to_dtype(np.clip(x, attrs["a_min"], attrs["a_max"]), x)


defs.op("clip", doc="Clamp values into [a_min, a_max].",
            params=[Param("a_min", "float", doc="lower bound"),
                    Param("a_max", "float", doc="upper bound")],
            shape=same_shape, dtype=same_dtype, reference=_clip_ref,
            gradient=lambda n, og: [op("where", op("broadcast_equal", outputs(n)[0],
                                                   n.inputs[0]), og[0],
                                       op("zeros_like", og[0]))],
            pattern=E, inplace=inplace_first, support_level=4)


# -- tensor creation ------------------------------------------------------------------------------

def _creator(name, doc, fill):
    params = [Param("shape", "ints", doc="output shape"),
              Param("dtype", "dtype", "float32", "output dtype")]
    if fill is None:
        params.append(Param("fill_value", "float", doc="the value"))
    defs.op(name, doc=doc, inputs=(), params=params,
                shape=lambda attrs, ins, outs: (ins, [tuple(attrs["shape"])]),
                dtype=lambda attrs, ins, outs: (ins, [attrs["dtype"]]),
                reference=lambda attrs: np.full(tuple(attrs["shape"]), attrs.get(
                    "fill_value", fill), dtype=attrs["dtype"]),
                pattern=E, support_level=4)


_creator("full", "A tensor of `shape` filled with `fill_value`.", None)
_creator("zeros", "A tensor of `shape` filled with zeros.", 0)
_creator("ones", "A tensor of `shape` filled with ones.", 1)
