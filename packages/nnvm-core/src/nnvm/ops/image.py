"""Image ops with ONNX semantics: resize (every mode of ONNX Resize), depth/space shuffles.

Resize is separable: along each resized axis the output is ``W @ x`` for a sparse
(out x in) weight matrix built from the coordinate transformation and the interpolation
kernel (nearest, linear, cubic; antialiased filters when downsampling). The same matrix,
transposed, is the gradient. Axes are resized in order, so ``tf_crop_and_resize``
extrapolation behaves exactly as ONNX's reference (the filled value takes part in the
interpolation of later axes).
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..op import OpPattern, OpSet
from ..params import Param
from .common import op, same_dtype

defs = OpSet("image")

_COORD = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
          "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize")


def resize_plan(attrs, shape):
    """Per-axis (scale, out_size, roi pair) for the axes that change, and the output shape."""
    r = len(shape)
    axes = [a % r for a in attrs["axes"]] if attrs["axes"] is not None else list(range(r))
    scales = [1.0] * r
    sizes = list(shape)
    if attrs["sizes"] is not None:
        if len(attrs["sizes"]) != len(axes):
            raise ShapeError(f"sizes needs one entry per resized axis ({len(axes)}); got "
                             f"{attrs['sizes']}")
        for a, s in zip(axes, attrs["sizes"]):
            sizes[a] = s
            scales[a] = s / shape[a]
        policy = attrs["keep_aspect_ratio_policy"]
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            sc = pick(scales[a] for a in axes)
            for a in axes:
                scales[a], sizes[a] = sc, int(sc * shape[a] + 0.5)
    elif attrs["scales"]:
        if len(attrs["scales"]) != len(axes):
            raise ShapeError(f"scales needs one entry per resized axis ({len(axes)}); got "
                             f"{attrs['scales']}")
        for a, s in zip(axes, attrs["scales"]):
            scales[a], sizes[a] = s, int(s * shape[a])
    else:
        raise ShapeError("resize needs `sizes` or `scales`")
    roi = list(attrs["roi"])
    full_roi = None
    if roi:
        full_roi = [0.0] * r + [1.0] * r
        for i, a in enumerate(axes):
            full_roi[a], full_roi[r + a] = roi[i], roi[len(axes) + i]
    plan = []
    for a in axes:
        pair = None if full_roi is None else (full_roi[a], full_roi[r + a])
        if np.isclose(scales[a], 1.0) and sizes[a] == shape[a] and (
                pair is None or (np.isclose(pair[0], 0) and np.isclose(pair[1], 1))):
            continue
        plan.append((a, scales[a], sizes[a], pair))
    return plan, tuple(sizes)


def source_coords(mode, y, scale, n_in, n_out, roi):
    """Input coordinates of output coordinates ``y`` on one resized axis under the
    ``coordinate_transformation_mode`` ``mode``, and the extrapolation mask (or None)."""
    out_w = scale * n_in
    extrap = None
    if mode == "align_corners":
        x = np.zeros_like(y) if out_w == 1 else y * (n_in - 1) / (out_w - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_crop_and_resize":
        if roi is None:
            raise ShapeError("coordinate_transformation_mode tf_crop_and_resize needs roi")
        x = np.full_like(y, (roi[1] - roi[0]) * (n_in - 1) / 2) if out_w == 1 else \
            y * (roi[1] - roi[0]) * (n_in - 1) / (out_w - 1)
        x = x + roi[0] * (n_in - 1)
        extrap = (x < 0) | (x > n_in - 1)
    elif mode == "pytorch_half_pixel":
        x = np.full_like(y, -0.5) if out_w == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / out_w)
        x = offset + (y + 0.5) / scale - 0.5
    elif mode == "tf_half_pixel_for_nn":
        x = (y + 0.5) / scale
    else:  # half_pixel
        x = (y + 0.5) / scale - 0.5
    return x, extrap


def _coeffs(attrs, ratio, scale):
    """Interpolation weights (out, n) for the ratios in (0, 1] (ONNX's convention)."""
    mode = attrs["mode"]
    anti = attrs["antialias"] and scale < 1.0
    if mode == "nearest":
        nm = attrs["nearest_mode"]
        whole = ratio == 1.0
        right = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
                 "floor": np.zeros_like(whole), "ceil": np.ones_like(whole)}[nm] | whole
        return np.stack([~right, right], axis=1).astype(np.float64)
    if mode == "linear" and not anti:
        return np.stack([1 - ratio, ratio], axis=1)
    a = attrs["cubic_coeff_a"]
    if mode == "cubic" and not anti:
        r1, q = ratio + 1, 1 - ratio
        return np.stack([((a * r1 - 5 * a) * r1 + 8 * a) * r1 - 4 * a,
                         ((a + 2) * ratio - (a + 3)) * ratio * ratio + 1,
                         ((a + 2) * q - (a + 3)) * q * q + 1,
                         ((a * (q + 1) - 5 * a) * (q + 1) + 8 * a) * (q + 1) - 4 * a], axis=1)
    s = min(scale, 1.0)
    if mode == "linear":
        start = int(np.floor(-1 / s) + 1)
        args = (np.arange(start, 2 - start)[None, :] - ratio[:, None]) * s
        c = np.clip(1 - np.abs(args), 0, 1)
    else:
        start = int(np.floor(-2 / s) + 1)
        t = np.abs(s * (np.arange(start, 2 - start)[None, :] - ratio[:, None]))
        c = np.where(t <= 1, (a + 2) * t ** 3 - (a + 3) * t ** 2 + 1,
                     np.where(t < 2, a * t ** 3 - 5 * a * t ** 2 + 8 * a * t - 4 * a, 0.0))
    return c / c.sum(axis=1, keepdims=True)


def axis_matrix(attrs, n_in, scale, n_out, roi):
    """Dense (n_out, n_in) weights of one axis and its extrapolation mask (or None)."""
    y = np.arange(n_out, dtype=np.float64)
    x, extrap = source_coords(attrs["coordinate_transformation_mode"], y, scale, n_in,
                               n_out, roi)
    base = np.floor(x)
    ratio = np.where(x == base, 1.0, x - base)
    c = _coeffs(attrs, ratio, scale)
    n = c.shape[1]
    pad = int(np.ceil(n / 2))
    xp = x + pad
    p = np.floor(xp).astype(np.int64)
    frac = xp - p
    if n % 2 == 0:
        off = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        off = np.where(frac <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    idx = (p + off)[:, None] + np.arange(n)[None, :] - pad
    if attrs["exclude_outside"]:
        c = np.where((idx < 0) | (idx >= n_in), 0.0, c)
        tot = c.sum(axis=1, keepdims=True)
        c = c / np.where(tot == 0, 1.0, tot)
    w = np.zeros((n_out, n_in))
    np.add.at(w, (np.repeat(np.arange(n_out), n), np.clip(idx, 0, n_in - 1).reshape(-1)),
              c.reshape(-1))
    if extrap is not None:
        w[extrap] = 0.0
    return w, extrap


def _apply(w, x, axis):
    return np.moveaxis(np.tensordot(w, x, axes=([1], [axis])), 0, axis)


def _cast_back(y, like):
    if like.dtype.kind in "iu":
        info = np.iinfo(like.dtype)
        return np.clip(np.round(y), info.min, info.max).astype(like.dtype)
    return y.astype(like.dtype)


def _resize_ref(attrs, x):
    plan, _ = resize_plan(attrs, x.shape)
    y = x.astype(np.float64)
    for axis, scale, n_out, roi in plan:
        w, extrap = axis_matrix(attrs, y.shape[axis], scale, n_out, roi)
        y = _apply(w, y, axis)
        if extrap is not None and extrap.any():
            mask = extrap.reshape((1,) * axis + (-1,) + (1,) * (y.ndim - axis - 1))
            y = np.where(mask, attrs["extrapolation_value"], y)
    return _cast_back(y, x)


def _resize_backward_ref(attrs, og, x):
    plan, _ = resize_plan(attrs, x.shape)
    shapes, mats = [x.shape], []
    for axis, scale, n_out, roi in plan:
        w, _ = axis_matrix(attrs, shapes[-1][axis], scale, n_out, roi)
        mats.append((axis, w))
        s = list(shapes[-1])
        s[axis] = n_out
        shapes.append(tuple(s))
    g = og.astype(np.float64)
    for axis, w in reversed(mats):
        g = _apply(w.T, g, axis)
    return g.astype(og.dtype)


def _resize_shape(attrs, ins, outs):
    x = ins[0]
    if x is None:
        return ins, outs
    return ins, [resize_plan(attrs, x)[1]]


def _resize_grad(n, og):
    return [op("_resize_backward", og[0], n.inputs[0], **n.attrs)]


_RESIZE_PARAMS = [
    Param("sizes", "ints_or_none", None, "output size per resized axis"),
    Param("scales", "floats", (), "scale per resized axis (when sizes is None)"),
    Param("roi", "floats", (), "(starts..., ends...) per resized axis, tf_crop_and_resize"),
    Param("axes", "ints_or_none", None, "resized axes; None = all"),
    Param("mode", "str", "nearest", "interpolation", ("nearest", "linear", "cubic")),
    Param("coordinate_transformation_mode", "str", "half_pixel", "output -> input mapping",
          _COORD),
    Param("nearest_mode", "str", "round_prefer_floor", "rounding of nearest",
          ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")),
    Param("cubic_coeff_a", "float", -0.75, "cubic kernel coefficient"),
    Param("exclude_outside", "bool", False, "zero weights outside the input, renormalise"),
    Param("extrapolation_value", "float", 0.0, "fill outside the input (tf_crop_and_resize)"),
    Param("antialias", "bool", False, "widen linear/cubic filters when downsampling"),
    Param("keep_aspect_ratio_policy", "str", "stretch", "how sizes keep the aspect ratio",
          ("stretch", "not_larger", "not_smaller")),
]
defs.op_once("resize", doc="ONNX Resize (opsets 10-19): nearest, linear or cubic "
              "interpolation of any axes with every coordinate transformation mode.",
              inputs=("data",), params=_RESIZE_PARAMS, shape=_resize_shape, dtype=same_dtype,
              reference=_resize_ref, gradient=_resize_grad, pattern=OpPattern.INJECTIVE,
              support_level=1)
defs.op_once("_resize_backward", doc="Gradient of resize: the transposed interpolation.",
              inputs=("out_grad", "data"), params=_RESIZE_PARAMS,
              shape=lambda attrs, ins, outs: (ins, [ins[1]]), dtype=same_dtype,
              reference=_resize_backward_ref, pattern=OpPattern.OPAQUE,
              FIgnoreInputs=lambda attrs: [1])


# -- depth / space ------------------------------------------------------------------------------

def _d2s_shape(attrs, ins, outs):
    x, b = ins[0], attrs["blocksize"]
    if x is None:
        return ins, outs
    if x[1] % (b * b):
        raise ShapeError(f"channels {x[1]} are not divisible by blocksize^2 = {b * b}")
    return ins, [(x[0], x[1] // (b * b), x[2] * b, x[3] * b)]


def _d2s_ref(attrs, x):
    n, c, h, w = x.shape
    b = attrs["blocksize"]
    if attrs["mode"] == "DCR":
        t = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        t = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return t.reshape(n, c // (b * b), h * b, w * b)


def _s2d_shape(attrs, ins, outs):
    x, b = ins[0], attrs["blocksize"]
    if x is None:
        return ins, outs
    if x[2] % b or x[3] % b:
        raise ShapeError(f"spatial size {x[2:]} is not divisible by blocksize {b}")
    return ins, [(x[0], x[1] * b * b, x[2] // b, x[3] // b)]


_BLOCK = Param("blocksize", "int", doc="block edge")
_MODE = Param("mode", "str", "DCR", "channel order", ("DCR", "CRD"))
defs.op_once("depth_to_space", doc="Move channel blocks into spatial blocks (NCHW; DCR or CRD "
              "order as ONNX DepthToSpace).", inputs=("data",),
              params=[_BLOCK, _MODE], shape=_d2s_shape, dtype=same_dtype, reference=_d2s_ref,
              gradient=lambda n, og: [op("space_to_depth", og[0], **n.attrs)],
              pattern=OpPattern.INJECTIVE, support_level=5)


def _s2d_ref(attrs, x):
    n, c, h, w = x.shape
    b = attrs["blocksize"]
    t = x.reshape(n, c, h // b, b, w // b, b)
    t = t.transpose(0, 3, 5, 1, 2, 4) if attrs["mode"] == "DCR" else \
        t.transpose(0, 1, 3, 5, 2, 4)
    return t.reshape(n, c * b * b, h // b, w // b)


defs.op_once("space_to_depth", doc="Move spatial blocks into channels (NCHW, ONNX SpaceToDepth; "
              "the inverse of depth_to_space in the same mode).", inputs=("data",),
              params=[_BLOCK, _MODE], shape=_s2d_shape, dtype=same_dtype, reference=_s2d_ref,
              gradient=lambda n, og: [op("depth_to_space", og[0], **n.attrs)],
              pattern=OpPattern.INJECTIVE, support_level=5)

