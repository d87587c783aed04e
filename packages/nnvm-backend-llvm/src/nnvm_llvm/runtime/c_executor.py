"""One C call per run: the executor loop of ``deploy/nnvm_executor.h`` serving ``lib.run()``.

Why: calling every kernel from a Python loop costs about a microsecond of interpreter and
FFI work per kernel, as much as the kernels of a small streaming model (a VAD step) take.
``c_executor.c`` runs the same loop as the exported C library (``nnvm export-c``), over the
module's own NumPy buffers, calling each kernel's own symbol in the module's library (the
tvm_ffi Function where it cannot be had), so a run is one FFI call (or one per stretch of
compiled steps between host steps).

The executor is a tiny C file compiled once with the system C compiler (``$CC``, ``cc``,
``gcc``; ~0.1 s) and kept as a verified entry in the kernel cache folder
(``$NNVM_CACHE_DIR/runtime/``, the format of ``nnvm_llvm.compiler.cache``, TVM-free). Where no compiler exists
(a runtime-only deployment) and the cache has no entry, modules keep the Python loop;
``lib.stats()["executor"]`` says which one runs and why. ``NNVM_LLVM_EXECUTOR=python``
forces the Python loop (for comparisons), ``=c`` makes its absence an error.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import tempfile
import threading
import weakref

import numpy as np

from nnvm.errors import NNVMError, format_error

_HERE = os.path.dirname(os.path.abspath(__file__))
_SOURCE = os.path.join(_HERE, "c_executor.c")
_DEPLOY = os.path.join(os.path.dirname(_HERE), "deploy")
_HEADER = os.path.join(_DEPLOY, "nnvm_executor.h")
_MODES = ("auto", "c", "python")
_FUNCTIONS = ("nnvm_exec_create", "nnvm_exec_run", "nnvm_exec_time", "nnvm_exec_failed_step",
              "nnvm_exec_destroy")

_lock = threading.Lock()
_state: dict = {}  # "lib": loaded tvm_ffi module, or "reason": why it cannot be had


def dl_dtype(dtype: str, where: str) -> tuple[int, int]:
    """DLPack (code, bits) of a NumPy dtype, as ``tvm_ffi.from_dlpack`` reports it."""
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return 6, 8  # kDLBool
    code = {"i": 0, "u": 1, "f": 2}.get(dt.kind)
    if code is None:
        raise NNVMError(format_error(where, "has a dtype the C executor cannot hold",
                                     "int, uint, float or bool", dtype,
                                     fix="Only numeric tensors can be passed to kernels"))
    return code, dt.itemsize * 8


def compiler() -> str | None:
    """The C compiler to use: ``$CC``, else ``cc`` or ``gcc`` on PATH, else None."""
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def mode() -> str:
    """``NNVM_LLVM_EXECUTOR``: ``auto`` (default: C where it can be had), ``c`` or ``python``."""
    value = os.environ.get("NNVM_LLVM_EXECUTOR", "auto").strip().lower() or "auto"
    if value not in _MODES:
        raise NNVMError(format_error("NNVM_LLVM_EXECUTOR", "unknown executor", "|".join(_MODES),
                                     value, fix="Unset it or use one of those values"))
    return value


def _cache_key(tvm_ffi) -> str:
    from ..compiler import cache

    with open(_SOURCE, encoding="utf-8") as f:
        text = f.read()
    with open(_HEADER, encoding="utf-8") as f:
        text += f.read()
    return "c-executor-" + cache.digest(
        f"{platform.machine()}|tvm_ffi {getattr(tvm_ffi, '__version__', '?')}|{text}")


def _compile(tvm_ffi) -> bytes:
    import tvm_ffi.libinfo

    cc = compiler()
    if cc is None:
        raise NNVMError("no C compiler found ($CC, cc or gcc)")
    with tempfile.TemporaryDirectory(prefix="nnvm-c-executor-") as work:
        out = os.path.join(work, "c_executor.so")
        cmd = [cc, "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-I", _DEPLOY,
               "-I", tvm_ffi.libinfo.find_include_path(), _SOURCE, "-o", out]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise NNVMError(f"{cc} failed on c_executor.c: {proc.stderr[-1000:]}")
        with open(out, "rb") as f:
            return f.read()


def library():
    """The loaded executor library (a ``tvm_ffi`` module), or None with ``reason()`` set.

    Compiled on first use in the process, or read from the kernel cache, then loaded once
    per process and kept (it owns no threads and no per-model state). A missing or failing
    compiler is remembered for the process; a failed load is retried next time."""
    with _lock:
        if "lib" in _state:
            return _state["lib"]
        if "so" not in _state and "reason" in _state:
            return None
        try:
            from .executor import _ffi, load_library

            tvm_ffi = _ffi()
            if "so" not in _state:
                _state["so"] = _compiled(tvm_ffi)
            lib = load_library(_state["so"], kind="executor")
            for name in _FUNCTIONS:
                lib[name]  # noqa: B018 - raises AttributeError when it is not our library
            _state["lib"] = lib
            _state.pop("reason", None)
        except (NNVMError, OSError, AttributeError) as exc:
            _state["reason"] = str(exc).strip().splitlines()[-1]
        return _state.get("lib")


def _compiled(tvm_ffi) -> bytes:
    """The executor library's bytes: from the disk cache, else compiled and stored there.

    Stored as a verified entry (the kernel cache's format: a truncated or replaced file is
    recompiled, never loaded) in ``runtime/`` of the kernel cache folder, 0700, apart from
    ``libs/``, which holds model libraries only."""
    from ..compiler import cache

    key = _cache_key(tvm_ffi)
    d = cache.cache_dir()
    path = None
    try:  # native code is read only from a folder of ours that nobody else can write
        if d is not None and cache._private_dir(os.path.join(d, "runtime"), tighten=True):
            path = os.path.join(d, "runtime", key + cache.ENTRY_SUFFIX)
    except OSError:
        pass
    if path is not None:
        try:
            with open(path, "rb") as f:
                return cache.decode_entry(key, f.read())
        except (OSError, ValueError):
            pass  # missing or damaged: compile again and replace it
    so = _compile(tvm_ffi)
    if path is not None:
        try:
            cache._write_atomic(path, cache.encode_entry(key, so))
        except OSError:
            pass  # the disk cache is best effort
    return so


def reason() -> str | None:
    """Why the C executor is unavailable in this process (None when it is, or untried)."""
    return _state.get("reason")


class CExecutor:
    """The C tables of one module: its tensors (NumPy buffers it keeps alive), its kernels
    (tvm_ffi functions it keeps alive) and its compiled steps.

    Args:
        lib: the executor library (``library()``).
        arrays: every buffer a kernel touches, in tensor-id order (must stay allocated).
        funcs: the kernels, in function-id order: each a tvm_ffi Function or the address of
            its symbol (``executor.kernel_symbols``); either must stay alive (the symbol's
            library).
        steps: ``(function id, [tensor ids])`` of every compiled step, in run order.
    """

    def __init__(self, lib, arrays: list[np.ndarray], funcs: list, steps: list):
        table = np.zeros((len(arrays), 5), dtype=np.int64)
        shapes: list[int] = []
        for i, arr in enumerate(arrays):
            if not arr.flags.c_contiguous:
                raise NNVMError(format_error(f"C executor, tensor {i}", "is not contiguous",
                                             fix="This is a bug in the llvm runtime; report "
                                                 "it with the model"))
            code, bits = dl_dtype(arr.dtype.name, f"C executor, tensor {i}")
            table[i] = (arr.ctypes.data, arr.ndim, len(shapes), code, bits)
            shapes.extend(int(d) for d in arr.shape)
        shape_arr = np.asarray(shapes or [0], dtype=np.int64)
        func_arr = np.asarray([(f, 1) if isinstance(f, int) else (f.__chandle__(), 0)
                               for f in funcs] or [(0, 0)], dtype=np.int64)
        step_arr = np.zeros((max(len(steps), 1), 3), dtype=np.int32)
        step_args: list[int] = []
        for s, (func, ids) in enumerate(steps):
            step_arr[s] = (func, len(ids), len(step_args))
            step_args.extend(ids)
        args_arr = np.asarray(step_args or [0], dtype=np.int32)
        self.handle = int(lib["nnvm_exec_create"](
            len(arrays), table.ctypes.data, shape_arr.ctypes.data, len(shapes), len(funcs),
            func_arr.ctypes.data, len(steps), step_arr.ctypes.data, args_arr.ctypes.data,
            len(step_args)))
        self.run = lib["nnvm_exec_run"]  # run(handle, lo, hi)
        self.time = lib["nnvm_exec_time"]  # time(handle, lo, hi, repeat) -> nanoseconds
        self._failed = lib["nnvm_exec_failed_step"]
        self.num_steps = len(steps)
        self._free = weakref.finalize(self, _destroy, lib["nnvm_exec_destroy"], self.handle)

    def failed_step(self) -> int:
        """The compiled step whose kernel failed in the latest run, or -1."""
        return int(self._failed(self.handle))


def _destroy(destroy, handle: int) -> None:
    try:
        destroy(handle)
    except Exception:  # noqa: BLE001 - at interpreter exit tvm_ffi may already be gone
        pass
