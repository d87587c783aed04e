"""CUDA backend behaviour around the GPU: availability, build/export/load without a GPU,
the arena plan, cuBLAS selection, compiler errors; and, where a GPU exists, execution.

Tests marked ``gpu`` run the op conformance cases and the model families on the device
against the reference interpreter; they skip with the reason (no driver / no CuPy / no
device) everywhere else, including this project's CI.
"""

from __future__ import annotations

import os
import zipfile

import numpy as np
import pytest

import nnvm
from nnvm.errors import BackendUnavailableError, NNVMError
from nnvm.interpreter import Interpreter
from nnvm.testing.models import MODELS

from nnvm_cuda import cublas, toolchain
from nnvm_cuda import device as devices
from nnvm_cuda.backend import generate
from nnvm_cuda.module import CUDAModule
from nnvm_cuda.plan import ALIGN, plan_arena
from nnvm_cuda.testing import random_feed

RUN_REASON = devices.runtime_reason()
COMPILE_REASON = toolchain.compiler_reason()
needs_compiler = pytest.mark.skipif(COMPILE_REASON is not None, reason=str(COMPILE_REASON))
gpu = pytest.mark.skipif(RUN_REASON is not None, reason=f"no CUDA execution here: {RUN_REASON}")
no_gpu = pytest.mark.skipif(RUN_REASON is None, reason="a GPU is usable here")


@pytest.fixture(scope="module", autouse=True)
def _cache_dir(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("NNVM_CACHE_DIR", str(tmp_path_factory.mktemp("nnvm-cuda-cache")))
    yield
    mp.undo()


def _build(name="mlp", target="cuda -arch=sm_90", **kw):
    net, params, shapes = MODELS[name](**kw)
    return nnvm.compiler.build(net, target=target, shape=shapes, params=params), params, shapes


# -- availability -----------------------------------------------------------------------------

def test_plugin_line_says_what_works_here():
    info = {p.name: p for p in nnvm.plugins()}["cuda"]
    assert info.provides["targets"] == ["cuda"]
    if COMPILE_REASON is None and RUN_REASON is not None:
        assert info.available
        assert "compile-only" in info.summary and "run needs a GPU" in info.summary
        assert RUN_REASON in info.summary
    elif RUN_REASON is None:
        assert info.available and "compile-only" not in info.summary
    else:
        assert not info.available and "no CUDA C compiler" in info.reason


def test_compile_only_is_never_the_default_target():
    from nnvm.backend import best_target, get_backend

    b = get_backend("cuda", require_available=False)
    if RUN_REASON is not None:
        assert b.priority < 0 and best_target() != "cuda"
    else:
        assert b.priority > 50


# -- build, export, load without executing -----------------------------------------------------

@needs_compiler
@no_gpu
def test_run_without_gpu_raises_naming_what_is_missing():
    lib, _, shapes = _build()
    assert isinstance(lib, CUDAModule) and set(lib.ptx) == {"sm_90"}
    with pytest.raises(BackendUnavailableError) as err:
        lib.run(data=np.zeros(shapes["data"], "float32"))
    msg = str(err.value)
    assert RUN_REASON in msg and "cannot run here" in msg and "sm_90" in msg
    assert any(w in msg for w in ("CUDA driver", "cupy not installed", "no CUDA device"))


@needs_compiler
def test_export_stores_source_ptx_and_plan_and_loads_back(tmp_path):
    lib, params, _ = _build("small_cnn", "cuda -arch=sm_80,sm_90")
    path = str(tmp_path / "cnn.nnvm")
    lib.export(path)
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        cu = z.read("kernels.cu").decode()
    assert {"kernels.cu", "kernels.sm_80.ptx", "kernels.sm_90.ptx", "plan.json"} <= names
    assert cu == lib.source and cu.count("__global__") == lib.stats()["num_kernels"]
    loaded = nnvm.runtime.load(path)
    assert isinstance(loaded, CUDAModule)
    assert loaded.ptx == lib.ptx and loaded.source == lib.source
    assert loaded.offsets == lib.offsets and loaded.arena_bytes == lib.arena_bytes
    assert [k.name for s in loaded.steps for k in s.kernels] == \
        [k.name for s in lib.steps for k in s.kernels]
    assert [k.global_size for s in loaded.steps for k in s.kernels] == \
        [k.global_size for s in lib.steps for k in s.kernels]
    if RUN_REASON is not None:
        with pytest.raises(BackendUnavailableError, match="cannot run here"):
            loaded.run(data=np.zeros((1, 3, 16, 16), "float32"))


@needs_compiler
def test_target_options_are_validated():
    net, params, shapes = MODELS["mlp"]()
    for target, match in [("cuda -arch=sm_5", "not valid"), ("cuda -arch=gfx90a", "not valid"),
                          ("cuda -cublas=maybe", "unknown mode"),
                          ("cuda -device=-1", "device ordinal"),
                          ("cuda -compiler=clang", "unknown compiler"),
                          ("cuda -blocks=4", "unknown option")]:
        with pytest.raises(NNVMError, match=match):
            nnvm.compiler.build(net, target=target, shape=shapes, params=params)


def test_arch_list_parsing():
    assert toolchain.parse_arches("sm_90,sm_80,sm_90") == ["sm_80", "sm_90"]
    assert toolchain.parse_arches("compute_86") == ["sm_86"]
    assert toolchain.parse_arches(None) == [toolchain.DEFAULT_ARCH]


@needs_compiler
def test_compiler_error_names_the_kernel():
    src = ('extern "C" __global__ void good_k(float* x) { x[0] = 1.0f; }\n'
           'extern "C" __global__ void broken_k(float* x) {\n  x[0] = undefined_name;\n}\n')
    with pytest.raises(toolchain.KernelBuildError, match="broken_k") as err:
        toolchain.compile_ptx(src, ["sm_90"])
    assert "good_k" not in str(err.value).split("compiler log")[0]


@needs_compiler
def test_cache_is_keyed_by_source_and_arch(tmp_path, monkeypatch):
    monkeypatch.setenv("NNVM_CACHE_DIR", str(tmp_path))
    src = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n'
    _, r1 = toolchain.compile_ptx(src, ["sm_90"])
    _, r2 = toolchain.compile_ptx(src, ["sm_90"])
    _, r3 = toolchain.compile_ptx(src + "\n", ["sm_90"])
    assert (r1["compiled"], r2["cache_hits"], r3["compiled"]) == (1, 1, 1)
    cached = sorted(os.listdir(tmp_path / "cuda"))
    assert len(cached) == 2 and all(n.endswith(".sm_90.ptx") for n in cached)
    assert toolchain.cache_key(src, "sm_80", "nvcc") != toolchain.cache_key(src, "sm_90", "nvcc")


# -- plan and launch shapes (pure, no compiler) --------------------------------------------------

@pytest.mark.parametrize("model", sorted(MODELS))
def test_arena_plan_is_one_aligned_allocation_without_conflicts(model):
    net, params, shapes = MODELS[model]()
    g, params = nnvm.compiler.optimize(net, shape=shapes, params=params)
    steps, _, info = generate(g)
    offsets, arena, act = plan_arena(info, steps)
    from nnvm.runtime.memory import entry_bytes

    def span(e):
        return offsets[e], offsets[e] + entry_bytes(info.shapes[e], info.dtypes[e])

    assert all(o % ALIGN == 0 for o in offsets.values())
    assert all(span(e)[1] <= arena for e in offsets)
    for s in steps:  # a step never writes where it reads
        for o in s.outputs:
            for i in s.inputs:
                a, b = span(o), span(i)
                assert a[1] <= b[0] or b[1] <= a[0] or a[0] == a[1] or b[0] == b[1], \
                    (model, s.root, o, i)
    naive = sum(entry_bytes(info.shapes[e], info.dtypes[e]) for s in steps for e in s.outputs)
    assert act <= naive + ALIGN * len(steps)
    for s in steps:
        for k in s.kernels:
            block = int(np.prod(k.local_size or (1,)))
            assert block <= devices.ARCH_LIMITS["max_work_group_size"]
            grid = [-(-g_ // l) for g_, l in zip(k.global_size, k.local_size or (1, 1, 1))]
            assert all(x <= m for x, m in zip(grid, devices.ARCH_LIMITS["max_grid"]))


def _gemm_graph(m, k, n, epilogue=False):
    import nnvm.symbol as sym

    x = sym.Variable("x")
    y = sym.dense(x, units=n, name="fc")
    if epilogue:
        y = sym.relu(y)
    g, _ = nnvm.compiler.optimize(y, shape={"x": (m, k)})
    return g


def test_cublas_takes_only_large_unfused_gemms():
    g = _gemm_graph(256, 512, 512)
    steps, _, info = generate(g)
    assert list(cublas.select(info, steps, "auto").values()) == [2 * 256 * 512 * 512]
    assert cublas.select(info, steps, "off") == {}
    g2 = _gemm_graph(256, 512, 512, epilogue=True)  # relu fused: the kernel keeps it
    steps2, _, info2 = generate(g2)
    assert cublas.select(info2, steps2, "on") == {}
    small = _gemm_graph(4, 8, 8)
    steps3, _, info3 = generate(small)
    assert cublas.select(info3, steps3, "auto") == {}
    assert len(cublas.select(info3, steps3, "on")) == 1
    with pytest.raises(NNVMError, match="unknown mode"):
        cublas.select(info3, steps3, "sometimes")


# -- execution (GPU only) -----------------------------------------------------------------------

@gpu
@pytest.mark.parametrize("model", sorted(MODELS))
def test_gpu_models_against_the_interpreter(model):
    net, params, shapes = MODELS[model]()
    lib = nnvm.compiler.build(net, target="cuda", shape=shapes, params=params)
    g, p = nnvm.compiler.optimize(net, shape=shapes, params=params)
    feed = random_feed(g, p)
    want = Interpreter(g).run({**p, **feed})
    for _ in range(2):  # the second run reuses uploaded params and pinned buffers
        got = lib.run(**feed)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    assert lib.stats()["code_from"].startswith(("ptx", "nvrtc"))


@gpu
def test_gpu_artifact_roundtrip_and_cublas(tmp_path):
    g = _gemm_graph(256, 512, 512)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 512)).astype("float32")
    w = rng.standard_normal((512, 512)).astype("float32") / 20
    b = rng.standard_normal((512,)).astype("float32")
    outs = {}
    for mode in ("on", "off"):
        lib = nnvm.compiler.build(g, target=f"cuda -cublas={mode}", shape={"x": x.shape},
                                  params={"fc_weight": w, "fc_bias": b})
        assert lib.stats()["num_cublas_gemms"] == (mode == "on")
        path = str(tmp_path / f"{mode}.nnvm")
        lib.export(path)
        outs[mode] = nnvm.runtime.load(path).run(x=x)[0]
    np.testing.assert_allclose(outs["on"], x @ w.T + b, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(outs["off"], x @ w.T + b, rtol=1e-3, atol=1e-3)
