"""The N-d ``conv`` op (3-D convolutions, and 1-D ones the importer does not turn into
``conv2d``) as a channel-blocked TE kernel the ``conv_nd`` template register-tiles.

Why: as one plain reduction (``lowering_nn._conv_nd``) a C3D-sized 3-D conv ran at
1 GFLOP/s, 80x slower than onnxruntime. This is ``conv2d``'s blocked form with any number
of spatial axes: output channels in blocks of one vector (``bn``), the weight re-laid out
``O{I}{spatial}{bn}o`` by a small ``wpack_`` stage so each tap's ``bn`` weights are one
contiguous vector load, and the input padded once into a ``pad_`` buffer so the inner
loop has no bounds tests (a small input is read through inlined bounds tests instead,
``LAZY_PAD_MAX``). Both stages stay materialised (``schedules.KEEP``). A constant
weight (a param) is packed once at load instead (``runtime.packing``'s ``conv_nd_{G}g``
layout, asked for by ``lowering_nn``'s ``conv`` rule, and by ``lowering._conv_pack`` for
the grouped 2-D / 1-D convs ``lowering.columns_packed`` sends here): the per-call
``wpack_`` gather was a fifth of a tiny test conv's time (2x4x4x5x4 by 6x2x3x3x3:
0.72 -> 0.58 us). A weight
computed in the graph keeps the ``wpack_`` stage, one read of the weight (under 1% of a
real 3-D conv's work).

Groups: a channel block never straddles two groups. A channel count per group that no
block divides (3 classes, 257 STFT bins, 3 channels per group) is zero-padded up to whole
blocks per group, as ``lowering.conv_block`` does for ``conv2d``: the kernel computes the
padded channels into its scratch output and the ``_unpad`` stage never copies them out.
Fewer channels per group than a vector instead get one vector of exactly that many lanes
(``lowering.exact_block``): no scratch output, the bias in the tile's write-back.

Channels times columns: 3 or 4 channels per group (a block of one whole group) share a
vector with 2 neighbouring output columns (``column_block``): lanes ``(channel, column)``,
the weight packed with each channel twice (``runtime.packing.conv_nd_copies``), the input
one 64-bit broadcast per tap at unit stride. The anchor then has the column within its
pair as a last axis (``anchor_convnd_{e}x{bn}``) and a ``_columns`` stage gives the output
its own shape back (folded into the tile's write-back).

Half precision (1-D convs of fp16 audio models reach this op: the importer's conv2d form is
fp32-only) accumulates in float32 like the reference kernel: the ``pad_`` and ``wpack_``
stages convert once, so the inner loop is plain fp32 FMAs (whisper's 80 -> 128 conv1d in
fp16 ran 94 ms plainly). float64 stays float64.
"""

from __future__ import annotations

import math

import tvm
from tvm import te, topi

from ..runtime.packing import conv_nd_copies
from .lowering import conv_block, exact_block

#: accumulation dtype per input dtype the blocked kernel covers; others (integers) keep
#: the plain reduction
ACCUMULATE = {"float32": "float32", "float16": "float32", "bfloat16": "float32",
              "float64": "float64"}


#: padded inputs of at most this many elements (64 KiB of fp32) are not copied: the bounds
#: tests are inlined into the kernel (``window_`` is not a kept stage). Why: the copy of a
#: small padded input cost more than the tests; ONNX's Conv3d_stride_padding (2x3x5x5x5, pad
#: 1) 0.66 -> 0.25 us, a 1x8x8x10x10 by 16x8x3x3x3 conv 57.7 -> 55.0 us. Larger inputs (the
#: C3D-sized convs) keep the copy, which is under 1% of their work.
LAZY_PAD_MAX = 16384


def channel_block(cog: int, lanes: int) -> int:
    """The weight block (lanes) of a conv with ``cog`` channels per group: its channel
    block (``_channels``) times the copies of it a small conv's columns share a vector
    with (``column_block``): 2, when the block is the whole group of 3 or 4 channels.
    Why not more: two copies fill a 256-bit vector, which every x86 target issues two
    FMAs of per cycle; 8 channels by 2 columns in a 512-bit vector ran a 1x3x8x32x32 by
    8x3x3x3x3 conv 0.8x as fast as 8 channels alone (Zen 4 issues one 512-bit FMA)."""
    bn = _channels(cog, lanes)
    if bn != cog or bn < 3 or MAX_COLUMNS * bn > min(lanes, HALF_VECTOR_MAX):
        return bn
    return bn * MAX_COLUMNS


def _channels(cog: int, lanes: int) -> int:
    """Output channels per vector block for ``cog`` channels per group:
    ``lowering.conv_block``'s choice where it divides ``cog``, else one vector of exactly
    ``cog`` lanes (``lowering.exact_block``, fewer channels than a vector), else a
    zero-padded vector; 1 or 2 channels keep their scalar or 2-lane blocks."""
    exact = exact_block(cog, lanes)
    if exact:
        return exact
    bn = conv_block(cog, lanes)
    if bn < 4 and cog > 2:
        bn = 4 if cog <= 4 else lanes // 2
    return bn


#: most outputs (batch x channels x positions) of a conv whose channel vector also spans
#: output columns (``column_block``): the tiny-conv regime it was measured on
COLUMN_MAX_OUTPUTS = 4096
#: most output columns in one vector (copies of the channel block in a packed weight)
MAX_COLUMNS = 2
#: most lanes of a vector of channels times columns: a 256-bit vector of fp32
HALF_VECTOR_MAX = 8


def column_block(bn: int, outputs: int, lanes: int) -> int:
    """Output columns that share one vector with a block of ``bn`` channels (1: none) in a
    conv whose weight is packed per call (``wpack_``); a weight packed at load has its
    copies (``channel_block``) and takes that many.

    Why: a conv with 3 or 4 channels per block filled 3 or 4 of the vector's lanes, so a
    0.2 us 3-D test conv ran one 128-bit FMA per tap and column, at a quarter of the FMA
    rate. With ``e`` columns in the vector (lanes ``(channel, column)``, column fastest)
    each tap is one FMA of ``bn * e`` lanes: the weight is each channel's value ``e``
    times (the packed copies), the input ``e`` neighbouring columns (one 64-bit broadcast
    at unit stride; ``blocked_conv``'s ``Select``). A row that ``e`` does not divide gets
    a last group whose spare columns repeat the last one and are never written out."""
    if outputs > COLUMN_MAX_OUTPUTS or MAX_COLUMNS * bn > min(lanes, HALF_VECTOR_MAX):
        return 1
    return MAX_COLUMNS


def _pads_after(sizes, out, kk, strides, dilations, pads_begin):
    """Padding past the end each axis needs so every window of ``out`` is in the buffer."""
    return [max(0, (o - 1) * s + (k - 1) * d + 1 - p - n)
            for n, o, k, s, d, p in zip(sizes, out, kk, strides, dilations, pads_begin)]


def blocked_conv(x, w, bias, strides, pads_begin, dilations, groups, out_shape, dtype, name,
                 lanes, packed=False):
    """``conv`` over ``len(out_shape) - 2`` spatial axes; the master block is
    ``anchor_convnd`` with axes ``(n, oc padded, *spatial, ic, *taps)``. ``packed``: ``w``
    is already in the ``conv_nd_{G}g`` layout (``channel_block``'s block, packed at load)."""
    nsp = len(out_shape) - 2
    n, oc, out = int(out_shape[0]), int(out_shape[1]), [int(d) for d in out_shape[2:]]
    cg = int(w.shape[1])
    cog = oc // groups
    kk = [int(d) for d in w.shape[2:len(w.shape) - packed]]
    sizes = [int(d) for d in x.shape[2:]]
    block = int(w.shape[-1]) if packed else channel_block(cog, lanes)
    copies = conv_nd_copies(cog, block)
    bn = block // copies
    cogp = -(-cog // bn) * bn  # channels per group, padded to whole blocks
    cols = copies if packed else column_block(bn, n * groups * cogp * math.prod(out), lanes)
    after = _pads_after(sizes, out, kk, strides, dilations, pads_begin)
    acc = ACCUMULATE[str(x.dtype)]
    xp = x
    if acc != str(x.dtype):
        xp = te.compute(x.shape, lambda *i: x(*i).astype(acc),
                        name=("cast_" if any(pads_begin) or any(after) else "pad_") + name)
    if any(pads_begin) or any(after):
        padded = math.prod(int(d) for d in x.shape[:2]) * math.prod(
            s + b + a for s, b, a in zip(sizes, pads_begin, after))
        xp = topi.nn.pad(xp, [0, 0] + list(pads_begin), [0, 0] + after,
                         name=("window_" if padded <= LAZY_PAD_MAX else "pad_") + name)

    def pack(ob, ci, *rest):
        taps, v = rest[:-1], rest[-1]
        g, j = (ob * bn + v) // cogp, (ob * bn + v) % cogp
        if cogp == cog:
            return w[(g * cog + j, ci) + taps].astype(acc)
        return te.if_then_else(j < cog, w[(g * cog + te.min(j, cog - 1), ci) + taps],
                               te.const(0, w.dtype)).astype(acc)
    if not packed:  # the block copied for each column of a vector (``cols``)
        wp = te.compute((groups * cogp // bn, cg) + tuple(kk) + (bn * cols,),
                        lambda ob, ci, *rest: pack(ob, ci, *rest[:-1], rest[-1] // cols),
                        name="wpack_" + name)
    elif acc != str(w.dtype):  # half precision: one contiguous conversion per call
        wp = te.compute(w.shape, lambda *i: w(*i).astype(acc), name="wpack_cast_" + name)
    else:
        wp = w
    rc = te.reduce_axis((0, cg), "rc")
    rk = [te.reduce_axis((0, k), f"rk{i}") for i, k in enumerate(kk)]

    def pixel(b, ci, o):
        """The input under output position ``o`` at the current taps. With ``cols``
        columns per vector the last two axes of ``o`` are (column group, column in it),
        and the value is a ``Select`` on the column whose every branch reads a position
        all lanes of that column share: blended broadcasts, not a gather."""
        lead = tuple(o[i] * strides[i] + rk[i] * dilations[i] for i in range(nsp - 1))

        def at(col):
            return xp[(b, ci) + lead + (col * strides[-1] + rk[-1] * dilations[-1],)]
        if cols == 1:
            return at(o[-1])
        group, col = o[-2], o[-1]

        def column(e):  # a spare column past the row repeats its last one
            return at(group * cols + e if out[-1] % cols == 0 else
                      te.min(group * cols + e, out[-1] - 1))
        value = column(cols - 1)
        for e in reversed(range(cols - 1)):
            value = tvm.tirx.Select(col == e, column(e), value)
        return value

    def body(b, c, *o):
        ci = rc if groups == 1 else (c // cogp) * cg + rc
        lane = (c % bn) * cols + (o[-1] if cols > 1 else 0)  # its copy for that column
        return te.sum(pixel(b, ci, o) * wp[(c // bn, rc) + tuple(rk) + (lane,)],
                      axis=[rc] + rk)
    # a block other than the weight's lanes is named: the template reads it from there
    anchor = "anchor_convnd" + (f"_{cols}x{bn}" if bn != int(wp.shape[-1]) else "")
    if cols == 1:
        y = te.compute((n, groups * cogp) + tuple(out), body, name=anchor)
    else:
        grouped = te.compute((n, groups * cogp) + tuple(out[:-1]) + (-(-out[-1] // cols), cols),
                             body, name=anchor)
        y = te.compute((n, groups * cogp) + tuple(out), lambda b, c, *o: grouped[
            (b, c) + o[:-1] + (o[-1] // cols, o[-1] % cols)], name=name + "_columns")
    if cogp != cog:
        full = y
        y = te.compute(tuple(out_shape), lambda b, c, *o: full[
            (b, c if groups == 1 else c // cog * cogp + c % cog) + o], name=name + "_unpad")
    if bias is not None:
        return te.compute(tuple(out_shape), lambda b, c, *o: (
            y[(b, c) + o] + bias[c].astype(acc)).astype(dtype), name=name + "_bias")
    if acc != dtype:
        return te.compute(tuple(out_shape), lambda *i: y(*i).astype(dtype), name=name + "_cast")
    return y


def unpacked(w, groups: int, oc: int):
    """The model-layout ``(OC, IC / G, *K)`` view of a ``conv_nd_{G}g``-packed weight, for
    the plain reduction (dtypes the blocked kernel does not take); inlined where read."""
    cog = oc // groups
    copies = conv_nd_copies(cog, int(w.shape[-1]))
    bn = int(w.shape[-1]) // copies
    cogp = -(-cog // bn) * bn

    def read(o, ci, *taps):
        c = o // cog * cogp + o % cog
        return w[(c // bn, ci) + taps + (c % bn * copies,)]
    return te.compute((oc,) + tuple(w.shape[1:-1]), read, name="wunpack")
