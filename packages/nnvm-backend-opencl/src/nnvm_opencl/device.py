"""Finding a *usable* OpenCL device, and why there is none (pyopencl imported lazily).

A device the ICD loader lists is not necessarily one that works: PoCL's bundled LLVM cannot
compile any kernel on CPUs newer than itself ("unknown target CPU 'generic'"), yet it lists
the CPU. So a device counts as usable only when a probe kernel builds and runs on it and
returns the right numbers (``probe``); the verdict is cached per device and driver version,
in this process and on disk (in this process only under ``NNVM_CACHE_DIR=off``).
Availability (``unavailable_reason``), ``nnvm plugins``, ``best_target()`` and device
selection all go through the probe; nothing here runs at import time.

Device choice, first match wins: the target options ``-platform=`` / ``-device=``, then the
environment variable ``NNVM_OPENCL_DEVICE`` (a substring of "platform / device", or an
index in ``nnvm plugins``' list), then the fastest usable device (``rank``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import warnings

from nnvm.errors import BackendUnavailableError

INSTALL_HINT = "pip install nnvm-backend-opencl[intel]"
INTEL_HINT = ("pip install nnvm-backend-opencl[intel] (Intel's CPU OpenCL runtime, works on "
              "Intel and AMD x86-64 CPUs; registered automatically)")
ENV_DEVICE = "NNVM_OPENCL_DEVICE"
#: bump when the probe kernel changes, so cached verdicts are not reused across versions
PROBE_VERSION = 1

PROBE_SOURCE = r"""
typedef float float8u __attribute__((aligned(4), ext_vector_type(8)));
__kernel void nnvm_probe(__global const float *x, __global float *y) {
    __local float tile[8];
    int i = get_global_id(0), l = get_local_id(0);
    float8u v = *(__global const float8u *)x * (float)(i + 1);
    tile[l] = v.s0 + v.s7 + exp(0.0f);
    barrier(CLK_LOCAL_MEM_FENCE);
    y[i] = tile[7 - l] + fmax(x[i], 0.5f);
}
"""


def pyopencl_reason() -> str | None:
    """None when pyopencl imports, else why and the fix. Sets the drivers' cache variables
    first (``program.configure_driver_caches``): this is the backend's first pyopencl import."""
    from .program import configure_driver_caches

    configure_driver_caches()
    try:
        import pyopencl  # noqa: F401
    except Exception as exc:  # ImportError, or a broken ICD loader raising at import
        return f"pyopencl not importable: {INSTALL_HINT} ({type(exc).__name__}: {exc})"
    return None


@functools.lru_cache(maxsize=None)
def devices() -> tuple:
    """Every (platform, device) pair the ICD loader lists, usable or not; empty when none
    (never raises). Registers the wheel-installed drivers first (``drivers.register``)."""
    if pyopencl_reason() is not None:
        return ()
    from .drivers import register

    register()
    import pyopencl as cl

    try:
        platforms = cl.get_platforms()
    except Exception:
        return ()
    found = []
    for p in platforms:
        try:
            found += [(p, d) for d in p.get_devices()]
        except Exception:
            continue
    return tuple(found)


@functools.lru_cache(maxsize=None)
def context(dev):
    """One OpenCL context per device and process, shared by every module on it.

    Why shared: a context is the unit the driver keeps compiled programs and its kernel
    library in; one per module made each model pay that set-up again and kept N copies.
    """
    import pyopencl as cl

    return cl.Context([dev])


def name(pair) -> str:
    p, d = pair
    return f"{p.name.strip()} / {d.name.strip()}"


def _probe_cache_path(dev) -> str | None:
    """Where ``dev``'s verdict is kept on disk; None under ``NNVM_CACHE_DIR=off``."""
    from .program import cache_dir, device_key

    folder = cache_dir()
    if folder is None:
        return None
    key = f"{PROBE_VERSION}|{device_key(dev)}"
    return os.path.join(folder, "probe", hashlib.sha256(key.encode()).hexdigest()[:24]
                        + ".json")


def run_probe(dev) -> str | None:
    """Build and run the probe kernel on ``dev``: None when it works, else the reason."""
    import numpy as np
    import pyopencl as cl

    try:
        ctx = context(dev)
        queue = cl.CommandQueue(ctx)
        prg = cl.Program(ctx, PROBE_SOURCE)
        try:
            with warnings.catch_warnings():  # a driver's chatter is not the user's business
                warnings.simplefilter("ignore")
                prg.build(devices=[dev])
        except Exception as exc:
            try:
                log = prg.get_build_info(dev, cl.program_build_info.LOG)
            except Exception:
                log = ""
            text = " ".join((log or str(exc)).split())
            return f"cannot compile a probe kernel: {text[:300]}"
        x = np.arange(8, dtype=np.float32)
        mf = cl.mem_flags
        xb = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
        yb = cl.Buffer(ctx, mf.WRITE_ONLY, x.nbytes)
        prg.nnvm_probe(queue, (8,), (8,), xb, yb)
        y = np.empty_like(x)
        cl.enqueue_copy(queue, y, yb)
        queue.finish()
    except Exception as exc:
        return f"probe kernel failed to run: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    i = np.arange(8, dtype=np.float32)
    want = (7.0 * (8 - i)) + 1.0 + np.maximum(x, 0.5)  # tile[7-l] = (0+7)*((7-l)+1) + 1
    if not np.allclose(y, want, rtol=1e-5):
        return f"probe kernel ran but returned wrong numbers ({y.tolist()} != {want.tolist()})"
    return None


@functools.lru_cache(maxsize=None)
def probe(dev) -> str | None:
    """None when ``dev`` builds and runs the probe kernel correctly, else the driver's reason.

    Cached per device and driver version on disk (a cold PoCL build takes ~1 s, a cached
    verdict ~0.1 ms) and per process; ``NNVM_OPENCL_REPROBE=1`` ignores the disk cache, and
    under ``NNVM_CACHE_DIR=off`` there is none: each process probes once, in memory.
    """
    path = _probe_cache_path(dev)
    if path is not None and os.environ.get("NNVM_OPENCL_REPROBE") != "1":
        try:
            with open(path, encoding="utf-8") as f:
                got = json.load(f)
            if isinstance(got, dict) and "reason" in got:
                reason = got["reason"]
                if reason is None or isinstance(reason, str):
                    return reason
        except (OSError, ValueError):
            pass
    reason = run_probe(dev)
    if path is not None:
        from .program import _write_atomic

        _write_atomic(path, json.dumps({"reason": reason}).encode("utf-8"))
    return reason


def rank(pair) -> tuple:
    """Sort key, higher first: GPUs over accelerators over CPUs; among CPU drivers Intel's
    runtime over PoCL (measured: the same generated kernels run faster on it; see
    docs/backends.md); then the order the loader lists them in (stable sort)."""
    import pyopencl as cl

    p, d = pair
    kind = int(d.type)
    tier = 2 if kind & cl.device_type.GPU else (1 if kind & cl.device_type.ACCELERATOR else 0)
    driver = 1 if "intel" in p.name.lower() else 0
    return (tier, driver)


def usable() -> list:
    """The usable (platform, device) pairs, fastest first."""
    ok = [pair for pair in devices() if probe(pair[1]) is None]
    return sorted(ok, key=rank, reverse=True)


def unavailable_reason() -> str | None:
    """None when a device is usable, else the reason and the fix."""
    why = pyopencl_reason()
    if why is not None:
        return why
    found = devices()
    if not found:
        return ("no OpenCL platform/device found (no ICD installed); for a CPU device: "
                f"{INSTALL_HINT}")
    if usable():
        return None
    bad = "; ".join(f"{name(pair)}: {probe(pair[1])}" for pair in found)
    return f"no usable OpenCL device ({bad}); fix: {INTEL_HINT}"


def describe() -> str:
    """Every device found, which is the default and why a device is unusable (for
    ``nnvm plugins``)."""
    ok = usable()
    default = ok[0] if ok else None
    try:
        default = _from_env(ok) or default
    except BackendUnavailableError:
        pass
    return _listing(default)


def _listing(default=None) -> str:
    """``0: platform / device [default]; 1: ... [unusable: why]`` (``none`` when empty): the
    one spelling of the device list, in ``nnvm plugins`` and in every selection error."""
    parts = []
    for i, pair in enumerate(devices()):
        why = probe(pair[1])
        tag = " [default]" if pair is default else (f" [unusable: {why}]" if why else "")
        parts.append(f"{i}: {name(pair)}{tag}")
    return "; ".join(parts) or "none"


def _matches(pair, index: int, text: str, platform_only: bool = False) -> bool:
    hay = pair[0].name if platform_only else f"{name(pair)} {pair[1].name}"
    return text.lower() in hay.lower() or text == str(index)


def _from_env(ok: list):
    want = os.environ.get(ENV_DEVICE)
    if not want:
        return None
    for i, pair in enumerate(devices()):
        if pair in ok and _matches(pair, i, want):
            return pair
    raise BackendUnavailableError(
        f"{ENV_DEVICE}={want!r}: no usable OpenCL device matches; found: "
        f"{_listing()} -> unset it or name one of the usable devices")


def select(platform: str | None = None, device: str | None = None):
    """The (platform, device) to run on: chosen by the target options ``-platform=`` and
    ``-device=`` (a substring of the name, or an index in the list of ``nnvm plugins``),
    else by ``NNVM_OPENCL_DEVICE``, else the fastest usable device.

    Raises:
        BackendUnavailableError: no usable device, or none matching the options (naming the
            devices found and why each unusable one is).
    """
    why = unavailable_reason()
    if why is not None:
        raise BackendUnavailableError(f"target 'opencl': {why}")
    ok = usable()
    if not platform and not device:
        return _from_env(ok) or ok[0]
    listed = list(enumerate(devices()))
    if platform:
        listed = [(i, p) for i, p in listed if _matches(p, i, platform, platform_only=True)]
    if device:
        listed = [(i, p) for i, p in listed if _matches(p, i, device)]
    good = sorted((p for _, p in listed if p in ok), key=rank, reverse=True)
    if not good:
        raise BackendUnavailableError(
            f"target 'opencl -platform={platform or ''} -device={device or ''}': no matching device "
            f"among the usable ones; found: {_listing()}")
    return good[0]


def limits(dev) -> dict:
    """The device limits the kernel templates size their work-groups by, and the device
    type: ``"cpu"`` selects the register-blocked vector kernels (nnvm_opencl.cpu_templates)
    over the local-memory tiled ones, which are slow where work-groups are loops."""
    import pyopencl as cl

    kind = "cpu" if int(dev.type) & cl.device_type.CPU else (
        "gpu" if int(dev.type) & cl.device_type.GPU else "accelerator")
    return {"device_type": kind,
            "preferred_vector_width_float": int(dev.preferred_vector_width_float),
            "max_work_group_size": int(dev.max_work_group_size),
            "local_mem_size": int(dev.local_mem_size),
            "fp64": "cl_khr_fp64" in dev.extensions,
            "global_mem_size": int(dev.global_mem_size),
            "max_mem_alloc_size": int(dev.max_mem_alloc_size)}
