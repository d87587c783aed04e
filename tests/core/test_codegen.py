"""The C-like kernel renderer renders every kernel as pure text (no device, no pyopencl),
and a dialect differs only in attributes (the CUDA backend's contract)."""

import re

import numpy as np

import nnvm
from nnvm import sym
from nnvm.codegen import (EXPR_RULES, TEMPLATES, VALUE_RULES, CLikeRenderer, lower_graph)
from nnvm.testing.models import MODELS


class CudaLike(CLikeRenderer):
    """A CUDA-flavoured dialect written from attributes only."""

    dialect = "cuda"
    kernel_prefix = 'extern "C" __global__'
    buffer_prefix = ""
    smem_prefix = "__shared__ "
    barrier = "__syncthreads();"
    restrict = "__restrict__"
    global_id = "(blockIdx.{d}*blockDim.{d}+threadIdx.{d})"
    local_id = "threadIdx.{d}"
    group_id = "blockIdx.{d}"
    dim_names = ("x", "y", "z")
    type_map = {**CLikeRenderer.type_map, "int64": "long long", "uint8": "unsigned char",
                "bool": "unsigned char"}
    math_names = {"clampi": "nnvm_clampi"}


class OpenCLLike(CLikeRenderer):
    dialect = "opencl"
    kernel_prefix = "__kernel"
    buffer_prefix = "__global "
    smem_prefix = "__local "
    barrier = "barrier(CLK_LOCAL_MEM_FENCE);"
    global_id = "get_global_id({d})"
    local_id = "get_local_id({d})"
    group_id = "get_group_id({d})"


def _optimized(name):
    net, params, shapes = MODELS[name]()
    return nnvm.compiler.optimize(net, shape=shapes, params=params, opt_level=3)[0]


def test_every_model_renders_without_a_device():
    for name in MODELS:
        g = _optimized(name)
        steps = lower_graph(g, CudaLike())
        assert all(s.kind == "kernel" for s in steps), name
        src = CudaLike().render_program([k for s in steps for k in s.kernels])
        assert src.count('extern "C" __global__') == sum(len(s.kernels) for s in steps)
        assert "get_global_id" not in src and "__local" not in src


def test_dialects_differ_only_in_spelling():
    g = _optimized("mlp")
    cl = OpenCLLike().render_program([k for s in lower_graph(g, OpenCLLike()) for k in s.kernels])
    cu = CudaLike().render_program([k for s in lower_graph(g, CudaLike()) for k in s.kernels])
    assert "barrier(CLK_LOCAL_MEM_FENCE);" in cl and "__syncthreads();" in cu
    assert "__local float As" in cl and "__shared__ float As" in cu
    canon = re.compile(r"get_(global|local|group)_id\(\d\)|__kernel|__global |__local |"
                       r"barrier\(CLK_LOCAL_MEM_FENCE\);|restrict")
    canon_cu = re.compile(r"\(blockIdx\.\w\*blockDim\.\w\+threadIdx\.\w\)|threadIdx\.\w|"
                          r"blockIdx\.\w|extern \"C\" __global__|__shared__ |__syncthreads\(\);"
                          r"|__restrict__")
    assert len(canon.sub("#", cl).splitlines()) == len(canon_cu.sub("#", cu).splitlines())


def test_fused_group_is_one_kernel_with_epilogue():
    x = sym.Variable("x")
    y = sym.relu(sym.dense(x, units=8, name="fc") * 2.0 + 1.0)
    rng = np.random.default_rng(0)
    g, _ = nnvm.compiler.optimize(y, shape={"x": (4, 16)}, params={
        "fc_weight": rng.standard_normal((8, 16)).astype("float32"),
        "fc_bias": rng.standard_normal(8).astype("float32")}, opt_level=2)
    steps = lower_graph(g, OpenCLLike())
    assert len(steps) == 1 and len(steps[0].kernels) == 1
    src = steps[0].kernels[0].source
    assert "As[" in src and "> 0.0f" in src and "2.0f" in src


def test_missing_rule_becomes_host_step_with_reason():
    x = sym.Variable("x")
    g, _ = nnvm.compiler.optimize(sym.exp(sym.topk(x, k=2)[0]), shape={"x": (2, 4)})
    steps = lower_graph(g, OpenCLLike())
    host = [s for s in steps if s.kind == "host"]
    assert len(host) == 1 and "topk" in host[0].reason


def test_rule_tables_are_data():
    assert set(EXPR_RULES) <= set(VALUE_RULES)
    assert {"dense", "matmul", "conv2d", "softmax", "sum", "max_pool2d"} <= set(TEMPLATES)
    r = OpenCLLike()
    assert EXPR_RULES["relu"](r, ["a"], {}, "float32") == "(a > 0.0f ? a : 0.0f)"
    assert r.const(float("-inf"), "float32") == "(-INFINITY)"
    assert r.const(1.5, "float64") == "((double)1.5)"


CPU_LIMITS = {"device_type": "cpu", "preferred_vector_width_float": 8,
              "max_work_group_size": 4096, "local_mem_size": 1 << 20}


class OpenCLVec(OpenCLLike):
    vector_types = True


def _conv_dense_graph():
    x = sym.Variable("x")
    y = sym.relu(sym.conv2d(x, channels=16, kernel_size=(3, 3), padding=(1, 1), name="c"))
    y = sym.dense(sym.flatten(y), units=10, name="fc")
    rng = np.random.default_rng(0)
    params = {"c_weight": rng.standard_normal((16, 3, 3, 3)).astype("float32"),
              "c_bias": rng.standard_normal(16).astype("float32"),
              "fc_weight": rng.standard_normal((10, 16 * 8 * 8)).astype("float32"),
              "fc_bias": rng.standard_normal(10).astype("float32")}
    return nnvm.compiler.optimize(y, shape={"x": (1, 3, 8, 8)}, params=params,
                                  opt_level=2)[0]


def test_cpu_variant_is_vectorised_and_barrier_free():
    g = _conv_dense_graph()
    kernels = [k for s in lower_graph(g, OpenCLVec(), CPU_LIMITS) for k in s.kernels]
    heavy = [k for k in kernels if "vload" in k.source]
    assert len(heavy) == 2, [k.name for k in kernels]  # the conv and the dense
    for k in heavy:
        assert "barrier" not in k.source and "__local" not in k.source
        assert "float8" in k.source and k.local_size == (1, 1, 1)


def test_cpu_limits_leave_dialects_without_vectors_on_the_portable_kernels():
    g = _conv_dense_graph()
    for r in (CudaLike(), OpenCLLike()):
        src = r.render_program([k for s in lower_graph(g, r, CPU_LIMITS) for k in s.kernels])
        assert "vload" not in src and r.barrier in src


def test_cpu_variant_declines_what_it_cannot_block():
    """matmul with transpose_a has no CPU variant: the portable template renders it."""
    a, b = sym.Variable("a"), sym.Variable("b")
    g, _ = nnvm.compiler.optimize(sym.matmul(a, b, transpose_a=True),
                                  shape={"a": (8, 4), "b": (8, 6)})
    (step,) = lower_graph(g, OpenCLVec(), CPU_LIMITS)
    assert "barrier" in step.kernels[0].source and "vload" not in step.kernels[0].source
