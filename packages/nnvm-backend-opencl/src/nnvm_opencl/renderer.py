"""OpenCL C dialect of the shared C-like renderer (attributes only; no pyopencl needed)."""

from __future__ import annotations

from nnvm_codegen_c.renderer import CLikeRenderer

from .cpu_templates import cpu_variant
from .fast_math import FAST_FLOAT32, FAST_MATH_PREAMBLE


#: element types with an unaligned vector typedef in ``VLOAD_PREAMBLE``
FAST_VLOAD_TYPES = ("float", "double", "int")

#: ``NNVM_VLOAD(T, n, p)``: ``n`` consecutive ``T`` at global pointer ``p``, unaligned.
#: Why not ``vloadN``: PoCL's builtin library keeps ``vload16``/``vstore16`` (and other wide
#: builtins) as out-of-line calls, so a GEMM inner loop paid a call and a spill of every
#: accumulator per load (11-25 GFLOP/s). Under clang a dereference of an ``aligned(elem)``
#: vector typedef is one inlined unaligned vector load (``vmovups``); other compilers keep
#: ``vloadN``.
VLOAD_PREAMBLE = "".join(
    ["#if defined(__clang__)\n"]
    + [f"typedef {t} nnvm_{t}{n}_u __attribute__((ext_vector_type({n}), aligned(sizeof({t}))));\n"
       for t in ("float", "int") for n in (2, 4, 8, 16)]
    + ["#ifdef cl_khr_fp64\n"]
    + [f"typedef double nnvm_double{n}_u __attribute__((ext_vector_type({n}), "
       f"aligned(sizeof(double))));\n" for n in (2, 4, 8, 16)]
    + ["#endif\n",
       "#define NNVM_VLOAD(T, n, p) (*(const __global nnvm_##T##n##_u*)(p))\n",
       "#else\n#define NNVM_VLOAD(T, n, p) vload##n(0, (p))\n#endif\n"])


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
    math_names = {"clampi": "nnvm_clampi", "fabs": "fabs"}
    preamble = ("#ifdef cl_khr_fp64\n#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n#endif\n"
                + VLOAD_PREAMBLE + FAST_MATH_PREAMBLE)
    vector_types = True

    def template_variant(self, op: str, limits: dict):
        """The register-blocked CPU kernels of ``cpu_templates`` on a CPU device."""
        return cpu_variant(op, limits)

    def func(self, name: str, dtype: str | None = None) -> str:
        if dtype == "float32" and name in FAST_FLOAT32:
            return f"nnvm_{name}"
        return super().func(name, dtype)

    def vload(self, n: int, ptr: str, dtype: str = "float32") -> str:
        ctype = self.ctype(dtype)
        if ctype in FAST_VLOAD_TYPES:
            return f"NNVM_VLOAD({ctype}, {n}, {ptr})"
        return f"vload{n}(0, {ptr})"

    def kernel_attrs(self, local_size):
        if local_size is None:
            return ""
        x, y, z = (tuple(local_size) + (1, 1, 1))[:3]
        return f"__attribute__((reqd_work_group_size({x}, {y}, {z})))"
