"""The ``llvm`` backend record: options, availability, and the doors to compiler and runtime.

Importing this module costs nothing: the compiler (``nnvm_llvm.compiler``, needs apache-tvm)
is imported by ``build`` and the runtime (``nnvm_llvm.runtime``, needs apache-tvm-ffi only)
by ``load``. The target is *usable* where the runtime works, so a deployment without
apache-tvm can load and run exported models; building there raises the reason and the fix.
"""

from __future__ import annotations

import importlib.util

from nnvm.errors import BackendUnavailableError

COMPILER_MISSING = "apache-tvm not importable: pip install nnvm-backend-llvm[compiler]"
RUNTIME_MISSING = "apache-tvm-ffi not importable: pip install apache-tvm-ffi"


def _findable(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it (cheap, never raises)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def runtime_reason() -> str | None:
    """None when exported models can be loaded and run here, else why not."""
    return None if _findable("tvm_ffi") else RUNTIME_MISSING


def compiler_reason() -> str | None:
    """None when models can be built here, else why not (with the command that fixes it)."""
    reason = runtime_reason()
    if reason is not None:
        return reason
    return None if _findable("tvm") else COMPILER_MISSING


class LLVMBackend:
    """Backend record for ``llvm``: CPU code through Apache TVM (TE/TOPI -> TIR -> LLVM)."""

    name = "llvm"
    description = "CPU code generation through Apache TVM: tiled, vectorised, multi-threaded"
    priority = 50
    options = {
        "mcpu": "CPU to tune for: 'native' (default: this machine) or an LLVM CPU name",
        "mtriple": "LLVM target triple (default: this machine's)",
        "mattr": "LLVM feature list, e.g. +avx2,+fma",
        "num-threads": "kernel threads at run time (default: TVM_NUM_THREADS or all CPUs)",
        "opt-level": "LLVM optimisation level 0-3 (default 3)",
    }

    def is_available(self) -> str | None:
        return runtime_reason()

    def compiler_available(self) -> str | None:
        return compiler_reason()

    def check_target(self, target) -> None:
        """Validate option values (``-mcpu``, ``-mtriple``, ``-mattr``...) with LLVM before
        the build starts (``nnvm.backend.check_target``). Without apache-tvm nothing can be
        asked, and ``build`` then raises the missing-compiler reason anyway."""
        if compiler_reason() is not None:
            return
        from .compiler.target import check_options

        check_options(target)

    def build(self, graph, params, target, config):
        reason = compiler_reason()
        if reason is not None:
            raise BackendUnavailableError(f"target 'llvm' cannot build here: {reason} "
                                          f"(loading exported models needs only apache-tvm-ffi)")
        from .compiler.codegen import build_module

        return build_module(graph, params, target, config)

    def load(self, artifact):
        from .runtime import load_artifact

        return load_artifact(artifact)
