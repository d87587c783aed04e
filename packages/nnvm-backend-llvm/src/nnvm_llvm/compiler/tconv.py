"""``conv_transpose`` whose kernel equals its stride: every output pixel has one source.

Segmentation and text-detection heads upsample with ``ConvTranspose(kernel=2, stride=2)``.
The general rule (a reduction over all kernel taps, each guarded by divisibility tests)
spent 90 ms of a 190 ms MobileNetV3 text detector on two such layers; with kernel == stride,
no padding and no dilation the taps never overlap, so

    y[n, o, i, j] = sum_c x[n, c, i // sh, j // sw] * w[c, o, i % sh, j % sw]

is a plain reduction over input channels, scheduled like pooling (vectors along the
output row, rows in parallel). Other attribute sets keep the general rule.
"""

from __future__ import annotations

from tvm import te

from . import lowering
from .lowering import Lowering


def applies(attrs, x_shape, w_shape) -> bool:
    """Whether the fast form computes this node exactly."""
    if x_shape is None or w_shape is None or len(x_shape) != 4 or len(w_shape) != 4:
        return False
    if int(attrs.get("groups", 1)) != 1:
        return False
    strides = tuple(attrs.get("strides") or ())
    dil = tuple(attrs.get("dilation") or attrs.get("dilations") or (1, 1))
    pads = tuple(attrs.get("padding") or attrs.get("pads") or ())
    out_pad = tuple(attrs.get("output_padding") or ())
    if len(strides) != 2 or any(d != 1 for d in dil) or any(p != 0 for p in pads) \
            or any(p != 0 for p in out_pad):
        return False
    if str(attrs.get("auto_pad", "NOTSET")) not in ("NOTSET", "VALID", ""):
        return False
    return tuple(int(k) for k in w_shape[2:]) == tuple(int(s) for s in strides)


def _compute(attrs, ins, outs, ctx):
    x, w = ins[0], ins[1]
    out_shape, dtype = outs[0]
    if not applies(attrs, tuple(x.shape), tuple(w.shape)) or \
            tuple(out_shape[2:]) != tuple(int(d) * int(s) for d, s in
                                          zip(x.shape[2:], attrs["strides"])):
        return _PLAIN.compute(attrs, ins, outs, ctx)
    sh, sw = (int(s) for s in attrs["strides"])
    rc = te.reduce_axis((0, int(x.shape[1])), "rc")
    y = te.compute(out_shape, lambda n, o, i, j: te.sum(
        x[n, rc, i // sh, j // sw] * w[rc, o, i % sh, j % sw], axis=rc), name="anchor_tconv")
    if len(ins) > 2:
        b = ins[2]
        return te.compute(out_shape, lambda n, o, i, j: y[n, o, i, j] + b[o],
                          name=ctx.name + "_bias")
    return y


def kind_of(node, in_shapes) -> str | None:
    """``tconv`` when the fast form applies to this node, else None (the rule's own kind)."""
    if len(in_shapes) < 2:
        return None
    return "tconv" if applies(node.attrs, in_shapes[0], in_shapes[1]) else None


_PLAIN = lowering.LOWERINGS.get("conv_transpose")
if _PLAIN is not None:
    lowering.LOWERINGS["conv_transpose"] = Lowering(_compute, _PLAIN.kind, _PLAIN.pack,
                                                    _PLAIN.supports)
