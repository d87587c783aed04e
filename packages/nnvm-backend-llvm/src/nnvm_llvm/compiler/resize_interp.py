"""``resize`` in nearest, linear and cubic modes under every coordinate mode, in TE.

Why: segmentation heads (LR-ASPP, DeepLabV3) upsample with ``Resize(mode=linear, sizes=...)``
and text/face detectors with fractional nearest scales; those ran the NumPy reference on the
host (a float64 tensordot per axis). The kernel is separable like the reference: one pass
per resized axis, each output element of a pass a blend of one tap (nearest), two (linear)
or four (cubic) along that axis. The taps' indices and weights depend on the output index
along that axis alone, so they are per-axis tables (``resize_tab*`` blocks of ``n_out``
entries) computed once per run with the reference's own formula
(``nnvm.ops.image.source_coords``, repeated term by term in float64 so that a nearest index
rounds exactly as the reference's does); the passes only load them. For float data the
contiguous axis is resized first (its gathers run on the small input) and the last pass
blends whole rows with per-row weights; ``tf_crop_and_resize`` and integer data keep the
plan's order (extrapolation feeds later axes as in ONNX; integers round once at the end).
DeepLabV3's 21x16x16 -> 21x256x256 upsample went from 2.6 ms (float64 coordinates per
element) to 0.3 ms; ``resize_schedule`` keeps the passes from being inlined.

Integer data is blended in float64 and rounded half to even, then saturated, as the
reference does. Not covered (``reason`` says so, and the op keeps its reference kernel):
antialiased downsampling (its filter widens with the scale), ``exclude_outside`` (its
normalising division made TVM's lowering passes take seconds each on a 4x4 input),
``tf_crop_and_resize`` without ``roi``.
"""

from __future__ import annotations

import tvm
from tvm import te

from nnvm.ops.image import resize_plan


def reason(attrs, shape) -> str | None:
    """None when ``interpolate`` covers the node, else why not."""
    mode = attrs.get("mode")
    if mode not in ("nearest", "linear", "cubic"):
        return f"resize mode {mode!r} (llvm lowers nearest, linear and cubic)"
    try:
        plan, _ = resize_plan(attrs, tuple(shape))
    except Exception:  # noqa: BLE001 - shape errors are reported by InferShape already
        return "resize whose output shape cannot be inferred"
    if mode != "nearest" and attrs.get("antialias") and any(s < 1.0 for _, s, _, _ in plan):
        return f"antialiased {mode} downsampling (llvm lowers the plain filter)"
    if attrs.get("exclude_outside") and mode != "linear":
        # cubic: the renormalising float division (per output element, after the border
        # test) made TVM's lowering passes take ~1.5 s each, a 4x4 -> 3x3 kernel 17 s to
        # build and fuzz case 23002601 over 180 s; the reference kernel is a tensordot
        return f"{mode} resize with exclude_outside"
    if attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize" and \
            any(roi is None for *_, roi in plan):
        return "tf_crop_and_resize without roi"
    return None


def _f64(v):
    return tvm.tirx.const(float(v), "float64")


def source_coord(mode, o, scale, n_in, n_out, roi):
    """The float64 input coordinate of output index ``o`` (and the extrapolation test or
    None), term by term as ``nnvm.ops.image.source_coords`` evaluates it. Like ONNX's own
    reference (and its node tests), ``align_corners`` and ``tf_crop_and_resize`` divide by
    ``scale * n_in - 1``, not by the integer output length minus one as onnxruntime does:
    the two differ when that product is not a whole number."""
    y = o.astype("float64")
    out_w = scale * n_in
    extrap = None
    if mode == "align_corners":
        x = _f64(0) if out_w == 1 else y * _f64(n_in - 1) / _f64(out_w - 1)
    elif mode == "asymmetric":
        x = y / _f64(scale)
    elif mode == "tf_crop_and_resize":
        span = roi[1] - roi[0]
        x = _f64(span * (n_in - 1) / 2) if out_w == 1 else \
            y * _f64(span) * _f64(n_in - 1) / _f64(out_w - 1)
        x = x + _f64(roi[0] * (n_in - 1))
        extrap = (x < _f64(0)) | (x > _f64(n_in - 1))
    elif mode == "pytorch_half_pixel":
        x = _f64(-0.5) if out_w == 1 else (y + _f64(0.5)) / _f64(scale) - _f64(0.5)
    elif mode == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / out_w)
        x = _f64(offset) + (y + _f64(0.5)) / _f64(scale) - _f64(0.5)
    elif mode == "tf_half_pixel_for_nn":
        x = (y + _f64(0.5)) / _f64(scale)
    else:  # half_pixel
        x = (y + _f64(0.5)) / _f64(scale) - _f64(0.5)
    return x, extrap


def _clip_index(v, n_in):
    return te.max(te.min(v, n_in - 1), 0)


def _taps(attrs, x, n_in, compute, bind):
    """``[(index, weight or None)]`` of one axis at coordinate ``x`` (a bound variable)."""
    base = bind(te.floor(x))
    ratio = bind(x - base)
    i0 = bind(base.astype("int64"))
    if attrs["mode"] == "nearest":
        right = {"round_prefer_floor": ratio > _f64(0.5), "round_prefer_ceil": ratio >= _f64(0.5),
                 "floor": tvm.tirx.const(False, "bool"),
                 "ceil": tvm.tirx.const(True, "bool")}[attrs["nearest_mode"]]
        # an integral coordinate is its own index (the reference's "whole" ratio)
        idx = tvm.tirx.Select(x == base, i0, tvm.tirx.Select(right, i0 + 1, i0))
        return [(_clip_index(idx, n_in), None)]
    if attrs["mode"] == "linear":
        r = bind(ratio.astype(compute))
        return [(_clip_index(i0, n_in), tvm.tirx.const(1, compute) - r),
                (_clip_index(i0 + 1, n_in), r)]
    return _cubic_taps(attrs, x, base, i0, n_in, compute, bind)


def _cubic_taps(attrs, x, base, i0, n_in, compute, bind):
    """Four taps of the cubic kernel (coefficient ``a``) as the reference places them: at
    ``floor(x) - 1 ..  floor(x) + 2`` with ratio ``x - floor(x)``, or for an integral ``x``
    at ``x - 2 .. x + 1`` with ratio 1 (weights 0, 0, 1, 0); ``exclude_outside`` zeroes the
    taps outside the input and renormalises."""
    a = _f64(attrs["cubic_coeff_a"])
    whole = x == base
    t = bind(tvm.tirx.Select(whole, _f64(1), x - base))
    start = bind(tvm.tirx.Select(whole, i0 - 2, i0 - 1))
    r1, q = bind(t + _f64(1)), bind(_f64(1) - t)
    one, two, three, five, eight, four = (_f64(v) for v in (1, 2, 3, 5, 8, 4))
    coeffs = [((a * r1 - five * a) * r1 + eight * a) * r1 - four * a,
              ((a + two) * t - (a + three)) * t * t + one,
              ((a + two) * q - (a + three)) * q * q + one,
              ((a * (q + one) - five * a) * (q + one) + eight * a) * (q + one) - four * a]
    idx = [start + k for k in range(4)]
    coeffs = [bind(c) for c in coeffs]
    if attrs.get("exclude_outside"):
        coeffs = [bind(tvm.tirx.Select((i < 0) | (i > n_in - 1), _f64(0), c))
                  for i, c in zip(idx, coeffs)]
        total = bind(coeffs[0] + coeffs[1] + coeffs[2] + coeffs[3])
        total = bind(tvm.tirx.Select(total == _f64(0), _f64(1), total))
        coeffs = [c / total for c in coeffs]
    return [(_clip_index(i, n_in), bind(c.astype(compute))) for i, c in zip(idx, coeffs)]


def axis_tables(attrs, step, n_in, compute, tag):
    """Per-axis tables of one resized axis, each a small ``(n_out,)`` block: the index of
    every tap (int32), its weight (``compute``; None for nearest) and the extrapolation
    flag (``tf_crop_and_resize`` only, else None). Why: the coordinate math depends on the
    output index along this axis alone, so a table of ``n_out`` entries replaces a float64
    division per output element (DeepLabV3's final 21x256x256 upsample spent 2.6 ms on it)."""
    axis, scale, n_out, roi = step
    mode = attrs["coordinate_transformation_mode"]

    def coord(o):
        return source_coord(mode, o.astype("int64"), scale, n_in, n_out, roi)

    n_taps = len(_taps(attrs, coord(tvm.tirx.Var("o", "int32"))[0], n_in, compute,
                       lambda e: e))

    def tap(k, part):
        # plain expressions, no Let: a table inlined into its readers (by a schedule that
        # does not keep ``resize_tab`` blocks) would repeat a Let's variable at every use,
        # which TVM rejects
        return lambda o: _taps(attrs, coord(o)[0], n_in, compute, lambda e: e)[k][part].astype(
            "int32" if part == 0 else compute)
    idx = [te.compute((n_out,), tap(k, 0), name=f"resize_tab{tag}_i{k}")
           for k in range(n_taps)]
    weights = [None] * n_taps if attrs["mode"] == "nearest" else [
        te.compute((n_out,), tap(k, 1), name=f"resize_tab{tag}_w{k}") for k in range(n_taps)]
    extrap = None
    if coord(tvm.tirx.Var("o", "int32"))[1] is not None:
        extrap = te.compute((n_out,), lambda o: coord(o)[1].astype("int32"),
                            name=f"resize_tab{tag}_x")
    return idx, weights, extrap


def application_order(attrs, plan, dtype):
    """The resized axes in the order the kernel applies them: innermost first, so that
    the gathers along the contiguous axis run on the smaller, not yet upsampled tensor and
    the last pass blends whole rows with two per-row weights (plain vector loads). Kept in
    the plan's order where the order is observable: ``tf_crop_and_resize`` extrapolation
    feeds later axes, and integer data rounds the float64 blend once at the end."""
    if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize" or \
            "float" not in dtype:
        return list(plan)
    return sorted(plan, key=lambda step: -step[0])


def interpolate(attrs, x, out_shape, name):
    """The TE tensor of ``resize(x)`` for a node ``reason`` accepted: one pass per resized
    axis (intermediate ``resize_stage`` blocks in the compute dtype), each reading its
    per-axis tables; the last pass is the output (with integer rounding and saturation)."""
    shape = [int(d) for d in x.shape]
    plan, _ = resize_plan(attrs, tuple(shape))
    dtype = str(x.dtype)
    compute = "float32" if dtype in ("float32", "float16") else "float64"
    ev = tvm.tirx.const(attrs.get("extrapolation_value", 0.0), compute)
    order = application_order(attrs, plan, dtype)
    if not order:  # every axis keeps its size and its roi is the whole axis: a copy
        return te.compute(tuple(out_shape), lambda *i: x[i], name=name)
    cur = x
    for level, step in enumerate(order):
        axis, n_out = step[0], step[2]
        tables = axis_tables(attrs, step, shape[axis], compute, level)
        shape[axis] = n_out
        last = level == len(order) - 1
        cur = te.compute(tuple(shape), _pass(cur, axis, tables, compute, ev,
                                             dtype if last else None),
                         name=name if last else f"resize_stage{level}")
    return cur


def _pass(src, axis, tables, compute, ev, final):
    """The body of one per-axis pass over ``src``; ``final``: the output dtype of the last
    pass (integers rounded half to even and saturated, as the reference does), else None."""
    idx, weights, extrap = tables

    def body(*o):
        total = None
        for it, wt in zip(idx, weights):
            sub = list(o)
            sub[axis] = it[o[axis]]
            term = src[tuple(sub)]
            term = term.astype(compute) if str(term.dtype) != compute else term
            term = term if wt is None else wt[o[axis]] * term
            total = term if total is None else total + term
        if extrap is not None:
            total = tvm.tirx.Select(extrap[o[axis]] != 0, ev, total)
        if final is None or final == compute:
            return total
        if "float" not in final:  # np.clip(np.round(y), min, max) of the reference
            total = te.min(te.max(te.nearbyint(total), tvm.tirx.const(
                te.min_value(final).value, compute)), tvm.tirx.const(
                    te.max_value(final).value, compute))
        return total.astype(final)
    return body
