"""Finding an OpenCL device, and why there is none (pyopencl imported lazily)."""

from __future__ import annotations

import functools

from nnvm.errors import BackendUnavailableError

INSTALL_HINT = "pip install nnvm-backend-opencl[pocl]"


def pyopencl_reason() -> str | None:
    try:
        import pyopencl  # noqa: F401
    except Exception as exc:  # ImportError, or a broken ICD loader raising at import
        return f"pyopencl not importable: {INSTALL_HINT} ({type(exc).__name__}: {exc})"
    return None


@functools.lru_cache(maxsize=None)
def devices() -> tuple:
    """Every (platform, device) pair found; empty when none (never raises)."""
    if pyopencl_reason() is not None:
        return ()
    from .program import use_pocl_cache_dir

    use_pocl_cache_dir()
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


def unavailable_reason() -> str | None:
    """None when a device is usable, else the reason and the fix."""
    why = pyopencl_reason()
    if why is not None:
        return why
    if not devices():
        return ("no OpenCL platform/device found (no ICD installed); for a CPU device: "
                f"{INSTALL_HINT}")
    return None


def describe() -> str:
    """'platform / device' of every device found (for ``nnvm plugins``)."""
    return "; ".join(f"{p.name.strip()} / {d.name.strip()}" for p, d in devices())


def select(platform: str | None = None, device: str | None = None):
    """The (platform, device) chosen by the target options ``-platform=`` and ``-device=``
    (a substring of the name, or an index); the first device otherwise.

    Raises:
        BackendUnavailableError: no device, or none matching the options.
    """
    why = unavailable_reason()
    if why is not None:
        raise BackendUnavailableError(f"target 'opencl': {why}")
    found = list(devices())
    if platform:
        found = [(p, d) for i, (p, d) in enumerate(found)
                 if platform.lower() in p.name.lower() or platform == str(i)]
    if device:
        found = [(p, d) for i, (p, d) in enumerate(found)
                 if device.lower() in d.name.lower() or device == str(i)]
    if not found:
        raise BackendUnavailableError(
            f"target 'opencl -platform={platform or ''} -device={device or ''}': no matching "
            f"device; found: {describe() or 'none'}")
    return found[0]


def limits(dev) -> dict:
    """The device limits the kernel templates size their work-groups by, and the device
    type: ``"cpu"`` selects the register-blocked vector kernels (nnvm.codegen.cpu_templates)
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
