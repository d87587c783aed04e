"""OpenCL C dialect of the shared C-like renderer (attributes only; no pyopencl needed)."""

from __future__ import annotations

from nnvm.codegen.renderer import CLikeRenderer


class OpenCLRenderer(CLikeRenderer):
    """OpenCL C 1.2: ``__kernel``, ``__global`` pointers, ``__local`` tiles, ``get_*_id``."""

    dialect = "opencl"
    kernel_prefix = "__kernel"
    buffer_prefix = "__global "
    smem_prefix = "__local "
    barrier = "barrier(CLK_LOCAL_MEM_FENCE);"
    global_id = "get_global_id({d})"
    local_id = "get_local_id({d})"
    group_id = "get_group_id({d})"
    math_names = {"clampi": "clamp", "fabs": "fabs"}
    preamble = ("#ifdef cl_khr_fp64\n#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n#endif\n")
    vector_types = True

    def kernel_attrs(self, local_size):
        if local_size is None:
            return ""
        x, y, z = (tuple(local_size) + (1, 1, 1))[:3]
        return f"__attribute__((reqd_work_group_size({x}, {y}, {z})))"
