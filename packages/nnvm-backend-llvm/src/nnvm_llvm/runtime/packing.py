"""Weight layouts the kernels read: dense panels and blocked conv2d filters.

The compiler decides a layout per weight at build time and records it in the executor plan;
the runtime repacks with NumPy when the module is created or a weight is rebound. The
artifact therefore stores weights in their model layout, so ``params.bin`` stays what any
NNVM tool expects, and the packed copy costs one transpose at load time.

Layouts:
    ``dense``: weight ``(N, K)`` -> ``(ceil(N / bn), K, bn)``, zero-padded: the kernel
        streams one contiguous ``bn``-wide panel per output tile (TVM's ``dense_pack``,
        MLAS's packed B).
    ``matmul``: weight ``(K, N)`` (ONNX MatMul's right operand) -> ``(N / bn, K, bn)``, the
        same panels as ``dense``.
    ``conv2d``: weight ``(OC, IC, KH, KW)`` -> ``(ceil(OC / bn), IC, KH, KW, bn)``,
        zero-padded: the output channel block is the vector lane (TVM's ``conv2d_NCHWc``
        kernel layout ``OIHW{bn}o``).
    ``matmul_vnni``: int8 weight ``(K, N)`` -> ``(ceil(N / bn), ceil(K / 4) + 1, bn, 4)``:
        the 4-byte groups along K that one AVX512-VNNI ``vpdpbusd`` lane multiplies, ``bn``
        columns per panel (``int8_gemm``); the last group row holds each column's int32 sum.
        ``matmul_vnni8`` is the same for the kernel's 8-lane (AVX2) form.
    ``conv2d_vnni``: int8 weight ``(OC, IC, KH, KW)`` -> ``(OC, ceil(IC / 4) + 1, KH, KW, 4)``:
        per filter tap, the 4-byte groups of input channels (``int8_conv``); the extra
        channel group holds the filter's int32 sum at tap (0, 0).
    ``conv_nd_{G}g``: weight ``(OC, IC / G, *K)`` of a ``conv`` with ``G`` groups (any number of
        spatial axes) -> ``(G * ceil(OC / G / bn), IC / G, *K, bn)``: ``conv2d``'s layout
        with each group's output channels zero-padded to whole blocks, so a vector never
        straddles two groups (``conv_nd.blocked_conv``'s ``wpack_`` stage, done at load).
        A block a whole multiple (2 or more) of the channels per group holds that many
        copies of the group's channels (``conv_nd_copies``), so a vector of a few channels
        times a few output columns is one contiguous weight load.
    ``recurrent_panels``: recurrent weight ``(D, N, K)`` (ONNX LSTM/GRU/RNN ``R``, one
        matrix per direction) -> ``(D, ceil(N / bn), K, bn)``, zero-padded: ``dense``'s
        panels per direction, so a step's product streams each block as one contiguous
        run (``recurrent_loop.gemm_packed``) instead of ``bn`` rows 2 KB apart.
    The VNNI layouts store uint8 weights with the top bit flipped (``w - 128`` as int8 bits,
        the dtype kept), since ``vpdpbusd`` multiplies unsigned by signed bytes; the padding
        is 0 in that signed domain.
"""

from __future__ import annotations

import numpy as np

from nnvm.errors import NNVMError, format_error


def _pad_rows(weight: np.ndarray, axis: int, bn: int) -> np.ndarray:
    """Zero-pad ``axis`` to a multiple of ``bn`` (the kernel computes the padded columns
    into a scratch tile and never writes them out)."""
    extra = -weight.shape[axis] % bn
    if not extra:
        return weight
    pad = [(0, 0)] * weight.ndim
    pad[axis] = (0, extra)
    return np.pad(weight, pad)


def pack_dense(weight: np.ndarray, bn: int) -> np.ndarray:
    weight = _pad_rows(weight, 0, bn)
    n, k = weight.shape
    return np.ascontiguousarray(weight.reshape(n // bn, bn, k).transpose(0, 2, 1))


def pack_matmul(weight: np.ndarray, bn: int) -> np.ndarray:
    weight = _pad_rows(weight, 1, bn)
    k, n = weight.shape
    return np.ascontiguousarray(weight.reshape(k, n // bn, bn).transpose(1, 0, 2))


def pack_conv2d(weight: np.ndarray, bn: int) -> np.ndarray:
    weight = _pad_rows(weight, 0, bn)
    oc, ic, kh, kw = weight.shape
    return np.ascontiguousarray(weight.reshape(oc // bn, bn, ic, kh, kw).transpose(0, 2, 3, 4, 1))


def conv_nd_layout(groups: int) -> str:
    """The ``conv_nd`` layout name for a conv with ``groups`` groups."""
    return f"conv_nd_{int(groups)}g"


def _conv_nd_groups(layout: str) -> int | None:
    """``G`` of a ``conv_nd_{G}g`` layout name, else None."""
    head, _, tail = layout.rpartition("_")
    if head == "conv_nd" and tail.endswith("g") and tail[:-1].isdigit() and int(tail[:-1]) > 0:
        return int(tail[:-1])
    return None


def conv_nd_copies(channels_per_group: int, block: int) -> int:
    """Copies of a group's channels in one ``conv_nd_{G}g`` block of ``block`` lanes: the
    multiple when the block is 2 or more whole groups, else 1 (channels, zero-padded)."""
    cog = int(channels_per_group)
    return block // cog if block > cog and block % cog == 0 else 1


def pack_conv_nd(weight: np.ndarray, bn: int, groups: int) -> np.ndarray:
    oc = weight.shape[0]
    per_group = weight.reshape((groups, oc // groups) + weight.shape[1:])
    copies = conv_nd_copies(oc // groups, bn)
    per_group = np.repeat(per_group, copies, axis=1) if copies > 1 \
        else _pad_rows(per_group, 1, bn)
    blocks = per_group.reshape((groups * per_group.shape[1] // bn, bn) + weight.shape[1:])
    return np.ascontiguousarray(np.moveaxis(blocks, 1, -1))


def _signed_bits(weight: np.ndarray) -> np.ndarray:
    """uint8 weights as the bits of ``w - 128`` (still uint8); int8 ones as they are."""
    return weight ^ np.uint8(0x80) if weight.dtype == np.uint8 else weight


def _sum_bytes(panels: np.ndarray, axes: tuple) -> np.ndarray:
    """The int32 sums of the signed weights over ``axes``, as 4 bytes of ``panels.dtype``
    each (the kernels' zero-point correction, computed once here)."""
    sums = panels.view(np.int8).astype(np.int32).sum(axis=axes)
    return sums.astype("<i4").view(panels.dtype).reshape(sums.shape + (4,))


def pack_matmul_vnni(weight: np.ndarray, bn: int) -> np.ndarray:
    w = _signed_bits(weight)
    k, n = w.shape
    w = np.pad(w, ((0, -k % 4), (0, -n % bn)))
    k4, nb = w.shape[0] // 4, w.shape[1] // bn
    panels = w.reshape(k4, 4, nb, bn).transpose(2, 0, 3, 1)
    sums = _sum_bytes(panels, (1, 3))[:, None]  # (nb, 1, bn, 4)
    return np.ascontiguousarray(np.concatenate([panels, sums], axis=1))


def pack_conv2d_vnni(weight: np.ndarray, bn: int) -> np.ndarray:
    w = np.pad(_signed_bits(weight), ((0, 0), (0, -weight.shape[1] % 4), (0, 0), (0, 0)))
    oc, ic, kh, kw = w.shape
    filters = w.reshape(oc, ic // 4, 4, kh, kw).transpose(0, 1, 3, 4, 2)
    extra = np.zeros((oc, 1, kh, kw, 4), w.dtype)
    extra[:, 0, 0, 0] = _sum_bytes(filters, (1, 2, 3, 4))
    return np.ascontiguousarray(np.concatenate([filters, extra], axis=1))


def pack_recurrent_panels(weight: np.ndarray, bn: int) -> np.ndarray:
    return np.ascontiguousarray(np.stack([pack_dense(w, bn) for w in weight]))


PACKERS = {"recurrent_panels": pack_recurrent_panels, "dense": pack_dense, "matmul": pack_matmul, "conv2d": pack_conv2d,
           "matmul_vnni": pack_matmul_vnni, "matmul_vnni8": pack_matmul_vnni,
           "conv2d_vnni": pack_conv2d_vnni}


def pack(layout: str, weight: np.ndarray, block: int) -> np.ndarray:
    """Repack ``weight`` into ``layout`` with block size ``block``."""
    groups = _conv_nd_groups(layout)
    if groups is not None:
        return pack_conv_nd(np.asarray(weight), int(block), groups)
    if layout not in PACKERS:
        raise NNVMError(format_error("llvm executor plan", f"unknown weight layout '{layout}'",
                                     sorted(PACKERS) + ["conv_nd_{G}g"], layout,
                                     fix="Rebuild the model with this nnvm-backend-llvm"))
    return PACKERS[layout](np.asarray(weight), int(block))


def packed_shape(layout: str, shape: tuple, block: int) -> tuple:
    """Shape of ``pack(layout, w, block)`` for a weight of ``shape`` (used by the compiler)."""
    groups = _conv_nd_groups(layout)
    if groups is not None:
        oc, cg, *taps = shape
        return (groups * -(-oc // groups // block), cg, *taps, block)
    if layout == "dense":
        n, k = shape
        return (-(-n // block), k, block)
    if layout == "recurrent_panels":
        d, n, k = shape
        return (d, -(-n // block), k, block)
    if layout == "matmul":
        k, n = shape
        return (-(-n // block), k, block)
    if layout in ("matmul_vnni", "matmul_vnni8"):
        k, n = shape
        return (-(-n // block), -(-k // 4) + 1, block, 4)
    if layout == "conv2d_vnni":
        oc, ic, kh, kw = shape
        return (oc, -(-ic // 4) + 1, kh, kw, 4)
    oc, ic, kh, kw = shape
    return (-(-oc // block), ic, kh, kw, block)
