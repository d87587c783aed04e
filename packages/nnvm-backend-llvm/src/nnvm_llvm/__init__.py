"""NNVM LLVM backend: CPU code generation through Apache TVM."""

__version__ = "0.1.0"
