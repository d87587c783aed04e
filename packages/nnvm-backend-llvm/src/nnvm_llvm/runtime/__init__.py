"""Runtime part of the LLVM backend: needs only NumPy, nnvm-core and apache-tvm-ffi.

Nothing here imports ``tvm``: an exported ``.nnvm`` file runs on a machine that has the
13 MB ``apache-tvm-ffi`` wheel and not the 300 MB compiler.
"""

from .executor import LLVMModule, load_artifact

__all__ = ["LLVMModule", "load_artifact"]
