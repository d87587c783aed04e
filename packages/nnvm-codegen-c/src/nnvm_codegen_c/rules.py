"""Lowering rules as data: per op, how to compute its output at given coordinates.

Two tables:

* ``EXPR_RULES``: elementwise and broadcast ops, as ``f(r, args, attrs, dtype) -> C expr``
  over the operands' values (already broadcast), the renderer ``r`` supplying literals, casts
  and math names. ``FLOAT_ONLY`` lists those defined for floating dtypes only.
* ``VALUE_RULES``: every op a fused kernel can compute in place, as
  ``f(builder, nid, out_index, coords) -> C expr``. Elementwise entries wrap ``EXPR_RULES``;
  injective ops (transpose, reshape, slice, pad, concatenate, take, split...) map output
  coordinates to input coordinates and ask the builder for the input's value there.

Heavy ops (GEMM, convolution, pooling, reductions, softmax) are kernel templates in
``nnvm_codegen_c.templates``; the fused group's elementwise tail is applied with these rules.
"""

from __future__ import annotations

from typing import Callable

from nnvm.ops.transform import pad_spec, slice_spec, split_spec

from .builder import KernelBuilder

Expr = Callable[..., str]


def _bin(fmt: str) -> Expr:
    return lambda r, a, attrs, dt: fmt.format(*a)


def _fn(name: str) -> Expr:
    return lambda r, a, attrs, dt: f"{r.func(name, dt)}({a[0]})"


def _scalar(fmt: str) -> Expr:
    return lambda r, a, attrs, dt: fmt.format(a[0], s=r.const(attrs["scalar"], _fdt(dt)))


def _fdt(dt: str) -> str:
    return dt if dt.startswith("float") else "float32"


def _clip01(expr: str, r, dt: str) -> str:
    """``expr`` clamped to [0, 1] with compares (no min/max library calls)."""
    zero, one = r.const(0, dt), r.const(1, dt)
    return f"(({expr}) < {zero} ? {zero} : (({expr}) > {one} ? {one} : ({expr})))"


def _zero(dt, r):
    return r.const(0, dt)


EXPR_RULES: dict[str, Expr] = {
    # arithmetic
    "elemwise_add": _bin("({0} + {1})"), "broadcast_add": _bin("({0} + {1})"),
    "elemwise_sub": _bin("({0} - {1})"), "broadcast_sub": _bin("({0} - {1})"),
    "elemwise_mul": _bin("({0} * {1})"), "broadcast_mul": _bin("({0} * {1})"),
    "elemwise_div": _bin("({0} / {1})"), "broadcast_div": _bin("({0} / {1})"),
    "broadcast_pow": lambda r, a, attrs, dt: f"{r.func('pow', dt)}({a[0]}, {a[1]})",
    "broadcast_maximum": _bin("({0} > {1} ? {0} : {1})"),
    "broadcast_minimum": _bin("({0} < {1} ? {0} : {1})"),
    "elemwise_sum": lambda r, a, attrs, dt: "(" + " + ".join(a) + ")",
    "negative": _bin("(-{0})"), "copy": _bin("{0}"), "block_grad": _bin("{0}"),
    "abs": lambda r, a, attrs, dt: f"({a[0]} < {_zero(dt, r)} ? -{a[0]} : {a[0]})",
    "sign": lambda r, a, attrs, dt: (f"(({a[0]} > {_zero(dt, r)}) - ({a[0]} < "
                                     f"{_zero(dt, r)}))"),
    # comparisons (bool results)
    "broadcast_equal": _bin("({0} == {1})"), "broadcast_not_equal": _bin("({0} != {1})"),
    "broadcast_greater": _bin("({0} > {1})"), "broadcast_greater_equal": _bin("({0} >= {1})"),
    "broadcast_less": _bin("({0} < {1})"), "broadcast_less_equal": _bin("({0} <= {1})"),
    "where": _bin("({0} ? {1} : {2})"),
    # scalar variants
    "__add_scalar__": _scalar("({0} + {s})"), "__sub_scalar__": _scalar("({0} - {s})"),
    "__rsub_scalar__": _scalar("({s} - {0})"), "__mul_scalar__": _scalar("({0} * {s})"),
    "__div_scalar__": _scalar("({0} / {s})"), "__rdiv_scalar__": _scalar("({s} / {0})"),
    "__pow_scalar__": lambda r, a, attrs, dt: f"{r.func('pow', dt)}({a[0]}, "
                                              f"{r.const(attrs['scalar'], dt)})",
    "__rpow_scalar__": lambda r, a, attrs, dt: (f"{r.func('pow', dt)}("
                                                f"{r.const(attrs['scalar'], dt)}, {a[0]})"),
    # activations
    "relu": lambda r, a, attrs, dt: f"({a[0]} > {_zero(dt, r)} ? {a[0]} : {_zero(dt, r)})",
    "_relu_backward": lambda r, a, attrs, dt: f"({a[1]} > {_zero(dt, r)} ? {a[0]} : "
                                              f"{_zero(dt, r)})",
    "leaky_relu": lambda r, a, attrs, dt: (f"({a[0]} > {_zero(dt, r)} ? {a[0]} : {a[0]} * "
                                           f"{r.const(attrs['alpha'], dt)})"),
    "sigmoid": lambda r, a, attrs, dt: (f"({r.const(1, dt)} / ({r.const(1, dt)} + "
                                        f"{r.func('exp', dt)}(-{a[0]})))"),
    # NaN stays NaN (NumPy/ONNX); fmin/fmax, and min/max on some devices, return the bound
    "clip": lambda r, a, attrs, dt: (f"({r.func('isnan')}({a[0]}) ? {a[0]} : "
                                     f"{r.func('min')}({r.func('max')}({a[0]}, "
                                     f"{r.const(attrs['a_min'], dt)}), "
                                     f"{r.const(attrs['a_max'], dt)}))"),
    "softplus": lambda r, a, attrs, dt: f"{r.func('log1p')}({r.func('exp', dt)}({a[0]}))",
    "softsign": lambda r, a, attrs, dt: f"({a[0]} / ({r.const(1, dt)} + {r.func('fabs')}"
                                        f"({a[0]})))",
    "reciprocal": lambda r, a, attrs, dt: f"({r.const(1, dt)} / {a[0]})",
    "hard_sigmoid": lambda r, a, attrs, dt: _clip01(
        f"{a[0]} * {r.const(attrs['alpha'], dt)} + {r.const(attrs['beta'], dt)}", r, dt),
    # casts and constants (dtype conversions go through the store/let casts)
    "cast": _bin("{0}"), "cast_like": _bin("{0}"),
    "zeros_like": lambda r, a, attrs, dt: r.const(0, dt),
    "ones_like": lambda r, a, attrs, dt: r.const(1, dt),
    "zeros": lambda r, a, attrs, dt: r.const(0, dt),
    "ones": lambda r, a, attrs, dt: r.const(1, dt),
    "full": lambda r, a, attrs, dt: r.const(attrs["fill_value"], dt),
}
for _m in ("exp", "log", "sqrt", "tanh", "sin", "cos", "tan", "asin", "acos", "atan", "sinh",
           "cosh", "asinh", "acosh", "atanh", "erf", "floor", "ceil", "trunc"):
    EXPR_RULES[_m] = _fn(_m)
EXPR_RULES["round"] = _fn("rint")  # numpy rounds half to even, as rint does

#: ops whose rule is only valid for floating-point operands/results.
FLOAT_ONLY = {"broadcast_pow", "__pow_scalar__", "__rpow_scalar__", "sigmoid", "leaky_relu",
              "elemwise_div", "broadcast_div", "__div_scalar__", "__rdiv_scalar__", "clip",
              "softplus", "softsign", "reciprocal", "round", *(
                  m for m in EXPR_RULES if EXPR_RULES[m].__qualname__.startswith("_fn"))}


def _elementwise(name: str):
    expr = EXPR_RULES[name]

    def rule(b: KernelBuilder, nid: int, k: int, coords: list) -> str:
        out = b.info.entry(nid, k)
        oshape = b.shape(out)
        args = []
        for e in b.inputs(nid):
            v = b.value(e, b.broadcast_coords(b.shape(e), oshape, coords))
            if b.dtype(e) == "bool" and b.dtype(out) != "bool" and name != "where":
                v = b.r.cast(v, b.dtype(out))
            args.append(v)
        if name in ("cast", "cast_like") and b.dtype(out) == "bool":
            return f"({args[0]} != {b.r.const(0, b.dtype(b.inputs(nid)[0]))})"
        if name in ("cast", "cast_like") and b.dtype(b.inputs(nid)[0]) != b.dtype(out):
            # convert here, not only at the store: a fused consumer reads this value, and
            # e.g. pow() of an int cast to double must see a double (OpenCL has no int pow)
            return b.r.cast(args[0], b.dtype(out))
        dt = b.dtype(out) if b.dtype(out) != "bool" else b.dtype(b.inputs(nid)[0])
        return expr(b.r, args, b.attrs(nid), dt)

    return rule


# -- injective rules ----------------------------------------------------------------------------

def _same_input(b: KernelBuilder, nid: int, coords) -> str:
    return b.value(b.inputs(nid)[0], coords)


def _reshape(b: KernelBuilder, nid: int, k: int, coords) -> str:
    src = b.inputs(nid)[0]
    ishape, oshape = b.shape(src), b.shape(b.info.entry(nid, k))
    if tuple(d for d in ishape if d != 1) == tuple(d for d in oshape if d != 1):
        kept = iter([c for c, d in zip(coords, oshape) if d != 1])
        return b.value(src, ["0" if d == 1 else next(kept) for d in ishape])
    flat = b.int_let(b.linear(coords, oshape), "l")
    return b.value(src, b.delinearize(flat, ishape))


def _transpose(b: KernelBuilder, nid: int, k: int, coords) -> str:
    src = b.inputs(nid)[0]
    nd = len(b.shape(src))
    axes = tuple(b.attrs(nid).get("axes") or ()) or tuple(reversed(range(nd)))
    ic = [None] * nd
    for i, a in enumerate(axes):
        ic[a % nd] = coords[i]
    return b.value(src, ic)


def _broadcast(b: KernelBuilder, nid: int, k: int, coords) -> str:
    src = b.inputs(nid)[0]
    return b.value(src, b.broadcast_coords(b.shape(src), b.shape(b.info.entry(nid, k)),
                                           coords))


def _expand_like(b: KernelBuilder, nid: int, k: int, coords) -> str:
    src = b.inputs(nid)[0]
    oshape = b.shape(b.info.entry(nid, k))
    ishape = b.shape(src)
    if len(ishape) == len(oshape):
        return b.value(src, ["0" if d == 1 else c for c, d in zip(coords, ishape)])
    nd = len(oshape)
    axes = {a % nd for a in b.attrs(nid)["axis"]}
    if b.attrs(nid)["exclude"]:
        axes = set(range(nd)) - axes
    kept = [c for i, c in enumerate(coords) if i not in axes]
    return b.value(src, kept)


def _strided_slice(b: KernelBuilder, nid: int, k: int, coords) -> str:
    src = b.inputs(nid)[0]
    ishape = b.shape(src)
    ic = []
    for c, sl, d in zip(coords, slice_spec(b.attrs(nid), ishape), ishape):
        start, _, step = sl.indices(d)
        ic.append(c if (start, step) == (0, 1) else f"({start} + ({step}) * {c})")
    return b.value(src, [b.int_let(c) for c in ic])


def _clamped(b: KernelBuilder, expr: str, hi: int) -> str:
    return b.int_let(f"{b.r.func('clampi')}({expr}, 0, {hi - 1})" if hi > 1 else "0")


def _pad(b: KernelBuilder, nid: int, k: int, coords) -> str:
    src = b.inputs(nid)[0]
    ishape = b.shape(src)
    pairs = pad_spec(b.attrs(nid), len(ishape))
    conds, ic = [], []
    for c, (before, _), d in zip(coords, pairs, ishape):
        if before == 0 and pairs and d == b.shape(b.info.entry(nid, k))[len(ic)]:
            ic.append(c)
            continue
        raw = b.int_let(f"{c} - {before}")
        conds.append(f"({raw} >= 0 && {raw} < {d})")
        ic.append(_clamped(b, raw, d))
    v = b.value(src, ic)
    if not conds:
        return v
    pv = b.r.const(b.attrs(nid)["pad_value"], b.dtype(src))
    return f"(({' && '.join(conds)}) ? {v} : {pv})"


def _concatenate(b: KernelBuilder, nid: int, k: int, coords) -> str:
    srcs = b.inputs(nid)
    oshape = b.shape(b.info.entry(nid, k))
    ax = b.attrs(nid)["axis"] % len(oshape)
    c = coords[ax]
    parts, start = [], 0
    for e in srcs:
        d = b.shape(e)[ax]
        if d == 0:
            continue
        ic = list(coords)
        ic[ax] = _clamped(b, f"{c} - {start}", d) if len(srcs) > 1 else c
        parts.append((start + d, b.value(e, ic)))
        start += d
    expr = parts[-1][1]
    for end, v in reversed(parts[:-1]):
        expr = f"({c} < {end} ? {v} : {expr})"
    return expr


def _split(b: KernelBuilder, nid: int, k: int, coords) -> str:
    src = b.inputs(nid)[0]
    ishape = b.shape(src)
    ax = b.attrs(nid)["axis"] % len(ishape)
    kind, v = split_spec(b.attrs(nid))
    if kind == "sections":
        start = k * (ishape[ax] // v[0])
    else:
        points = [0] + [min(max(p if p >= 0 else p + ishape[ax], 0), ishape[ax]) for p in v]
        start = points[k]
    ic = list(coords)
    if start:
        ic[ax] = b.int_let(f"{coords[ax]} + {start}")
    return b.value(src, ic)


def _take(b: KernelBuilder, nid: int, k: int, coords) -> str:
    data, ind = b.inputs(nid)
    dshape, ishape = b.shape(data), b.shape(ind)
    axis = b.attrs(nid).get("axis")
    if axis is None:
        i = b.value(ind, coords)
        flat = _clamped(b, f"({b.r.int_type})({i})", max(1, _numel(dshape)))
        return b.value(data, b.delinearize(flat, dshape))
    ax = axis % len(dshape)
    ni = len(ishape)
    i = b.value(ind, coords[ax:ax + ni])
    pos = _clamped(b, f"({b.r.int_type})({i})", dshape[ax])
    return b.value(data, list(coords[:ax]) + [pos] + list(coords[ax + ni:]))


def _wrapped_index(b: KernelBuilder, i: str, size: int) -> str:
    """ONNX index ``i`` into an axis of ``size``: negative counts from the end; clamped to
    the axis (the reference raises on an out-of-range index, a kernel cannot)."""
    raw = b.int_let(f"({b.r.int_type})({i})")
    return _clamped(b, f"({raw} < 0 ? {raw} + {size} : {raw})", size)


def _gather(b: KernelBuilder, nid: int, k: int, coords) -> str:
    data, ind = b.inputs(nid)
    dshape, ni = b.shape(data), len(b.shape(ind))
    ax = b.attrs(nid)["axis"] % len(dshape)
    pos = _wrapped_index(b, b.value(ind, coords[ax:ax + ni]), dshape[ax])
    return b.value(data, list(coords[:ax]) + [pos] + list(coords[ax + ni:]))


def _gather_elements(b: KernelBuilder, nid: int, k: int, coords) -> str:
    data, ind = b.inputs(nid)
    dshape = b.shape(data)
    ax = b.attrs(nid)["axis"] % len(dshape)
    pos = _wrapped_index(b, b.value(ind, coords), dshape[ax])
    return b.value(data, list(coords[:ax]) + [pos] + list(coords[ax + 1:]))


def _resize_axis(b: KernelBuilder, nid: int, c: str, n_in: int, scale: float, n_out: int,
                 roi) -> list[tuple[str, str | None]]:
    """Taps ``[(input index expr, weight expr | None)]`` of output coordinate ``c`` on one
    resized axis, in closed form, after checking that form against the reference's own
    interpolation matrix (``nnvm.ops.image``) for every output index."""
    import numpy as np

    from nnvm.ops.image import axis_matrix, source_coords

    attrs = b.attrs(nid)
    w, extrap = axis_matrix(attrs, n_in, scale, n_out, roi)
    if extrap is not None or (w > 0).sum(axis=1).max() > 2:
        raise b.unsupported(nid, f"resize mode {attrs['mode']!r} with these options has no "
                                 "kernel (nearest and linear without roi/antialias have)")
    o = np.arange(n_out)
    if attrs["mode"] == "nearest":
        idx = w.argmax(axis=1)
        g = np.gcd(n_in, n_out)
        num, den = n_in // g, n_out // g
        for off in range(0, den):  # idx = (o * num + off) / den, exactly
            if np.array_equal(np.minimum((o * num + off) // den, n_in - 1), idx):
                e = f"({c} * {num} + {off}) / {den}" if (num, den, off) != (1, 1, 0) else c
                return [(_clamped(b, e, n_in), None)]
        raise b.unsupported(nid, "resize: no integer closed form for this nearest mapping")
    # linear: x = o * step + start, clamped to the axis; taps floor(x) and floor(x) + 1
    src, _ = source_coords(attrs["coordinate_transformation_mode"], o.astype(np.float64),
                            scale, n_in, n_out, roi)
    step = float(src[1] - src[0]) if n_out > 1 else 0.0
    start = float(src[0])
    xs = np.clip((o * np.float32(step) + np.float32(start)).astype(np.float32), 0, n_in - 1)
    i0 = np.floor(xs).astype(np.int64)
    w1 = (xs - i0).astype(np.float64)
    rebuilt = np.zeros_like(w)
    np.add.at(rebuilt, (o, i0), 1 - w1)
    np.add.at(rebuilt, (o, np.minimum(i0 + 1, n_in - 1)), w1)
    if not np.allclose(rebuilt, w, atol=1e-5):
        raise b.unsupported(nid, "resize: the linear mapping is not affine on this axis")
    f = b.r.ctype("float32")
    xe = b.let(f, f"{c} * {b.r.const(step, 'float32')} + {b.r.const(start, 'float32')}")
    xc = b.let(f, f"({xe} < 0 ? 0 : ({xe} > {n_in - 1} ? {n_in - 1} : {xe}))")
    lo = b.int_let(f"({b.r.int_type})({xc})")
    hi = b.int_let(f"({lo} + 1 < {n_in} ? {lo} + 1 : {n_in - 1})")
    wt = b.let(f, f"{xc} - ({f}){lo}")
    return [(lo, f"({b.r.const(1, 'float32')} - {wt})"), (hi, wt)]


def _resize(b: KernelBuilder, nid: int, k: int, coords) -> str:
    from nnvm.ops.image import resize_plan

    src = b.inputs(nid)[0]
    ishape = b.shape(src)
    attrs = b.attrs(nid)
    if attrs["antialias"] or attrs["exclude_outside"] or attrs["mode"] == "cubic":
        raise b.unsupported(nid, "resize: cubic, antialias and exclude_outside have no kernel")
    plan, _ = resize_plan(attrs, ishape)
    taps = {a: _resize_axis(b, nid, coords[a], ishape[a], sc, n, roi)
            for a, sc, n, roi in plan}
    terms = [([], [])]
    for a in range(len(ishape)):
        opts = taps.get(a, [(coords[a], None)])
        terms = [(ic + [i], ws + ([wt] if wt else [])) for ic, ws in terms for i, wt in opts]
    dt = b.dtype(src)
    acc = b.r.ctype(dt if dt.startswith("float") else "float32")
    parts = []
    for ic, ws in terms:
        v = b.value(src, ic)
        parts.append(" * ".join([f"({acc})({v})"] + ws) if ws else v)
    if len(parts) == 1:
        return parts[0]
    total = "(" + " + ".join(parts) + ")"
    if dt.startswith("float"):
        return total
    return f"{b.r.func('rint')}({total})"


def _tile(b: KernelBuilder, nid: int, k: int, coords) -> str:
    src = b.inputs(nid)[0]
    ishape = b.shape(src)
    off = len(coords) - len(ishape)
    return b.value(src, ["0" if d == 1 else b.int_let(f"{c} % {d}")
                         for c, d in zip(coords[off:], ishape)])


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _batch_norm(b: KernelBuilder, nid: int, k: int, coords) -> str:
    x, gamma, beta, mean, var = b.inputs(nid)
    attrs = b.attrs(nid)
    if k > 0:  # saved statistics: the moving values, copied
        return b.value(mean if k == 1 else var, coords)
    dt = b.dtype(x)
    ax = attrs["axis"] % len(b.shape(x))
    c = [coords[ax]]
    scale = f"({b.r.const(1, dt)} / {b.r.func('sqrt')}({b.value(var, c)} + " \
            f"{b.r.const(attrs['epsilon'], dt)}))"
    if attrs["scale"]:
        scale = f"({scale} * {b.value(gamma, c)})"
    y = f"(({b.value(x, coords)} - {b.value(mean, c)}) * {scale})"
    if attrs["center"]:
        y = f"({y} + {b.value(beta, c)})"
    return y


def _dropout(b: KernelBuilder, nid: int, k: int, coords) -> str:
    return b.value(b.inputs(nid)[0], coords) if k == 0 else b.r.const(1, b.dtype(
        b.info.entry(nid, k)))


VALUE_RULES: dict[str, Callable] = {name: _elementwise(name) for name in EXPR_RULES}
VALUE_RULES.update({
    "reshape": _reshape, "flatten": _reshape, "reshape_like": _reshape, "squeeze": _reshape,
    "expand_dims": _reshape, "transpose": _transpose, "broadcast_to": _broadcast,
    "expand": _broadcast, "expand_like": _expand_like, "strided_slice": _strided_slice,
    "pad": _pad, "concatenate": _concatenate, "split": _split, "take": _take, "tile": _tile,
    "gather": _gather, "gather_elements": _gather_elements, "resize": _resize,
    "batch_norm": _batch_norm, "dropout": _dropout,
})

#: Ops whose value rule reads an input at data-dependent coordinates (never in place).
GATHERS = {"take", "gather", "gather_elements"}
