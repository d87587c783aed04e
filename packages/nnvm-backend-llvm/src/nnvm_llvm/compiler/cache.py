"""Kernel cache: scheduled kernels and linked libraries, in memory and on disk.

Keys are structural: a group's key hashes its ops, attributes, wiring, input and output
shapes and dtypes, weight packing, the target and the schedule version (NNVM's
``GraphKey``), so identical groups in one model share one function and a rebuild of the
same model, in this process or a later one, skips scheduling and LLVM entirely.

Disk layout under ``NNVM_CACHE_DIR`` (default ``~/.cache/nnvm/llvm``):
``kernels/<key>.py`` (scheduled TIR as TVMScript; ``tvm.ir.save_json`` crashes on TIRX
functions in TVM 0.27), ``libs/<key>.so`` (linked
libraries), ``threadpool-<hash>.o``. Set ``NNVM_CACHE_DIR=off`` to disable the disk cache.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading

import tvm



def _source_version() -> str:
    """Hash of the compiler's own sources: editing a rule or a schedule invalidates keys."""
    h = hashlib.sha256()
    here = os.path.dirname(os.path.abspath(__file__))
    for name in sorted(os.listdir(here)):
        if name.endswith((".py", ".c")):
            with open(os.path.join(here, name), "rb") as f:
                h.update(name.encode() + f.read())
    h.update(tvm.__version__.encode())
    return h.hexdigest()[:12]


SCHEDULE_VERSION = _source_version()

_lock = threading.Lock()
_kernels: dict[str, object] = {}
_libs: dict[str, bytes] = {}
counters = {"kernel_hits": 0, "kernel_misses": 0, "lib_hits": 0, "lib_misses": 0}


def cache_dir() -> str | None:
    d = os.environ.get("NNVM_CACHE_DIR")
    if d and d.lower() in ("off", "0", "none", "false"):
        return None
    d = d or os.path.join(os.path.expanduser("~"), ".cache", "nnvm", "llvm")
    try:
        os.makedirs(os.path.join(d, "kernels"), exist_ok=True)
        os.makedirs(os.path.join(d, "libs"), exist_ok=True)
    except OSError:
        return None
    return d


def digest(text: str) -> str:
    return hashlib.sha256(f"v{SCHEDULE_VERSION}|{text}".encode()).hexdigest()[:24]


def _write_atomic(path: str, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def get_kernel(key: str):
    """The scheduled PrimFunc for ``key`` or None."""
    with _lock:
        if key in _kernels:
            counters["kernel_hits"] += 1
            return _kernels[key]
    d = cache_dir()
    if d is not None:
        path = os.path.join(d, "kernels", key + ".py")
        try:
            with open(path, encoding="utf-8") as f:
                func = tvm.script.from_source(f.read())
            if isinstance(func, tvm.IRModule):
                func = func["main"]
        except OSError:
            func = None
        except Exception:  # noqa: BLE001 - a corrupt entry is a miss, never an error
            func = None
        if func is not None:
            with _lock:
                _kernels[key] = func
                counters["kernel_hits"] += 1
            return func
    with _lock:
        counters["kernel_misses"] += 1
    return None


def put_kernel(key: str, func) -> None:
    with _lock:
        _kernels[key] = func
    d = cache_dir()
    if d is not None:
        try:
            _write_atomic(os.path.join(d, "kernels", key + ".py"),
                          func.script().encode("utf-8"))
        except Exception:  # noqa: BLE001 - the disk cache is best effort
            pass


def get_lib(key: str) -> bytes | None:
    with _lock:
        if key in _libs:
            counters["lib_hits"] += 1
            return _libs[key]
    d = cache_dir()
    if d is not None:
        try:
            with open(os.path.join(d, "libs", key + ".so"), "rb") as f:
                data = f.read()
            with _lock:
                _libs[key] = data
                counters["lib_hits"] += 1
            return data
        except OSError:
            pass
    with _lock:
        counters["lib_misses"] += 1
    return None


def put_lib(key: str, data: bytes) -> None:
    with _lock:
        _libs[key] = data
    d = cache_dir()
    if d is not None:
        try:
            _write_atomic(os.path.join(d, "libs", key + ".so"), data)
        except OSError:
            pass


def clear_memory() -> None:
    """Forget the in-memory entries (the disk cache stays)."""
    with _lock:
        _kernels.clear()
        _libs.clear()
