"""``matmul`` as a GEMM: weight-packed when its right operand is a param, tiled when batched.

ONNX exporters write every linear layer as ``MatMul(x, W) + b`` with ``W`` of shape
``(K, N)``, so in imported transformers ``matmul`` (not ``dense``) carries nearly all the
FLOPs. This module replaces the plain ``matmul`` lowering (importing it is enough; the
build imports it) with two faster forms:

* right operand a 2-D param (any ``transpose_b``): the weight is packed into dense panels
  ``(N / bn, K, bn)`` at load time (layout ``matmul`` for ``(K, N)``, ``dense`` for
  ``(N, K)``) and the group is scheduled by the ``dense`` template, bias and activation in
  the write-back;
* both operands activations (attention's ``Q @ K^T`` and ``P @ V``): block
  ``anchor_matmul``, scheduled by ``schedule_batch_matmul`` (register tiles per batch).

``dense`` gets the same panels; an N that no vector width divides is zero-padded to a
multiple of one vector (``gemm_block``), an N below one vector is one panel as wide as N
(``panel_width``). An activation x activation matmul whose N lies
between one vector and two is zero-padded to whole vectors too (``pads_narrow_n``). Other
cases keep the original rules.
"""

from __future__ import annotations

import numpy as np
from tvm import te, topi

from . import lowering
from .lowering import Lowering, dense_block

_PLAIN = {name: lowering.LOWERINGS[name] for name in ("matmul", "dense")}


def gemm_block(n: int, lanes: int) -> int:
    """Panel width: two vectors, else one, when they divide N; for other N of at least one
    vector, N is zero-padded (a 258-wide layer would otherwise get 2-wide panels: scalar
    code) to whole vectors, and the panel is as wide as the register tile the ``dense``
    template will pick for the padded width (two vectors when they divide it). Why: the
    template reads the tile width from the padded N, not from the packing; a tile wider
    than the panel straddles two panels and every vector load becomes a gather
    (ddddocr's 1024 x 8210 classifier, padded to 8224 = 257 x 32, ran at 6 GFLOP/s with
    16-wide panels under 32-wide tiles). Small N keeps the old divisor choice."""
    for bn in (2 * lanes, lanes):
        if n % bn == 0:
            return bn
    if n < lanes:
        return dense_block(n, lanes)
    padded = -(-n // lanes) * lanes
    return 2 * lanes if padded % (2 * lanes) == 0 else lanes


def panel_width(n: int, lanes: int) -> int:
    """Panel width of a float weight: ``gemm_block``, except that an N narrower than one
    vector that only a smaller power of two divides (a 10-class head, N = 6, 12, 15) is one
    panel as wide as N, its tile one odd-width vector that LLVM lowers to masked full-width
    operations. Why: ``gemm_block`` gave 10 two-wide panels (``64x128 @ 128x10`` ran at
    25 GFLOP/s, 70 with one 10-wide panel; a 1x128 GEMV onto 10 classes 0.47 -> 0.15 us)."""
    bn = gemm_block(n, lanes)
    return n if 4 < n < lanes and bn < n else bn


def _pack(attrs, shapes, ctx):
    a, b = shapes[0], shapes[1]
    if a is None or b is None or len(b) != 2 or len(a) < 2 or attrs.get("transpose_a"):
        return {}
    n = b[0] if attrs.get("transpose_b") else b[1]
    bn = panel_width(n, ctx.vector_lanes)
    if bn <= 1:
        return {}
    return {1: ("dense" if attrs.get("transpose_b") else "matmul", bn)}


def _dense_pack(attrs, shapes, ctx):
    if shapes[1] is None or len(shapes[1]) != 2:
        return {}
    bn = panel_width(shapes[1][0], ctx.vector_lanes)
    return {1: ("dense", bn)} if bn > 1 else {}


def packed_gemm(x, w, bn: int, n: int, bias=None, name: str = "gemm"):
    """``x (..., K) @ panels (ceil(N/bn), K, bn)`` -> ``(rows, N)``: block ``anchor_dense``
    over the padded width, sliced to N by a copy stage only when padding exists."""
    k_dim = int(x.shape[-1])
    rows = int(np.prod([int(d) for d in x.shape[:-1]]))
    x2 = topi.reshape(x, (rows, k_dim)) if len(x.shape) != 2 else x
    n_pad = int(w.shape[0]) * bn
    k = te.reduce_axis((0, k_dim), "k")
    y = te.compute((rows, n_pad), lambda i, j: te.sum(x2[i, k] * w[j // bn, k, j % bn], axis=k),
                   name="anchor_dense")
    if bias is not None:
        return te.compute((rows, n), lambda i, j: y[i, j] + bias[j], name=name + "_bias")
    if n_pad != n:
        return te.compute((rows, n), lambda i, j: y[i, j], name=name + "_unpad")
    return y


def pads_narrow_n(attrs, shapes, n: int, lanes: int) -> bool:
    """Whether an activation x activation matmul's N is zero-padded to whole vectors here:
    N between one vector and two that no vector divides, below the two vectors from which
    the plain lowering pads it itself. Why: the ``matmul`` template vectorises along N and
    its tile width must divide N, so a 24-wide N got 8-lane tiles and a 17- or 31-wide one
    scalar code; a tile as wide as the row (what ``schedules._matmul_tile`` does for rows
    narrower than a vector) ran 7-10x slower than the padded 32-wide tile at these widths."""
    return (not attrs.get("transpose_b") and all(s is not None and len(s) >= 2 for s in shapes)
            and lanes < n < 2 * lanes and n % lanes != 0)


#: least multiply-adds per batch for a batch matmul below ``schedules.MATMUL_MIN_WORK`` to
#: run one parallel task per batch (``splits_by_batch``)
BATCH_TASK_MIN_WORK = 1 << 14


def splits_by_batch(work: int, batches: int, min_work: int) -> bool:
    """Whether a batch matmul of ``work`` multiply-adds, too small for the row-tile split
    (``work < min_work``, ``schedules.MATMUL_MIN_WORK``), still runs in parallel with one
    task per batch (each a whole batch's register tiles), when it has at least two batches
    of ``BATCH_TASK_MIN_WORK`` each. Why: serial, such a kernel ran at the 1-thread FMA roof
    and so at half the 2-thread one (the roofline sweep's 2-head 32x64 @ 64x32 at 2.07x);
    split by batch and row tile its tasks were too small (2.45 -> 2.77 us), but by batch
    alone the second thread takes a whole batch. One process, old and new kernels in
    alternating blocks, min of 10, 2-core Zen 4 box loaded by other jobs (load 2.5-2.9),
    2 threads -> 1 thread, us: 1x2x32x64 @ 1x2x64x32 2.43 -> 1.51 / 2.44 -> 2.52,
    1x2x32x32 @ 1x2x32x64 2.30 -> 1.59 / 2.30 -> 2.60, 1x2x32x32 @ 1x2x32x32
    1.31 -> 0.94 / 1.31 -> 1.39, 1x4x16x32 @ 1x4x32x32 1.33 -> 0.92 / 1.33 -> 1.28. The
    cost at 1 thread (up to 13%) is the parallel body's: TVM's closure keeps the tile's
    accumulator buffer in memory (zeroed and stored per tile), which the serial kernel's
    LLVM sinks out of the loop. Below 16 K per batch (2 x 8x32 @ 32x32, 0.33 us) the
    launch costs more than the half it saves (2 threads 0.33 -> 0.38 us)."""
    return work < min_work and batches >= 2 and work >= batches * BATCH_TASK_MIN_WORK


def _matmul(attrs, ins, outs, ctx):
    if 1 not in ctx.packed:
        shapes = [tuple(t.shape) for t in ins]
        n = int(outs[0][0][-1]) if len(outs[0][0]) else 1  # a vector . vector is a scalar
        if pads_narrow_n(attrs, shapes, n, ctx.vector_lanes):
            return lowering._lane_padded_matmul(attrs, *ins, outs, ctx)  # noqa: SLF001
        return _PLAIN["matmul"].compute(attrs, ins, outs, ctx)
    x, w = ins
    out_shape = outs[0][0]
    y = packed_gemm(x, w, ctx.packed[1][1], int(out_shape[-1]), name=ctx.name)
    return topi.reshape(y, out_shape) if tuple(out_shape) != tuple(y.shape) else y


def _dense(attrs, ins, outs, ctx):
    if 1 not in ctx.packed:
        return _PLAIN["dense"].compute(attrs, ins, outs, ctx)
    out_shape = outs[0][0]
    y = packed_gemm(ins[0], ins[1], ctx.packed[1][1], int(out_shape[-1]),
                    ins[2] if len(ins) > 2 else None, name=ctx.name)
    return topi.reshape(y, out_shape) if tuple(out_shape) != tuple(y.shape) else y


def kind_of(node, packed: bool) -> str:
    """Template of a group mastered by a matmul node (packed: the dense one)."""
    return "dense" if packed else "matmul"


lowering.LOWERINGS["matmul"] = Lowering(_matmul, "matmul", _pack, _PLAIN["matmul"].supports)
lowering.LOWERINGS["dense"] = Lowering(_dense, "dense", _dense_pack, _PLAIN["dense"].supports)
