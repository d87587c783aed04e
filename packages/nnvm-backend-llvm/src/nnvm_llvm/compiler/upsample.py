"""``resize`` compiled for llvm: a plain gather for whole-number nearest scales, else the
coordinate-mapping kernel of ``resize_interp`` (nearest, linear, cubic; every coordinate
mode).

Detectors and text detectors upsample their feature pyramids with ``Resize(mode=nearest,
scales=2)``; run by the NumPy reference (float64 tensordot) it took half of a YOLO-class
model's time. For those the source index of every output position is not re-derived: the
op's own reference kernel maps a tensor of flat indices at build time, and the gather applies
only when that map is exactly ``i // s`` on every resized axis. Every other nearest, linear
or cubic resize is one pass per axis over per-axis index/weight tables (``resize_interp``,
scheduled by ``resize_schedule``); antialiased downsampling keeps the reference kernel,
with the reason in ``stats()``.
Registered only when the lowering table has no ``resize`` rule of its own.
"""

from __future__ import annotations

import numpy as np
from tvm import te

from nnvm.op import get_op

from . import lowering, resize_interp, resize_schedule
from .lowering import Lowering


def _scales(attrs, in_shape, out_shape):
    """Per-axis integer scales when the nearest map is ``i // s`` on each axis, else None."""
    if attrs.get("mode") != "nearest" or len(in_shape) < 2:
        return None
    scales = []
    for n_in, n_out in zip(in_shape, out_shape):
        if n_out % n_in:
            return None
        scales.append(n_out // n_in)
    resized = [d for d, s in enumerate(scales) if s != 1]
    if not resized:
        return scales
    # the reference kernel, applied to flat indices, is the ground truth of the mapping
    idx = np.arange(int(np.prod(in_shape)), dtype=np.float64).reshape(in_shape)
    try:
        mapped = np.asarray(get_op("resize").get_attr("FReference")(attrs, idx))
    except Exception:  # noqa: BLE001 - whatever the reference refuses, we refuse too
        return None
    if tuple(mapped.shape) != tuple(out_shape):
        return None
    grids = np.meshgrid(*[np.arange(n) // s for n, s in zip(out_shape, scales)],
                        indexing="ij")
    want = np.ravel_multi_index(grids, in_shape).astype(np.float64)
    return scales if np.array_equal(mapped, want) else None


def _supports(attrs, shapes):
    """None when the rule covers the node, else the reason (it then runs its reference)."""
    x = shapes[0] if shapes else None
    if x is None:
        return "resize with unknown input shape"
    try:
        _, outs = get_op("resize").get_attr("FInferShape")(attrs, [tuple(x)], [None])
    except Exception:  # noqa: BLE001 - shape errors are reported by InferShape already
        return "resize whose output shape cannot be inferred"
    if outs[0] is None:
        return "resize whose output shape cannot be inferred"
    if _scales(attrs, tuple(x), tuple(outs[0])) is not None:
        return None
    return resize_interp.reason(attrs, tuple(x))


def _compute(attrs, ins, outs, ctx):
    x = ins[0]
    out_shape = outs[0][0]
    scales = _scales(attrs, tuple(int(d) for d in x.shape), tuple(out_shape))
    if scales is None:
        return resize_interp.interpolate(attrs, x, out_shape, ctx.name)
    return te.compute(out_shape, lambda *i: x[tuple(
        v // s if s != 1 else v for v, s in zip(i, scales))], name=ctx.name)


def install() -> None:
    """Add the rule unless the table already lowers ``resize`` (its own rule wins)."""
    if "resize" in lowering.LOWERINGS:
        return
    lowering.LOWERINGS["resize"] = Lowering(_compute, "resize", None, _supports)
    resize_schedule.install()
