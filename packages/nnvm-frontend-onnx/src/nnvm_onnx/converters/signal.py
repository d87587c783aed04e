"""Signal processing and newer activations: windows, DFT/STFT, BitCast, CumProd, Swish, SwiGLU.

Window generators take only a size, so they fold to constants (the size must be known at
import time, like any shape).
"""

from __future__ import annotations

import numpy as np

from ..registry import converter
from ..tensors import np_dtype, onnx_dtype_name
from .common import cast, norm_axis


def _window(kind):
    def convert(ctx, node):
        size = int(np.asarray(ctx.const(0)).reshape(-1)[0])
        periodic = bool(ctx.attr("periodic", 1))
        dtype = onnx_dtype_name(ctx.attr("output_datatype", 1), ctx.where)
        n = np.arange(size, dtype=np.float64)
        denom = size if periodic else size - 1
        phase = 2 * np.pi * n / max(denom, 1)
        if kind == "hann":
            w = 0.5 - 0.5 * np.cos(phase)
        elif kind == "hamming":
            w = 25 / 46 - (21 / 46) * np.cos(phase)
        else:
            w = 0.42 - 0.5 * np.cos(phase) + 0.08 * np.cos(2 * phase)
        return [ctx.constant(w.astype(np_dtype(dtype)))]
    return convert


converter("HannWindow", since=17)(_window("hann"))
converter("HammingWindow", since=17)(_window("hamming"))
converter("BlackmanWindow", since=17)(_window("blackman"))


@converter("DFT", since=17, requires=("dft",))
def _dft(ctx, node):
    x = ctx.input(0)
    rank = ctx.rank(x)
    length = int(np.asarray(ctx.const(1)).reshape(-1)[0]) if ctx.has_input(1) else None
    if ctx.opset >= 20:
        axis = int(np.asarray(ctx.const(2)).reshape(-1)[0]) if ctx.has_input(2) else -2
    else:
        axis = ctx.attr("axis", 1)
    return [ctx.op("dft", x, axis=norm_axis(ctx, axis, rank), length=length,
                   inverse=bool(ctx.attr("inverse", 0)), onesided=bool(ctx.attr("onesided", 0)))]


@converter("STFT", since=17, requires=("stft",))
def _stft(ctx, node):
    step = int(np.asarray(ctx.const(1)).reshape(-1)[0])
    window = ctx.input(2) if ctx.has_input(2) else None
    if ctx.has_input(3):
        length = int(np.asarray(ctx.const(3)).reshape(-1)[0])
    else:
        length = ctx.shape(window)[0]
    ins = [ctx.input(0)] + ([cast(ctx, window, ctx.dtype(0))] if window is not None else [])
    return [ctx.op("stft", *ins, frame_step=step, frame_length=length,
                   onesided=bool(ctx.attr("onesided", 1)), use_window=window is not None)]


@converter("BitCast", since=26, requires=("bitcast",))
def _bitcast(ctx, node):
    return [ctx.op("bitcast", ctx.input(0), dtype=onnx_dtype_name(ctx.attr("to"), ctx.where))]


@converter("CumProd", since=26, requires=("cumprod",))
def _cumprod(ctx, node):
    x = ctx.input(0)
    axis = norm_axis(ctx, int(np.asarray(ctx.const(1)).reshape(-1)[0]), ctx.rank(x))
    return [ctx.op("cumprod", x, axis=axis, exclusive=bool(ctx.attr("exclusive", 0)),
                   reverse=bool(ctx.attr("reverse", 0)))]


@converter("Swish", since=24, requires=("swish",))
def _swish(ctx, node):
    return [ctx.op("swish", ctx.input(0), alpha=ctx.attr("alpha", 1.0))]


@converter("SwiGLU", since=28, requires=("swish",))
def _swiglu(ctx, node):
    gate = ctx.op("swish", ctx.input(0), alpha=ctx.attr("alpha", 1.0))
    return [ctx.op("broadcast_mul", gate, ctx.input(1))]


def _linspace(n: int, align_corners: bool) -> np.ndarray:
    if align_corners:
        return np.linspace(-1.0, 1.0, n) if n > 1 else np.zeros(1)
    return (np.arange(n, dtype=np.float64) * 2 + 1) / n - 1


@converter("AffineGrid", since=20, requires=("matmul",))
def _affine_grid(ctx, node):
    """grid = [x, y, (z,) 1] @ theta^T over a constant base grid (one matmul)."""
    theta = ctx.input(0)
    size = [int(v) for v in np.asarray(ctx.const(1)).reshape(-1)]
    align = bool(ctx.attr("align_corners", 0))
    spatial = size[2:]
    axes = [_linspace(n, align) for n in spatial]  # (D,) H, W
    mesh = np.meshgrid(*axes, indexing="ij")
    coords = [m.reshape(-1) for m in reversed(mesh)]  # x first, as ONNX/PyTorch
    base = np.stack(coords + [np.ones_like(coords[0])], axis=-1)
    base = ctx.constant(base.astype(np_dtype(ctx.dtype(theta))))
    out = ctx.op("matmul", base, theta, transpose_b=True)
    shape = (size[0], *spatial, len(spatial))
    return [ctx.op("reshape", out, shape=shape)]
