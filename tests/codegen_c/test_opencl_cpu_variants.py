"""The OpenCL backend's CPU kernel variants (nnvm_opencl.cpu_templates), rendered through the
shared generator's ``template_variant`` hook: pure text, no pyopencl."""

import pytest

import nnvm
from nnvm import sym
from codegen_dialects import CPU_LIMITS, OpenCLLike, conv_dense_graph
from nnvm_codegen_c import lower_graph

cpu_templates = pytest.importorskip("nnvm_opencl.cpu_templates",
                                    reason="the CPU variants ship with nnvm-backend-opencl")


class OpenCLVec(OpenCLLike):
    vector_types = True

    def template_variant(self, op, limits):
        return cpu_templates.cpu_variant(op, limits)


def test_cpu_variant_is_vectorised_and_barrier_free():
    g = conv_dense_graph()
    kernels = [k for s in lower_graph(g, OpenCLVec(), CPU_LIMITS) for k in s.kernels]
    heavy = [k for k in kernels if "vload" in k.source]
    assert len(heavy) == 2, [k.name for k in kernels]  # the conv and the dense
    for k in heavy:
        assert "barrier" not in k.source and "__local" not in k.source
        assert "float8" in k.source and k.local_size == (1, 1, 1)


def test_cpu_variant_declines_what_it_cannot_block():
    """matmul with transpose_a has no CPU variant: the portable template renders it."""
    a, b = sym.Variable("a"), sym.Variable("b")
    g, _ = nnvm.compiler.optimize(sym.matmul(a, b, transpose_a=True),
                                  shape={"a": (8, 4), "b": (8, 6)})
    (step,) = lower_graph(g, OpenCLVec(), CPU_LIMITS)
    assert "barrier" in step.kernels[0].source and "vload" not in step.kernels[0].source
