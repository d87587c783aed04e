"""Runtime part of the LLVM backend: needs only NumPy, nnvm-core and apache-tvm-ffi.

Nothing here imports ``tvm``: an exported ``.nnvm`` file runs on a machine that has the
13 MB ``apache-tvm-ffi`` wheel and not the 300 MB compiler. ``run`` calls the kernels from
the C executor (``c_executor``), compiled once per machine with the system C compiler and
cached; without a compiler and nothing cached it calls them from a Python loop instead.
"""

from .executor import LLVMModule, load_artifact

__all__ = ["LLVMModule", "load_artifact"]
