"""cuBLAS (through CuPy) for large, unfused GEMM steps.

A fused group's generated kernel computes its epilogue in registers, which a library call
cannot; so only a *single-member* ``dense``/``matmul`` step (nothing fused after it) may go to
cuBLAS, and under ``-cublas=auto`` only when it is large enough (``MIN_FLOPS``) that cuBLAS's
tuned kernels beat the generated shared-memory tiling. Its generated kernel is still compiled
and kept, so ``-cublas=off`` (or a CuPy without cuBLAS) falls back to it. The call writes
straight into the step's arena slot: ``cupy.matmul(..., out=view)`` on the module's stream.
"""

from __future__ import annotations

from nnvm_codegen_c.builder import numel
from nnvm.errors import NNVMError

#: 2*M*N*K at or above which ``-cublas=auto`` prefers cuBLAS to the generated kernel.
MIN_FLOPS = 1 << 26
MODES = ("auto", "on", "off")


def gemm_flops(info, step) -> int | None:
    """2*M*N*K of a single-member float dense/matmul step, else None (not eligible)."""
    if step.kind != "kernel" or len(step.members) != 1:
        return None
    node = info.idx.nodes[step.root]
    if node.op.name not in ("dense", "matmul"):
        return None
    ins = info.inputs(step.root)
    if any(info.dtypes[e] not in ("float32", "float64") for e in ins):
        return None
    out = info.shapes[info.entry(step.root, 0)]
    if node.op.name == "dense":
        k = info.shapes[ins[1]][1]
    else:
        sa = info.shapes[ins[0]]
        k = sa[-2] if node.attrs.get("transpose_a") and len(sa) > 1 else sa[-1]
    return 2 * numel(out) * int(k)


def select(info, steps, mode: str) -> dict[int, int]:
    """``{step index: flops}`` of the steps that run on cuBLAS under ``mode``."""
    if mode not in MODES:
        raise NNVMError(f"target 'cuda -cublas={mode}': unknown mode -> expected one of "
                        f"{', '.join(MODES)}")
    if mode == "off":
        return {}
    chosen = {}
    for i, s in enumerate(steps):
        f = gemm_flops(info, s)
        if f is not None and (mode == "on" or f >= MIN_FLOPS):
            chosen[i] = f
    return chosen


def run(cp, view, info, step) -> None:
    """Compute ``step`` (dense or matmul) with cupy.matmul into the arena (current stream).

    Args:
        cp: the cupy module.
        view: ``f(entry) -> cupy.ndarray`` aliasing the entry's arena slot.
    """
    node = info.idx.nodes[step.root]
    ins = info.inputs(step.root)
    out = view(info.entry(step.root, 0))
    if node.op.name == "dense":
        x, w = view(ins[0]), view(ins[1])
        x2 = x.reshape(-1, x.shape[-1])
        o2 = out.reshape(-1, out.shape[-1])
        cp.matmul(x2, w.T, out=o2)
        if len(ins) > 2:
            cp.add(o2, view(ins[2]), out=o2)
        return
    a, b = view(ins[0]), view(ins[1])
    if node.attrs.get("transpose_a") and a.ndim > 1:
        a = a.swapaxes(-1, -2)
    if node.attrs.get("transpose_b") and b.ndim > 1:
        b = b.swapaxes(-1, -2)
    cp.matmul(a, b, out=out)
