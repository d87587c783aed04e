"""Entry point of the NNVM CUDA backend (group ``nnvm``, name ``cuda``).

Imports without CuPy. Three states, reported by ``nnvm plugins``:

* full: a GPU, its driver and CuPy -> ``build`` and ``run``;
* compile-only: nvcc (or NVRTC) but no usable GPU -> ``build`` emits PTX and ``export``
  stores it; ``run`` raises ``BackendUnavailableError`` naming what is missing;
* unavailable: no CUDA C compiler and no GPU runtime.
"""

from nnvm import hookimpl

from . import device as devices
from . import toolchain
from .backend import CUDABackend

SUMMARY = "CUDA backend (target 'cuda')"


@hookimpl
def nnvm_targets() -> list:
    return [CUDABackend()]


@hookimpl
def nnvm_plugin_info() -> dict:
    compile_why = toolchain.compiler_reason()
    run_why = devices.runtime_reason()
    if compile_why is not None and run_why is not None:
        return {"summary": SUMMARY, "available": f"{compile_why}; and cannot run: {run_why}"}
    if run_why is not None:
        return {"summary": f"{SUMMARY}: compile-only here: {toolchain.describe_compiler()} "
                           f"emits PTX (build and export work); run needs a GPU: {run_why}"}
    return {"summary": f"{SUMMARY}: {devices.describe()}; compiler: "
                       f"{toolchain.describe_compiler()}"}
