"""The C-like kernel renderer renders every kernel as pure text (no device, no pyopencl),
and a dialect differs only in attributes (the CUDA backend's contract)."""

import re

import numpy as np

import nnvm
from nnvm import sym
from codegen_dialects import CPU_LIMITS, CudaLike, OpenCLLike, conv_dense_graph
from nnvm_codegen_c import EXPR_RULES, TEMPLATES, VALUE_RULES, lower_graph
from nnvm.testing.models import MODELS


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


def test_cpu_limits_leave_dialects_without_vectors_on_the_portable_kernels():
    g = conv_dense_graph()
    for r in (CudaLike(), OpenCLLike()):
        src = r.render_program([k for s in lower_graph(g, r, CPU_LIMITS) for k in s.kernels])
        assert "vload" not in src and r.barrier in src


def test_template_variant_hook_runs_first_and_may_decline():
    """A renderer's variant replaces the portable template; one that declines leaves it."""
    seen = []

    def variant(b, nid):
        seen.append(b.attrs(nid).get("units"))
        if b.limits.get("take"):
            b.global_size, b.local_size = (1,), (1,)
            b.emit("/* variant */")
            return True
        return False

    class WithVariant(OpenCLLike):
        def template_variant(self, op, limits):
            return variant if op == "dense" else None

    g = conv_dense_graph()
    dense_src = {}
    for take in (True, False):
        kernels = [k for s in lower_graph(g, WithVariant(), {**CPU_LIMITS, "take": take})
                   for k in s.kernels]
        dense_src[take] = next(k.source for k in kernels if k.name.endswith("_fc"))
    assert seen == [10, 10]
    assert "/* variant */" in dense_src[True] and "barrier(" not in dense_src[True]
    assert "/* variant */" not in dense_src[False] and "barrier(" in dense_src[False]
