"""What the CUDA runtime needs (CuPy, a driver, a device), and the device's limits.

Nothing here imports CuPy at module import time; each probe is cached and never raises.
The reasons are written for ``nnvm plugins`` and for the error ``run`` raises on a machine
that can compile but not execute.
"""

from __future__ import annotations

import ctypes
import functools

INSTALL_HINT = "pip install nnvm-backend-cuda[cuda12] (or [cuda13])"

#: limits every architecture >= sm_50 shares; kernels are generated for these when no
#: device is present, and checked against the real device's attributes before launch.
ARCH_LIMITS = {"max_work_group_size": 1024, "local_mem_size": 48 * 1024,
               "max_grid": (2 ** 31 - 1, 65535, 65535), "max_block": (1024, 1024, 64)}


@functools.lru_cache(maxsize=None)
def driver_reason() -> str | None:
    """None when libcuda (the driver API) loads, else why not."""
    for lib in ("libcuda.so.1", "libcuda.so", "nvcuda.dll", "libcuda.dylib"):
        try:
            ctypes.CDLL(lib)
            return None
        except OSError:
            continue
    return "no CUDA driver (libcuda.so.1 not found; install the NVIDIA driver)"


@functools.lru_cache(maxsize=None)
def cupy_reason() -> str | None:
    try:
        import cupy  # noqa: F401  (the import is the probe)
    except Exception as exc:  # ImportError, or a CuPy built for another CUDA raising
        return f"cupy not installed ({type(exc).__name__}: {exc}); {INSTALL_HINT}"
    return None


@functools.lru_cache(maxsize=None)
def device_count() -> int:
    if cupy_reason() is not None or driver_reason() is not None:
        return 0
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:
        return 0


def runtime_reason() -> str | None:
    """None when kernels can run here, else every missing piece (driver, CuPy, device)."""
    missing = [r for r in (driver_reason(), cupy_reason()) if r is not None]
    if missing:
        return "; ".join(missing)
    if device_count() == 0:
        return "no CUDA device (the driver and CuPy load, but cudaGetDeviceCount() is 0)"
    return None


def device_arch(ordinal: int = 0) -> str | None:
    """``sm_NN`` of device ``ordinal``, or None without a usable device."""
    if runtime_reason() is not None:
        return None
    import cupy

    try:
        return f"sm_{cupy.cuda.Device(ordinal).compute_capability}"
    except Exception:
        return None


def describe(ordinal: int = 0) -> str:
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(ordinal)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return f"{name} (sm_{cupy.cuda.Device(ordinal).compute_capability}, " \
           f"{props['totalGlobalMem'] >> 20} MiB)"


def limits(ordinal: int = 0) -> dict:
    """Launch limits of device ``ordinal`` from its attributes (``cudaDeviceGetAttribute``)."""
    import cupy

    a = cupy.cuda.Device(ordinal).attributes
    return {"max_work_group_size": int(a["MaxThreadsPerBlock"]),
            "local_mem_size": int(a["MaxSharedMemoryPerBlock"]),
            "max_grid": (int(a["MaxGridDimX"]), int(a["MaxGridDimY"]), int(a["MaxGridDimZ"])),
            "max_block": (int(a["MaxBlockDimX"]), int(a["MaxBlockDimY"]),
                          int(a["MaxBlockDimZ"])),
            "multiprocessors": int(a["MultiProcessorCount"])}
