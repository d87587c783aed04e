"""Compiler part of the LLVM backend (imports apache-tvm).

``lowering`` holds the compute rule of every supported op (TOPI where it exists, TE
otherwise); ``groups`` cuts the graph into kernels (FuseOps groups, or one op each);
``schedules`` turns a group's TIR into tiled, vectorised, parallel loops; ``cache`` keeps
scheduled kernels and linked libraries by structural key; ``codegen`` ties them together
into one library and an executor plan.
"""
