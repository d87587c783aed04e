"""Helpers shared by converters: axis normalisation, casts, auto_pad, broadcasting chains."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import OnnxImportError, format_error


def norm_axis(ctx, axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise OnnxImportError(format_error(ctx.where, f"axis {axis} is out of range for rank "
                                           f"{rank}", f"in [{-rank}, {rank})", axis))
    return axis + rank if axis < 0 else axis


def norm_axes(ctx, axes: Sequence[int], rank: int) -> tuple[int, ...]:
    return tuple(norm_axis(ctx, int(a), rank) for a in axes)


def cast(ctx, value, dtype: str):
    """``value`` as ``dtype`` (no node when it already is)."""
    if value.dtype == dtype:
        return value
    return ctx.op("cast", value, dtype=dtype)


def chain(ctx, op_name: str, values):
    """Left fold of a binary broadcasting op over ``values`` (Sum, Max, Mean...)."""
    out = values[0]
    for v in values[1:]:
        out = ctx.op(op_name, out, v)
    return out


def scalar_like(ctx, value, number):
    """A scalar constant in the dtype of ``value``."""
    from ..tensors import np_dtype

    return ctx.constant(np.array(number, dtype=np_dtype(ctx.dtype(value))))


def auto_pads(ctx, in_spatial, kernel, strides, dilations, mode: str):
    """Explicit ONNX-order pads (begins..., ends...) for an ``auto_pad`` mode."""
    n = len(in_spatial)
    if mode in ("NOTSET", ""):
        return None
    if mode == "VALID":
        return (0,) * (2 * n)
    if mode not in ("SAME_UPPER", "SAME_LOWER"):
        raise OnnxImportError(format_error(ctx.where, f"unknown auto_pad '{mode}'",
                                           fix="Use NOTSET, VALID, SAME_UPPER or SAME_LOWER"))
    begins, ends = [], []
    for i in range(n):
        out = -(-in_spatial[i] // strides[i])
        eff = (kernel[i] - 1) * dilations[i] + 1
        total = max(0, (out - 1) * strides[i] + eff - in_spatial[i])
        small, big = total // 2, total - total // 2
        if mode == "SAME_UPPER":
            begins.append(small)
            ends.append(big)
        else:
            begins.append(big)
            ends.append(small)
    return tuple(begins) + tuple(ends)
