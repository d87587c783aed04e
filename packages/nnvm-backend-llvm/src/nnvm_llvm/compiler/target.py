"""``llvm -mcpu=... -num-threads=...`` -> a TVM target dict (TVM 0.27 refuses CLI strings)."""

from __future__ import annotations

import tvm

from nnvm.errors import NNVMError, format_error


def tvm_target(target) -> "tvm.target.Target":
    """The TVM target of an ``nnvm.backend.Target`` of kind llvm; ``-mcpu`` defaults to
    this machine's CPU (``native``) so kernels use every vector extension it has."""
    spec: dict = {"kind": "llvm"}
    mcpu = target.get("mcpu", "native") or "native"
    spec["mcpu"] = tvm.target.codegen.llvm_get_system_cpu() if mcpu == "native" else mcpu
    if target.get("mtriple"):
        spec["mtriple"] = target.get("mtriple")
    if target.get("mattr"):
        spec["mattr"] = [a for a in target.get("mattr").split(",") if a]
    if target.get("opt-level") not in (None, ""):
        spec["opt-level"] = _int(target, "opt-level")
    try:
        return tvm.target.Target(spec)
    except Exception as exc:  # noqa: BLE001 - TVM raises its own error types
        raise NNVMError(format_error(f"target '{target}'", f"TVM rejects it ({exc})",
                                     fix="Check -mcpu/-mtriple/-mattr against `llc -mcpu=help`"
                                     )) from None


def num_threads(target, extra: dict) -> int:
    """Threads requested by ``build(..., num_threads=N)`` or ``-num-threads=N`` (0 = auto)."""
    if extra.get("num_threads") is not None:
        return int(extra["num_threads"])
    return _int(target, "num-threads") if target.get("num-threads") not in (None, "") else 0


def vector_lanes(tgt, dtype_bits: int = 32) -> int:
    """fp32 lanes of one vector register (16 with AVX-512)."""
    try:
        width = int(tvm.target.codegen.llvm_get_vector_width(tgt))
    except Exception:  # noqa: BLE001
        width = 128
    return max(4, width // dtype_bits)


def _int(target, key) -> int:
    value = target.get(key)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise NNVMError(format_error(f"target '{target}'", f"-{key} must be an integer",
                                     got=value)) from None
