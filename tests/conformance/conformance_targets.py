"""The targets the conformance suite runs on, found at collection time.

Each is ``(id, target string, reason)``: ``reason`` is None when the target is usable here,
else the backend's own words, which the tests skip with. ``reference`` is the oracle and so is
not a target. OpenCL contributes one target per usable device (tests/backends/opencl_devices.py)
plus ``opencl -kernels=portable`` on the default device, which runs only the ops with a CPU
kernel variant so the tiled GPU templates stay tested on a CPU driver.
"""

from __future__ import annotations

import importlib.util
import pathlib

from nnvm.backend import get_backend

BACKEND_TESTS = pathlib.Path(__file__).resolve().parents[1] / "backends"

#: ops whose OpenCL kernels have a CPU variant; the portable-kernels target runs only these
GPU_TEMPLATE_OPS = ("dense", "matmul", "conv2d")


def _opencl_devices():
    spec = importlib.util.spec_from_file_location("_conformance_opencl_devices",
                                                  BACKEND_TESTS / "opencl_devices.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _llvm_reason():
    try:
        return get_backend("llvm", require_available=False).compiler_available()
    except Exception as exc:  # noqa: BLE001 - any failure to load the plugin is the reason
        return f"llvm backend not installed ({exc})"


def _cuda_reason():
    try:
        from nnvm_cuda import device
    except ImportError as exc:
        return f"nnvm-backend-cuda not installed ({exc})"
    return device.runtime_reason()


def targets() -> list[tuple[str, str, str | None]]:
    out = [("llvm", "llvm", _llvm_reason())]
    ocl = _opencl_devices()
    if ocl.REASON is not None:
        out.append(("opencl", "opencl", f"opencl unavailable: {ocl.REASON}"))
    else:
        out += [(f"opencl_{word}", target, None) for word, target in ocl.TARGETS]
        out.append(("opencl_portable_kernels", "opencl -kernels=portable", None))
    out.append(("cuda", "cuda", _cuda_reason()))
    return out


def backend_of(target_id: str) -> str:
    """``llvm``, ``opencl`` or ``cuda``: the key of the host-fallback ledger."""
    return target_id.split("_", 1)[0]
