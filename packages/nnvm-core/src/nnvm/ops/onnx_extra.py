"""ONNX ops with no counterpart in the other families: bit casts and Fourier transforms.

``bitcast`` reinterprets bits (same width, same shape). ``dft`` and ``stft`` follow ONNX's
real-tensor encoding of complex numbers: a trailing axis of size 2 (real, imaginary), or 1
for a real input.
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..op import OpPattern, OpSet
from ..params import Param

defs = OpSet("onnx_extra")


def _np(dtype: str):
    if dtype == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype)


def _bitcast_dtype(attrs, ins, outs):
    if ins[0] is not None and _np(ins[0]).itemsize != _np(attrs["dtype"]).itemsize:
        raise ShapeError(f"bitcast needs equal bit widths; got {ins[0]} -> {attrs['dtype']}")
    return ins, [attrs["dtype"]]


defs.op("bitcast", doc="Reinterpret the bits of each element as `dtype` (same width).",
            params=[Param("dtype", "dtype", doc="target dtype, same bit width")],
            shape=lambda attrs, ins, outs: (ins, [ins[0]]), dtype=_bitcast_dtype,
            reference=lambda attrs, x: np.asarray(x, order="C").view(_np(attrs["dtype"])),
            pattern=OpPattern.ELEMWISE, support_level=3)


def _as_complex(x):
    return x[..., 0].astype(np.complex128) if x.shape[-1] == 1 else x[..., 0] + 1j * x[..., 1]


def _dft_len(attrs, n):
    return n if attrs["length"] is None else attrs["length"]


def _dft_shape(attrs, ins, outs):
    s = ins[0]
    if s is None:
        return ins, outs
    axis = attrs["axis"] % len(s)
    if axis == len(s) - 1 or s[-1] not in (1, 2):
        raise ShapeError(f"dft needs (..., signal, 1|2) with axis on the signal; got {s}, "
                         f"axis {attrs['axis']}")
    out = list(s)
    if attrs["inverse"] and attrs["onesided"]:  # half spectrum in, real signal out
        out[axis] = attrs["length"] or 2 * (s[axis] - 1)
        out[-1] = 1
        return ins, [tuple(out)]
    n = _dft_len(attrs, s[axis])
    out[axis] = n // 2 + 1 if attrs["onesided"] else n
    out[-1] = 2
    return ins, [tuple(out)]


def _dft_ref(attrs, x):
    axis = attrs["axis"] % x.ndim
    c = _as_complex(x)
    if attrs["inverse"] and attrs["onesided"]:
        n = attrs["length"] or 2 * (x.shape[axis] - 1)
        return np.fft.irfft(c, n, axis=axis)[..., None].astype(x.dtype)
    n = _dft_len(attrs, x.shape[axis])
    y = np.fft.ifft(c, n, axis=axis) if attrs["inverse"] else np.fft.fft(c, n, axis=axis)
    if attrs["onesided"]:
        y = np.take(y, np.arange(n // 2 + 1), axis=axis)
    return np.stack([y.real, y.imag], axis=-1).astype(x.dtype)


defs.op("dft", doc="Discrete Fourier transform along `axis` of a (..., 1|2) real/complex "
            "tensor; `length` zero-pads or truncates; `onesided` keeps n//2+1 bins.",
            params=[Param("axis", "int", 1, "signal axis (counting the trailing axis)"),
                    Param("inverse", "bool", False, "inverse transform (scaled by 1/n)"),
                    Param("onesided", "bool", False, "keep the non-redundant half"),
                    Param("length", "int_or_none", None, "transform length; None = axis size")],
            shape=_dft_shape, reference=_dft_ref, pattern=OpPattern.OPAQUE, support_level=5)


def _stft_frames(attrs, length):
    return 1 + (length - attrs["frame_length"]) // attrs["frame_step"]


def _stft_shape(attrs, ins, outs):
    s = ins[0]
    if s is None:
        return ins, outs
    if len(s) != 3 or s[-1] not in (1, 2) or s[1] < attrs["frame_length"]:
        raise ShapeError(f"stft needs (batch, length >= frame_length, 1|2); got {s}")
    n = attrs["frame_length"]
    bins = n // 2 + 1 if attrs["onesided"] else n
    return ins, [(s[0], _stft_frames(attrs, s[1]), bins, 2)]


def _stft_ref(attrs, x, *window):
    c = _as_complex(x)
    n, step = attrs["frame_length"], attrs["frame_step"]
    w = window[0].astype(np.float64) if window else np.ones(n)
    frames = np.stack([c[:, f * step:f * step + n] * w
                       for f in range(_stft_frames(attrs, x.shape[1]))], axis=1)
    y = np.fft.fft(frames, axis=-1)
    if attrs["onesided"]:
        y = y[..., : n // 2 + 1]
    return np.stack([y.real, y.imag], axis=-1).astype(x.dtype)


defs.op("stft", doc="Short-time Fourier transform of (batch, length, 1|2) signals: "
            "frames of frame_length every frame_step, optionally windowed.",
            inputs=lambda attrs: ["signal"] + (["window"] if attrs["use_window"] else []),
            params=[Param("frame_step", "int", doc="hop between frames"),
                    Param("frame_length", "int", doc="samples per frame"),
                    Param("onesided", "bool", True, "keep the non-redundant half"),
                    Param("use_window", "bool", False, "multiply frames by the window input")],
            shape=_stft_shape, dtype=lambda attrs, ins, outs: (ins, [ins[0]]),
            reference=_stft_ref, pattern=OpPattern.OPAQUE, support_level=5)


# -- grid_sample ---------------------------------------------------------------------------------

def _unnormalize(c, n, align):
    return (c + 1) / 2 * (n - 1) if align else ((c + 1) * n - 1) / 2


def _reflect(x, lo, hi):
    span = hi - lo
    if span <= 0:
        return np.zeros_like(x)
    y = np.abs(x - lo) % (2 * span)
    return lo + np.where(y > span, 2 * span - y, y)


def _fetch(x, idx, sizes, padding, align):
    """x[n, c, idx...] per output location; out-of-range per the padding mode."""
    valid = np.ones(idx[0].shape, dtype=bool)
    fixed = []
    for i, n in zip(idx, sizes):
        if padding == "zeros":
            valid &= (i >= 0) & (i < n)
            fixed.append(np.clip(i, 0, n - 1))
        elif padding == "border":
            fixed.append(np.clip(i, 0, n - 1))
        else:
            lo, hi = (0, n - 1) if align else (-0.5, n - 0.5)
            refl = _reflect(i.astype(np.float64), lo, hi)
            refl = np.round(refl) if align else np.floor(refl + 0.5)
            fixed.append(np.clip(refl, 0, n - 1).astype(np.int64))
    batch = np.arange(x.shape[0]).reshape((-1,) + (1,) * (idx[0].ndim - 1))
    gathered = x.transpose(0, *range(2, x.ndim), 1)[(batch, *fixed)]  # (N, *out, C)
    gathered = np.where(valid[..., None], gathered, 0)
    return np.moveaxis(gathered, -1, 1)


def _cubic_weights(t, a=-0.75):
    def w(d):
        d = np.abs(d)
        return np.where(d <= 1, ((a + 2) * d - (a + 3)) * d * d + 1,
                        np.where(d < 2, ((a * d - 5 * a) * d + 8 * a) * d - 4 * a, 0.0))
    return [w(t + 1), w(t), w(1 - t), w(2 - t)]


def _grid_sample_ref(attrs, x, grid):
    import itertools

    nd = x.ndim - 2
    sizes = x.shape[2:]
    align, mode, padding = attrs["align_corners"], attrs["mode"], attrs["padding_mode"]
    g = grid.astype(np.float64)
    coords = []
    for d in range(nd):
        c = _unnormalize(g[..., nd - 1 - d], sizes[d], align)
        if padding == "border":
            c = np.clip(c, 0, sizes[d] - 1)
        elif padding == "reflection":
            c = _reflect(c, 0, sizes[d] - 1) if align else _reflect(c, -0.5, sizes[d] - 0.5)
        coords.append(c)
    xf = x.astype(np.float64)
    if mode == "nearest":
        idx = [np.rint(c).astype(np.int64) for c in coords]
        return _fetch(xf, idx, sizes, padding, align).astype(x.dtype)
    if mode == "linear":
        base = [np.floor(c).astype(np.int64) for c in coords]
        frac = [c - b for c, b in zip(coords, base)]
        out = 0
        for corner in itertools.product((0, 1), repeat=nd):
            w = 1.0
            for k, f in zip(corner, frac):
                w = w * (f if k else 1 - f)
            v = _fetch(xf, [b + k for b, k in zip(base, corner)], sizes, padding, align)
            out = out + v * w[:, None]
        return np.asarray(out).astype(x.dtype)
    base = [np.floor(c).astype(np.int64) for c in coords]
    weights = [_cubic_weights(c - b) for c, b in zip(coords, base)]
    out = 0
    for offs in itertools.product(range(4), repeat=nd):
        w = 1.0
        for d, o in enumerate(offs):
            w = w * weights[d][o]
        v = _fetch(xf, [b + o - 1 for b, o in zip(base, offs)], sizes, padding, align)
        out = out + v * w[:, None]
    return np.asarray(out).astype(x.dtype)


def _grid_sample_shape(attrs, ins, outs):
    x, g = ins
    if x is None or g is None:
        return ins, outs
    if len(g) != len(x) or g[-1] != len(x) - 2 or g[0] != x[0]:
        raise ShapeError(f"grid must be (N, *out_spatial, {len(x) - 2}) for data {x}; got {g}")
    return ins, [(x[0], x[1], *g[1:-1])]


defs.op("grid_sample", doc="Sample data (N, C, *spatial) at the normalised grid "
            "locations (N, *out, ndim), as ONNX GridSample / torch grid_sample.",
            inputs=("data", "grid"),
            params=[Param("mode", "str", "linear", "interpolation",
                          ("linear", "nearest", "cubic")),
                    Param("padding_mode", "str", "zeros", "outside the input",
                          ("zeros", "border", "reflection")),
                    Param("align_corners", "bool", False, "-1/1 are corner pixel centres")],
            shape=_grid_sample_shape, dtype=lambda attrs, ins, outs: (ins, [ins[0]]),
            reference=_grid_sample_ref, pattern=OpPattern.OPAQUE, support_level=5)


# -- col2im / max_unpool -------------------------------------------------------------------------

def _col2im_geometry(attrs):
    img, blk = attrs["image_shape"], attrs["block_shape"]
    nd = len(img)
    dil = attrs["dilations"] or (1,) * nd
    strides = attrs["strides"] or (1,) * nd
    pads = attrs["pads"] or (0,) * (2 * nd)
    padded = [img[i] + pads[i] + pads[i + nd] for i in range(nd)]
    blocks = [(padded[i] - dil[i] * (blk[i] - 1) - 1) // strides[i] + 1 for i in range(nd)]
    return img, blk, dil, strides, pads, padded, blocks


def _col2im_shape(attrs, ins, outs):
    s = ins[0]
    if s is None:
        return ins, outs
    img, blk, _, _, _, _, blocks = _col2im_geometry(attrs)
    k = int(np.prod(blk))
    if len(s) != 3 or s[1] % k or s[2] != int(np.prod(blocks)):
        raise ShapeError(f"col2im input must be (N, C*{k}, {int(np.prod(blocks))}); got {s}")
    return ins, [(s[0], s[1] // k, *img)]


def _col2im_ref(attrs, x):
    img, blk, dil, strides, pads, padded, blocks = _col2im_geometry(attrs)
    nd = len(img)
    n, c = x.shape[0], x.shape[1] // int(np.prod(blk))
    cols = x.reshape(n, c, *blk, *blocks)
    out = np.zeros((n, c, *padded), dtype=x.dtype)
    for kpos in np.ndindex(*blk):
        window = tuple(slice(kpos[i] * dil[i], kpos[i] * dil[i] + strides[i] *
                             (blocks[i] - 1) + 1, strides[i]) for i in range(nd))
        out[(slice(None), slice(None), *window)] += cols[(slice(None), slice(None), *kpos)]
    crop = tuple(slice(pads[i], pads[i] + img[i]) for i in range(nd))
    return out[(slice(None), slice(None), *crop)]


defs.op("col2im", doc="Rearrange column blocks (N, C*prod(block), L) back into images "
            "(N, C, *image_shape), summing overlaps (ONNX Col2Im, torch fold).",
            params=[Param("image_shape", "ints", doc="spatial output size"),
                    Param("block_shape", "ints", doc="spatial block size"),
                    Param("dilations", "ints", (), "per spatial axis; empty = 1s"),
                    Param("pads", "ints", (), "begins then ends; empty = 0s"),
                    Param("strides", "ints", (), "per spatial axis; empty = 1s")],
            shape=_col2im_shape, reference=_col2im_ref, pattern=OpPattern.OPAQUE,
            support_level=5)


def _unpool_shape(attrs, ins, outs):
    return ins, [tuple(attrs["output_shape"])]


def _unpool_ref(attrs, x, indices):
    out = np.zeros(int(np.prod(attrs["output_shape"])), dtype=x.dtype)
    out[indices.reshape(-1)] = x.reshape(-1)
    return out.reshape(attrs["output_shape"])


defs.op("max_unpool", doc="Scatter pooled values back to the flat positions `indices` "
            "(from max_pool) of a zero tensor of `output_shape` (ONNX MaxUnpool).",
            inputs=("data", "indices"),
            params=[Param("output_shape", "ints", doc="full output shape")],
            shape=_unpool_shape, dtype=lambda attrs, ins, outs: (ins, [ins[0]]),
            reference=_unpool_ref, pattern=OpPattern.OPAQUE, support_level=5)


def _tensor_scatter_ref(attrs, past, update, *write_indices):
    axis = attrs["axis"] % past.ndim
    out = past.copy()
    batch = past.shape[0]
    starts = write_indices[0].reshape(-1) if write_indices else np.zeros(batch, np.int64)
    length, cap = update.shape[axis], past.shape[axis]
    for b in range(batch):
        pos = int(starts[b]) + np.arange(length)
        if attrs["mode"] == "circular":
            pos = pos % cap
        dst = np.moveaxis(out[b], axis - 1, 0) if axis else out
        src = np.moveaxis(update[b], axis - 1, 0)
        dst[pos] = src
    return out


defs.op("tensor_scatter", doc="Write `update` into a copy of the cache `past` along axis "
            "from each batch row's write index (ONNX TensorScatter, a KV-cache update).",
            inputs=lambda attrs: ["past", "update"] + (["write_indices"]
                                                       if attrs["use_indices"] else []),
            params=[Param("axis", "int", -2, "the sequence axis (not the batch axis 0)"),
                    Param("mode", "str", "linear", "circular wraps indices modulo the axis",
                          ("linear", "circular")),
                    Param("use_indices", "bool", False, "write_indices input present")],
            shape=lambda attrs, ins, outs: (ins, [ins[0]]),
            dtype=lambda attrs, ins, outs: (ins, [ins[0]]),
            reference=_tensor_scatter_ref, pattern=OpPattern.OPAQUE, support_level=5)
