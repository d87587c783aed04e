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


PACKERS = {"dense": pack_dense, "matmul": pack_matmul, "conv2d": pack_conv2d}


def pack(layout: str, weight: np.ndarray, block: int) -> np.ndarray:
    """Repack ``weight`` into ``layout`` with block size ``block``."""
    if layout not in PACKERS:
        raise NNVMError(format_error("llvm executor plan", f"unknown weight layout '{layout}'",
                                     sorted(PACKERS), layout,
                                     fix="Rebuild the model with this nnvm-backend-llvm"))
    return PACKERS[layout](np.asarray(weight), int(block))


def packed_shape(layout: str, shape: tuple, block: int) -> tuple:
    """Shape of ``pack(layout, w, block)`` for a weight of ``shape`` (used by the compiler)."""
    if layout == "dense":
        n, k = shape
        return (-(-n // block), k, block)
    if layout == "matmul":
        k, n = shape
        return (-(-n // block), k, block)
    oc, ic, kh, kw = shape
    return (-(-oc // block), ic, kh, kw, block)
