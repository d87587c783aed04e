"""``llvm -mcpu=... -num-threads=...`` -> a TVM target dict (TVM 0.27 refuses CLI strings)."""

from __future__ import annotations

import contextlib
import difflib
import os
import sys

import tvm

from nnvm.errors import NNVMError, format_error


def tvm_target(target) -> "tvm.target.Target":
    """The TVM target of an ``nnvm.backend.Target`` of kind llvm; ``-mcpu`` defaults to
    this machine's CPU (``native``) so kernels use every vector extension it has."""
    check_options(target)
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


def check_options(target) -> None:
    """Reject option values LLVM does not know, before anything is compiled.

    TVM accepts ``-mcpu=foo``, logs an error and generates generic code, so a typo would
    silently cost the vector extensions the user asked for; ask LLVM instead (TVM 0.27:
    ``llvm_is_valid_cpu``, ``llvm_get_cpu_archlist``, ``llvm_get_cpu_features``) and name
    the closest valid value. ``native`` means this machine's CPU and is always valid.

    Raises:
        NNVMError: an unknown ``-mtriple`` architecture, ``-mcpu`` or ``-mattr`` feature, or
            a non-integer ``-opt-level`` / ``-num-threads``.
    """
    codegen = tvm.target.codegen
    where = f"target '{target}'"
    for key in ("opt-level", "num-threads"):
        if target.get(key) not in (None, ""):
            value = _int(target, key)
            if value < 0 or (key == "opt-level" and value > 3):
                raise NNVMError(format_error(where, f"-{key} out of range",
                                             "0..3" if key == "opt-level" else ">= 0", value))
    triple = target.get("mtriple") or ""
    if triple:
        with _quiet_stderr():  # LLVM logs its own complaint about an unknown triple
            known = bool(codegen.llvm_is_valid_cpu("generic", triple))
        if not known:
            raise NNVMError(format_error(
                where, f"LLVM does not know the target triple '{triple}'",
                fix="Use an LLVM triple such as x86_64-linux-gnu or aarch64-linux-gnu; "
                    "known architectures: " + ", ".join(codegen.llvm_get_targets())))
    triple = triple or str(codegen.llvm_get_system_triple())
    mcpu = target.get("mcpu") or "native"
    if mcpu != "native" and not codegen.llvm_is_valid_cpu(mcpu, triple):
        cpus = sorted(str(c) for c in codegen.llvm_get_cpu_archlist(
            tvm.target.Target({"kind": "llvm", "mtriple": triple})))
        close = difflib.get_close_matches(mcpu, cpus, n=3)
        choices = (f"Did you mean {' or '.join(repr(c) for c in close)}? "
                   f"({len(cpus)} CPUs are known: `llc -mcpu=help`)" if close else
                   f"Known CPUs: {', '.join(cpus)}")
        raise NNVMError(format_error(
            where, f"LLVM does not know the CPU '{mcpu}' for {triple}",
            fix=f"Use -mcpu=native (this machine) or an LLVM CPU name. {choices}"))
    mattr = [a for a in (target.get("mattr") or "").split(",") if a]
    bad = [a for a in mattr if a[0] not in "+-" or len(a) < 2]
    if bad:
        raise NNVMError(format_error(where, f"-mattr entries must look like +feature or "
                                     f"-feature; got {', '.join(bad)}",
                                     fix="e.g. -mattr=+avx2,+fma"))
    wanted = [a[1:] for a in mattr if a[0] == "+"]
    if wanted:
        spec = {"kind": "llvm", "mtriple": triple, "mattr": mattr,
                "mcpu": str(codegen.llvm_get_system_cpu()) if mcpu == "native" else mcpu}
        with _quiet_stderr():  # LLVM prints "'+x' is not a recognized feature" itself
            have = {str(f) for f in codegen.llvm_get_cpu_features(tvm.target.Target(spec))}
        unknown = [f for f in wanted if f not in have]
        if unknown:
            raise NNVMError(format_error(
                where, f"LLVM does not know the feature(s) {', '.join(unknown)} for {triple}",
                fix="Feature names are LLVM's (`llc -mattr=help`), e.g. +avx2,+fma,+avx512f"))


@contextlib.contextmanager
def _quiet_stderr():
    """Silence file descriptor 2 for one LLVM query whose only output is a duplicate of
    the error raised afterwards (LLVM writes to the fd, not to ``sys.stderr``)."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no usable fd 2 (embedded interpreter): just run it
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


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
