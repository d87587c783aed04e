"""Layout ops: ``__layout_transform__`` between data layouts, and the blocked conv2d variant.

A layout is a string of axis letters (NNVM's ``Layout``): an upper-case letter is a primal
axis, a number followed by a lower-case letter is a block of that primal axis, innermost
(``NCHW4c`` = N, C/4, H, W, 4). Any two layouts with the same primal letters convert into
each other; the transform is a reshape/transpose, so it is INJECTIVE for fusion.
"""

from __future__ import annotations

import re

import numpy as np

from ..errors import ShapeError
from ..op import OpPattern, OpSet, get_op
from ..params import Param
from . import nn
from .common import same_dtype

defs = OpSet("layout")


def parse_layout(layout: str) -> list[tuple[str, int | None]]:
    """``"NCHW4c"`` -> ``[("N", None), ("C", None), ("H", None), ("W", None), ("c", 4)]``."""
    axes = [(f, c) for f, c in re.findall(r"(\d*)([A-Za-z])", layout)]
    if "".join(f + c for f, c in axes) != layout:
        raise ShapeError(f"layout '{layout}' is not valid; expected letters with optional "
                         f"block sizes such as 'NCHW' or 'NCHW4c'")
    out = []
    for factor, c in axes:
        if c.isupper() == bool(factor) or (c.islower() and c.upper() not in layout):
            raise ShapeError(f"layout '{layout}': axis '{factor}{c}' is not valid; blocks are "
                             f"a size then a lower-case letter whose primal axis is present")
        out.append((c, int(factor) if factor else None))
    return out


def primal(layout: str) -> str:
    return "".join(c for c, f in parse_layout(layout) if f is None)


def _check_pair(src: str, dst: str) -> None:
    if sorted(primal(src)) != sorted(primal(dst)):
        raise ShapeError(f"cannot transform layout '{src}' to '{dst}': primal axes differ")


def _to_primal_shape(shape, layout):
    """Shape in the primal order of ``layout`` (blocks folded back into their axis)."""
    axes = parse_layout(layout)
    if len(shape) != len(axes):
        raise ShapeError(f"shape {tuple(shape)} has rank {len(shape)}; layout '{layout}' "
                         f"needs rank {len(axes)}")
    dims = {c: d for (c, f), d in zip(axes, shape) if f is None}
    for (c, f), d in zip(axes, shape):
        if f is not None:
            if d != f:
                raise ShapeError(f"layout '{layout}': block axis '{c}' has size {d}, not {f}")
            dims[c.upper()] *= f
    return dims


def transform_shape(shape, src: str, dst: str) -> tuple[int, ...]:
    _check_pair(src, dst)
    dims = _to_primal_shape(shape, src)
    out = []
    for c, f in parse_layout(dst):
        if f is None:
            block = next((g for d, g in parse_layout(dst) if d == c.lower() and g), 1)
            if dims[c] % block:
                raise ShapeError(f"axis '{c}' of size {dims[c]} does not split into blocks of "
                                 f"{block} (layout '{dst}')")
            out.append(dims[c] // block)
        else:
            out.append(f)
    return tuple(out)


def transform_array(x: np.ndarray, src: str, dst: str) -> np.ndarray:
    """The NumPy reference: unblock ``src`` to primal axes, permute, block into ``dst``."""
    src_axes, dst_axes = parse_layout(src), parse_layout(dst)
    dims = _to_primal_shape(x.shape, src)
    # 1. unblock: move every block next to its primal axis, then merge the two
    order = []
    for c, f in src_axes:
        if f is None:
            order.append(src_axes.index((c, None)))
            order += [i for i, (d, g) in enumerate(src_axes) if d == c.lower() and g]
    p_src = [c for c, f in src_axes if f is None]
    x = np.transpose(x, order).reshape([dims[c] for c in p_src])
    # 2. permute primal axes into dst's primal order
    p_dst = [c for c, f in dst_axes if f is None]
    x = np.transpose(x, [p_src.index(c) for c in p_dst])
    # 3. block: split each blocked axis into (outer, block), then order as dst
    split_shape, names = [], []
    for c in p_dst:
        block = next((g for d, g in dst_axes if d == c.lower() and g), None)
        if block:
            split_shape += [dims[c] // block, block]
            names += [c, c.lower()]
        else:
            split_shape.append(dims[c])
            names.append(c)
    x = x.reshape(split_shape)
    return np.ascontiguousarray(np.transpose(x, [names.index(c) for c, _ in dst_axes]))


def _transform_shape_rule(attrs, ins, outs):
    if ins[0] is None:
        return ins, outs
    return ins, [transform_shape(ins[0], attrs["src_layout"], attrs["dst_layout"])]


defs.op("__layout_transform__", doc="Convert data from src_layout to dst_layout (e.g. "
            "NCHW -> NHWC or NCHW -> NCHW4c); inserted by the layout passes.",
            params=[Param("src_layout", "str", doc="layout of the input"),
                    Param("dst_layout", "str", doc="layout of the output")],
            shape=_transform_shape_rule, dtype=same_dtype,
            reference=lambda attrs, x: transform_array(x, attrs["src_layout"],
                                                       attrs["dst_layout"]),
            gradient=lambda n, og: [_transform(og[0], n.attrs["dst_layout"],
                                               n.attrs["src_layout"])],
            pattern=OpPattern.INJECTIVE, support_level=10, aliases=("layout_transform",),
            FCorrectLayout=lambda attrs, ins, outs: ([attrs["src_layout"]],
                                                     [attrs["dst_layout"]]))


def _transform(e, src, dst):
    from .common import op

    return op("__layout_transform__", e, src_layout=src, dst_layout=dst)


# -- conv2d in a blocked layout (what AlterOpLayout may switch conv2d to) -------------------

def _nchwc_plain_attrs(attrs) -> dict:
    keep = {k: v for k, v in attrs.items() if k not in ("layout", "kernel_layout", "out_layout")}
    return {**keep, "layout": "NCHW", "kernel_layout": "OIHW", "out_layout": "__undef__"}


def _nchwc_shape(attrs, ins, outs):
    if ins[0] is None or ins[1] is None:
        return ins, outs
    plain = _nchwc_plain_attrs(attrs)
    x = transform_shape(ins[0], attrs["layout"], "NCHW")
    w = transform_shape(ins[1], attrs["kernel_layout"], "OIHW")
    rule = get_op("conv2d").get_attr("FInferShape")
    _, (y, *_) = rule(plain, [x, w] + list(ins[2:]), [None])
    return ins, [transform_shape(y, "NCHW", attrs["out_layout"])]


def _nchwc_ref(attrs, x, w, *bias):
    plain = _nchwc_plain_attrs(attrs)
    y = get_op("conv2d").get_attr("FReference")(
        plain, transform_array(x, attrs["layout"], "NCHW"),
        transform_array(w, attrs["kernel_layout"], "OIHW"), *bias)
    return transform_array(y, "NCHW", attrs["out_layout"])


def _nchwc_params():
    base = [p for p in nn.defs.get("conv2d").params
            if p.name not in ("layout", "kernel_layout", "out_layout")]
    return base + [Param("layout", "str", "NCHW4c", "blocked data layout, e.g. NCHW4c"),
                   Param("kernel_layout", "str", "OIHW4i4o", "blocked weight layout"),
                   Param("out_layout", "str", "NCHW4c", "blocked output layout")]


defs.op("_contrib_conv2d_NCHWc", doc="conv2d on blocked layouts (NCHW{k}c data, "
            "OIHW{i}i{o}o weight), as NNVM's x86 schedule used; bias stays (channels,).",
            inputs=lambda attrs: ("data", "weight", "bias") if attrs.get("use_bias", True)
            else ("data", "weight"),
            params=_nchwc_params(), shape=_nchwc_shape, dtype=same_dtype, reference=_nchwc_ref,
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, support_level=10,
            FCorrectLayout=lambda attrs, ins, outs: (
                [attrs["layout"], attrs["kernel_layout"]] + [None] * (len(ins) - 2),
                [attrs["out_layout"]]))
