"""Compile the model's one OpenCL program, with an on-disk binary cache keyed by source hash.

Cache directory: ``$NNVM_CACHE_DIR/opencl`` or ``~/.cache/nnvm/opencl``; the key hashes the
source, the build options and the platform/device/driver identity, so a binary is reused
only by the device that produced it. A failing build raises ``KernelBuildError`` naming the
kernel(s) the compiler log points at. ``NNVM_CACHE_DIR=off`` (the shared rule of
``nnvm.cache_dirs``) disables it: every program compiles from source and nothing is written.

PoCL is the exception: it keeps its own kernel cache (``POCL_CACHE_DIR``, which this module
points at ``$NNVM_CACHE_DIR/pocl`` unless the user set it; under ``NNVM_CACHE_DIR=off`` PoCL's
and pyopencl's disk caches are turned off instead: ``configure_driver_caches``), and asking a
PoCL program for its ``BINARIES`` makes PoCL compile a generic work-group function for
*every* kernel on the spot (besides the size-specialised one it compiles at each kernel's
first launch), which roughly doubled cold build time. So on PoCL the binary is not cached here and is fetched
only when a model is exported (``fetch_binary``).
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import warnings

from nnvm import cache_dirs, progress
from nnvm.errors import NNVMError
from nnvm_codegen_c.diagnostics import clip_log, kernels_at_lines

#: not -cl-fast-relaxed-math: on Intel's CPU runtime it made 13,326 of a text detector's
#: 102,400 outputs NaN (rapidocr det, PP-OCRv4, in benchmarks/corpus), while these options give
#: the same build time and match onnxruntime; finite math is not assumed, so inf and NaN
#: propagate as on the reference target
BUILD_OPTIONS = "-cl-unsafe-math-optimizations -cl-no-signed-zeros -cl-mad-enable"


class KernelBuildError(NNVMError):
    """The OpenCL compiler rejected a generated kernel (a code generator bug)."""


class DriverCannotCompileError(KernelBuildError):
    """The OpenCL driver cannot compile even the probe kernel on this machine: the program
    failed because of the driver (e.g. PoCL's LLVM not knowing a newer CPU), not because of
    the generated code."""


def cache_dir() -> str | None:
    """The OpenCL cache folder, ``<cache root>/opencl`` (binaries, ``probe/``, ``icd/``);
    None under ``NNVM_CACHE_DIR=off`` (``nnvm.cache_dirs``). Creates nothing."""
    return cache_dirs.package_dir("opencl")


def device_key(dev) -> str:
    return "|".join([dev.platform.name, dev.platform.version, dev.name, dev.driver_version])


def cache_key(source: str, dev, options: str = BUILD_OPTIONS) -> str:
    h = hashlib.sha256()
    for part in (source, options, device_key(dev)):
        h.update(part.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


def has_driver_cache(dev) -> bool:
    """Whether the driver caches compiled kernels itself (PoCL), so ours is not needed."""
    return "portable computing language" in dev.platform.name.lower()


def configure_driver_caches() -> None:
    """Set the caches of the libraries under this backend, before pyopencl is imported and
    before the first PoCL build (both read their variables once per process).

    With a cache: PoCL's kernel cache goes under the NNVM cache (``POCL_CACHE_DIR``, unless the
    user chose a directory), keeping every compiled artefact of the project in one place.
    Under ``NNVM_CACHE_DIR=off`` there is no NNVM cache to point at and no disk cache is
    wanted: ``POCL_CACHE_DIR`` is left alone, PoCL's persistent cache is turned off
    (``POCL_KERNEL_CACHE=0``: it builds in a temporary folder it deletes on program release)
    and so are pyopencl's compiler and invoker caches (``PYOPENCL_NO_CACHE=1``, read when
    pyopencl is first imported, so it has no effect where the application imported it
    first), each unless the user set the variable."""
    root = cache_dirs.cache_root()
    if root is None:
        os.environ.setdefault("POCL_KERNEL_CACHE", "0")
        os.environ.setdefault("PYOPENCL_NO_CACHE", "1")
    elif "POCL_CACHE_DIR" not in os.environ:
        os.environ["POCL_CACHE_DIR"] = os.path.join(root, "pocl")


def fetch_binary(prg) -> bytes:
    """The program's device binary (on PoCL this compiles every kernel's generic work-group
    function, so only export calls it)."""
    import pyopencl as cl

    return bytes(prg.get_info(cl.program_info.BINARIES)[0])


def build_program(ctx, dev, source: str, options: str = BUILD_OPTIONS):
    """Return ``(program, from_cache, binary)`` for ``source`` on ``dev``; ``binary`` is None
    on a driver with its own cache (PoCL: see the module docstring).

    Raises:
        KernelBuildError: the source does not compile (kernel names and compiler log).
    """
    import pyopencl as cl

    if has_driver_cache(dev):
        return _build_source(ctx, dev, source, options), None, None
    folder = cache_dir()
    path = None if folder is None else os.path.join(folder, cache_key(source, dev, options)
                                                    + ".bin")
    if path is not None and os.path.exists(path):
        try:
            with open(path, "rb") as f:
                binary = f.read()
            prg = _quiet_build(cl.Program(ctx, [dev], [binary]), options)
            return prg, True, binary
        except Exception:  # stale or foreign binary: rebuild from source
            pass
    prg = _build_source(ctx, dev, source, options)
    binary = fetch_binary(prg)
    if path is not None:
        _write_atomic(path, binary)
    return prg, False, binary


def _quiet_build(prg, options: str, devices=None):
    """``prg.build`` without pyopencl's CompilerWarning: a driver's non-empty log on success
    ("Compilation done", vectoriser remarks) is not actionable for a user; a failed build
    raises, and the caller reports the whole log."""
    import pyopencl as cl

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cl.CompilerWarning)
        return prg.build(options=options, devices=devices)


def _build_source(ctx, dev, source: str, options: str):
    import pyopencl as cl

    prg = cl.Program(ctx, source)
    try:
        with progress.step(f"building the OpenCL program on {dev.name.strip()}"):
            _quiet_build(prg, options, [dev])
    except Exception as exc:
        try:
            log = prg.get_build_info(dev, cl.program_build_info.LOG)
        except Exception:
            log = ""
        from .device import INTEL_HINT, run_probe

        broken = run_probe(dev)  # fresh, not the cached verdict: is it the driver?
        if broken is not None:
            raise DriverCannotCompileError(
                f"OpenCL device '{dev.platform.name.strip()} / {dev.name.strip()}' -> the "
                f"driver cannot compile any kernel on this machine ({broken}) -> this is not "
                f"a code generator bug -> use another device (target option -device=..., or "
                f"NNVM_OPENCL_DEVICE), or install one that works here: {INTEL_HINT}") from None
        raise KernelBuildError(_build_message(source, log or str(exc))) from None
    return prg


def program_from_binary(ctx, dev, binary: bytes, source: str, options: str = BUILD_OPTIONS):
    """A program from an artifact's stored binary, falling back to the source."""
    import pyopencl as cl

    try:
        return _quiet_build(cl.Program(ctx, [dev], [binary]), options), True
    except Exception:
        return build_program(ctx, dev, source, options)[0], False


def _write_atomic(path: str, data: bytes) -> None:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".nnvm-cl-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:  # a read-only cache is not an error: the next run compiles again
        pass


def _build_message(source: str, log: str) -> str:
    lines = set()
    for text in log.splitlines():  # clang: "file:L:C: error: ..."; PoCL: "error: file:L:C: ..."
        m = re.search(r":(\d+):\d+:", text)
        if m and "error" in text:
            lines.add(int(m.group(1)))
    lines = sorted(lines)
    names = kernels_at_lines(source, lines, r"__kernel")
    where = f"kernel(s) {', '.join(names)}" if names else "program"
    tail = clip_log(log)
    return (f"OpenCL build of {where} failed -> the generated source does not compile -> "
            f"this is a code generator bug; please report it with the log below "
            f"(set NNVM_OPENCL_DUMP=1 to print the source)\ncompiler log:\n{tail}")
