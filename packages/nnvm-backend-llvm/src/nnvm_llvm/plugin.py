"""Entry point of the NNVM LLVM backend (group ``nnvm``, name ``llvm``).

Imports neither ``tvm`` nor ``tvm_ffi``: availability is reported as a reason string. The
runtime needs apache-tvm-ffi only; building needs apache-tvm (the ``[compiler]`` extra).
"""

from nnvm import hookimpl

from .backend import LLVMBackend, compiler_reason, runtime_reason


@hookimpl
def nnvm_register_backends() -> list:
    return [LLVMBackend()]


@hookimpl
def nnvm_plugin_info() -> dict:
    build = compiler_reason()
    summary = "LLVM backend (target 'llvm'): " + (
        "build and run" if build is None else
        f"run exported models only; cannot build ({build})" if runtime_reason() is None else
        "unavailable")
    return {"summary": summary}
