"""SplitDilatedConv: a dilated conv whose side taps read padding for most outputs is cut
into output regions, each computed by a conv with only the taps that read the input there.

Why: DeepLabV3's ASPP applies 3x3 convs of dilation 12 (and 24, 36) to a 16x16 map. A side
tap of dilation 12 reads the input for only 4 of the 16 output rows (columns); everywhere
else it multiplies padding. Computed whole, the dilation-12 conv did four times the useful
work and took 11 of DeepLabV3's 34 ms on ``llvm``. Along each axis the outputs fall into
bands in which the same taps are live (for that conv: rows 0-3 see taps 1-2, rows 4-11 tap 1,
rows 12-15 taps 0-1); each (row band, column band) region is a conv of the live sub-kernel
over the input slice it reads, without padding, and the regions are concatenated back (the
weight slices are constants that PrecomputePrune folds). Taps that read only padding vanish.

Only fires where it pays: NCHW/OIHW, groups 1, known shapes, the live work at most
``MAX_LIVE_SHARE`` of the whole conv's. Runs after FoldScaleAxis (BatchNorm is already in
the weights) and before AlterOpLayout (the region convs get packed weights).
"""

from __future__ import annotations

from nnvm.graph_attrs import DERIVED
from nnvm.ir import NodeEntry
from nnvm.ops.common import op
from nnvm.ops.nn import ConvGeometry
from nnvm.pass_manager import PassSet
from nnvm.rewrite import P, Match, Rule, rewrite

PASSES = PassSet()

#: split only when the live work is at most this share of the whole conv's
MAX_LIVE_SHARE = 0.6


def bands(k: int, stride: int, dilation: int, pad: int, size: int, out: int):
    """Along one axis: ``[(o0, o1, r0, r1)]``, output indices ``[o0, o1)`` in which exactly
    the taps ``r0..r1 - 1`` read the input (``0 <= o * stride - pad + r * dilation < size``),
    covering every output; None when some band's live taps are not one run."""
    def live(o):
        return [r for r in range(k) if 0 <= o * stride - pad + r * dilation < size]
    out_bands = []
    for o in range(out):
        taps = live(o)
        if not taps or taps != list(range(taps[0], taps[-1] + 1)):
            return None
        if out_bands and out_bands[-1][2:] == (taps[0], taps[-1] + 1):
            out_bands[-1] = out_bands[-1][:1] + (o + 1,) + out_bands[-1][2:]
        else:
            out_bands.append((o, o + 1, taps[0], taps[-1] + 1))
    return out_bands


def _split(m: Match) -> NodeEntry | None:
    node = m.root
    x, w = node.inputs[0], node.inputs[1]
    xs, ws = m.shape(x), m.shape(w)
    try:
        geo = ConvGeometry(node.attrs)
    except Exception:  # noqa: BLE001 - invalid attrs are InferShape's error to report
        return None
    if (xs is None or ws is None or len(xs) != 4 or geo.groups != 1 or geo.layout != "NCHW"
            or geo.klayout != "OIHW" or max(geo.d) == 1):
        return None
    n, c, h, wd = xs
    (kh, kw), (sh, sw), (dh, dw) = geo.k, geo.s, geo.d
    pt, pl, _, _ = geo.p
    oh, ow = geo.out_hw(h, wd)
    rows, cols = bands(kh, sh, dh, pt, h, oh), bands(kw, sw, dw, pl, wd, ow)
    if not rows or not cols or len(rows) * len(cols) == 1 and (rows[0][2:], cols[0][2:]) == (
            (0, kh), (0, kw)):
        return None  # (one region with every tap: nothing to gain)
    live = sum((o1 - o0) * (r1 - r0) for o0, o1, r0, r1 in rows) * \
        sum((o1 - o0) * (r1 - r0) for o0, o1, r0, r1 in cols)
    if live > MAX_LIVE_SHARE * kh * kw * oh * ow:
        return None
    name, bias = node.name, node.inputs[2:] if node.attrs.get("use_bias", True) else []
    band_rows = []
    for i, (a0, a1, ra, rb) in enumerate(rows):
        parts = []
        for j, (b0, b1, ca, cb) in enumerate(cols):
            i0, j0 = a0 * sh - pt + ra * dh, b0 * sw - pl + ca * dw
            i1, j1 = (a1 - 1) * sh - pt + (rb - 1) * dh + 1, (b1 - 1) * sw - pl + (cb - 1) * dw + 1
            part = op("strided_slice", x, begin=(0, 0, i0, j0), end=(n, c, i1, j1),
                      node_name=f"{name}_in{i}{j}")
            sub_w = op("strided_slice", w, begin=(0, 0, ra, ca), end=(ws[0], ws[1], rb, cb),
                       node_name=f"{name}_w{i}{j}")
            parts.append(op("conv2d", part, sub_w, *bias, channels=geo.channels,
                            kernel_size=(rb - ra, cb - ca), strides=(sh, sw),
                            dilation=(dh, dw), use_bias=bool(bias),
                            node_name=f"{name}_region{i}{j}"))
        band_rows.append(parts[0] if len(parts) == 1 else
                         op("concatenate", *parts, axis=3, node_name=f"{name}_band{i}"))
    return band_rows[0] if len(band_rows) == 1 else op("concatenate", *band_rows, axis=2,
                                                        node_name=name)


RULES = [Rule("dilated conv2d -> one conv per region of live taps", P("conv2d"), _split)]


@PASSES.define("SplitDilatedConv", requires=("shape",), invalidates=DERIVED, opt_level=3)
def split_dilated_conv(graph):
    """Split dilated convs whose taps mostly read padding (see the module docstring)."""
    return rewrite(graph, RULES)
