"""NNVM LLVM backend: CPU code generation through Apache TVM.

``nnvm_llvm.compiler`` lowers fused groups through TVM (needs apache-tvm);
``nnvm_llvm.runtime`` runs exported libraries with apache-tvm-ffi alone.
"""

__version__ = "0.4.0"
