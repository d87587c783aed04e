"""CUDA code generation, verified without a GPU: every kernel compiles to PTX and assembles.

(a) Every kernel of the op conformance cases (tests/core/test_ops_*.py, float32 and float64)
    is batched into one translation unit, compiled once per architecture (sm_80, sm_90) and
    assembled by ``ptxas``; every model family builds through ``nnvm.compiler.build`` for
    ``cuda -arch=sm_80,sm_90`` and each PTX member of its exported artifact assembles.
(b) The kernels come from the same shared renderer as OpenCL's (whose numerics run on PoCL):
    for every fused group both dialects' kernels are identical modulo dialect tokens.

Compiling needs nvcc (or CuPy's NVRTC) and assembling needs ptxas; tests skip with the reason
where they are missing. No test here needs a GPU.
"""

from __future__ import annotations

import concurrent.futures
import os
import sys
import zipfile

import numpy as np
import pytest

import nnvm
from nnvm_codegen_c.lower import lower_graph
from nnvm.testing.models import MODELS

from nnvm_cuda import toolchain
from nnvm_cuda.device import ARCH_LIMITS
from nnvm_cuda.renderer import CUDARenderer
from nnvm_cuda.testing import (batch_program, lowered_cases, model_graph, neutralize,
                               op_cases)

CORE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "core")
ARCHES = ["sm_80", "sm_90"]
NEEDS_COMPILER = pytest.mark.skipif(toolchain.compiler_reason() is not None,
                                    reason=str(toolchain.compiler_reason()))
NEEDS_PTXAS = pytest.mark.skipif(toolchain.ptxas_path() is None,
                                 reason="ptxas not found (install the CUDA toolkit)")

#: ops of the conformance cases that the shared renderer has no rule for (host fallback):
#: backward ops of training graphs and NHWC layouts. A new entry here is a regression.
EXPECTED_HOST = {"_conv2d_backward_data", "_conv2d_backward_weight", "_max_pool2d_backward",
                 "_avg_pool2d_backward", "_split_like", "_strided_slice_backward",
                 "_take_backward", "conv2d", "global_avg_pool2d"}


@pytest.fixture(scope="module", autouse=True)
def _cache_dir(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("NNVM_CACHE_DIR", str(tmp_path_factory.mktemp("nnvm-cuda-cache")))
    yield
    mp.undo()


def _ptxas_all(jobs):
    """ptxas over ``[(label, ptx, arch)]`` in parallel: ``{label: (ok, log)}``."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futs = {label: pool.submit(toolchain.ptxas_check, ptx, arch)
                for label, ptx, arch in jobs}
        return {label: f.result() for label, f in futs.items()}


@pytest.fixture(scope="module")
def cases():
    found = op_cases(CORE)
    if not found:
        pytest.skip(f"no op conformance cases found under {CORE}")
    return found


@pytest.fixture(scope="module")
def conformance(cases):
    r = CUDARenderer()
    lowered = lowered_cases(cases, r, ARCH_LIMITS)
    source, names = batch_program(r, lowered)
    return lowered, source, names


def test_conformance_lowering_covers_the_cases(conformance):
    lowered, _, names = conformance
    host = {}
    for label, g, steps in lowered:
        for s in steps:
            if s.kind == "host":
                host[g.index.nodes[s.root].op.name] = f"{label}: {s.reason}"
    assert len(names) == len(set(names)) > 200
    unexpected = set(host) - EXPECTED_HOST
    assert not unexpected, f"ops newly without a CUDA rule: {host}"
    for label, _, steps in lowered:
        for s in steps:
            for k in s.kernels:
                block = 1
                for d in k.local_size or (1,):
                    block *= d
                assert block <= ARCH_LIMITS["max_work_group_size"], (label, k.name)


@NEEDS_COMPILER
@NEEDS_PTXAS
def test_conformance_kernels_compile_and_assemble(conformance):
    _, source, names = conformance
    ptx, report = toolchain.compile_ptx(source, ARCHES)
    assert report["compiled"] + report["cache_hits"] == len(ARCHES)
    for arch in ARCHES:
        for n in names:
            assert f".entry {n}(" in ptx[arch], f"{n} missing from the {arch} PTX"
    res = _ptxas_all([(a, ptx[a], a) for a in ARCHES])
    for arch, (ok, log) in res.items():
        assert ok, f"ptxas -arch={arch} rejected the conformance kernels:\n{log[:3000]}"


@pytest.fixture(scope="module")
def built_models():
    if toolchain.compiler_reason() is not None:
        pytest.skip(toolchain.compiler_reason())
    out = {}
    for name, fn in MODELS.items():
        net, params, shapes = fn()
        out[name] = nnvm.compiler.build(net, target="cuda -arch=sm_80,sm_90", shape=shapes,
                                        params=params)
    return out


@NEEDS_PTXAS
def test_every_model_family_builds_and_its_ptx_assembles(built_models, tmp_path):
    jobs, totals = [], {}
    for name, lib in built_models.items():
        st = lib.stats()
        assert st["num_fallback_ops"] == 0, (name, st["fallback_ops"])
        assert st["num_kernels"] == st["num_groups"] > 0
        path = tmp_path / f"{name}.nnvm"
        lib.export(str(path))
        with zipfile.ZipFile(path) as z:
            members = {n: z.read(n) for n in z.namelist()}
        assert {"kernels.cu", "plan.json", "kernels.sm_80.ptx", "kernels.sm_90.ptx"} <= \
            set(members)
        for member, data in members.items():
            if member.endswith(".ptx"):
                arch = member.split(".")[1]
                text = data.decode()
                assert text.count(".entry ") == st["num_kernels"], (name, member)
                jobs.append((f"{name}:{member}", text, arch))
        totals[name] = st["num_kernels"]
    res = _ptxas_all(jobs)
    bad = {k: log[:2000] for k, (ok, log) in res.items() if not ok}
    assert not bad, bad
    assert len(res) == 2 * len(MODELS)


def test_default_build_path_uses_the_cache(built_models):
    """Building mlp again hits the on-disk cache for both architectures (no nvcc call)."""
    net, params, shapes = MODELS["mlp"]()
    lib = nnvm.compiler.build(net, target="cuda -arch=sm_80,sm_90", shape=shapes,
                              params=params)
    assert lib.compile_report["cache_hits"] == 2 and lib.compile_report["compiled"] == 0
    assert lib.ptx == built_models["mlp"].ptx


# -- ONNX-style models (tests/frontend_onnx builders), when the ONNX frontend is installed --

def _onnx_models():
    pytest.importorskip("onnx")
    if "onnx" not in {f for p in nnvm.plugins() for f in p.provides.get("frontends", [])}:
        pytest.skip("the ONNX frontend plugin (nnvm-frontend-onnx) is not installed")
    sys.path.insert(0, os.path.join(os.path.dirname(CORE), "frontend_onnx"))
    try:
        import test_models as tm
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"tests/frontend_onnx/test_models.py does not import: {exc!r}")
    finally:
        sys.path.pop(0)
    rng = np.random.default_rng(0)
    return {
        "yolo": (tm.yolo_model(rng), {"images": ((2, 3, 16, 16), "float32")}),
        "ocr": (tm.ocr_model(rng), {"image": ((2, 1, 8, 32), "float32")}),
        "bert": (tm.bert_model(rng), {"input_ids": ((2, 7), "int64"),
                                      "attention_mask": ((2, 7), "int64")}),
        "vad": (tm.vad_model(rng, same_framing=True), {
            "audio": ((1, 96), "float32"), "sr": ((), "int64"), "h0": ((1, 1, 8), "float32"),
            "c0": ((1, 1, 8), "float32")}),
    }


@NEEDS_COMPILER
@NEEDS_PTXAS
def test_onnx_style_models_build_for_sm90_and_assemble():
    jobs, fallback = [], {}
    for name, (model, spec) in _onnx_models().items():
        shape = {k: v[0] for k, v in spec.items()}
        graph, params = nnvm.frontend.from_onnx(model, shape=shape)
        names = graph.index.input_names
        lib = nnvm.compiler.build(graph, target="cuda -arch=sm_90", params=params,
                                  shape={k: v for k, v in shape.items() if k in names},
                                  dtype={k: v[1] for k, v in spec.items() if k in names})
        st = lib.stats()
        assert st["num_kernels"] > 0, name
        assert st["num_fallback_ops"] < st["num_kernels"], (name, st["fallback_ops"])
        fallback[name] = st["fallback_ops"]  # ops without a CUDA rule run on the host
        jobs.append((name, lib.ptx["sm_90"], "sm_90"))
    res = _ptxas_all(jobs)
    assert all(ok for ok, _ in res.values()), {k: v[1][:2000] for k, v in res.items()}


# -- (b) the same body as OpenCL's ----------------------------------------------------------

def _pairs(graph):
    ocl = pytest.importorskip("nnvm_opencl.renderer")
    rc, ro = CUDARenderer(), ocl.OpenCLRenderer()
    sc = lower_graph(graph, rc, ARCH_LIMITS)
    so = lower_graph(graph, ro, ARCH_LIMITS)
    assert [s.members for s in sc] == [s.members for s in so]
    for a, b in zip(sc, so):
        assert a.kind == b.kind
        for ka, kb in zip(a.kernels, b.kernels):
            assert ka.name == kb.name and ka.global_size == kb.global_size
            assert ka.local_size == kb.local_size
            yield ka, kb, rc, ro


@pytest.mark.parametrize("model", sorted(MODELS))
def test_cuda_and_opencl_kernels_share_the_body(model):
    g, _, _ = model_graph(model)
    n = 0
    for ka, kb, rc, ro in _pairs(g):
        assert ka.source != kb.source  # the dialects do differ...
        na, nb = neutralize(ka.source, rc, ka.local_size), neutralize(kb.source, ro,
                                                                      kb.local_size)
        assert na == nb, f"{model}/{ka.name}:\n--- cuda\n{na}\n--- opencl\n{nb}"  # ...only there
        n += 1
    assert n >= 4


def test_conformance_kernels_share_the_body_with_opencl(cases):
    from nnvm_cuda.testing import case_graph

    n = 0
    for case in cases:
        g, _ = case_graph(case)
        for ka, kb, rc, ro in _pairs(g):
            assert neutralize(ka.source, rc, ka.local_size) == \
                neutralize(kb.source, ro, kb.local_size), f"{case.id}/{ka.name}"
            n += 1
    assert n > 100


def test_neutralize_detects_a_body_difference():
    """The comparison is not vacuous: one changed constant makes the bodies differ."""
    g, _, _ = model_graph("mlp")
    ka, kb, rc, ro = next(iter(_pairs(g)))
    changed = kb.source.replace("0.0f", "1.0f", 1)
    assert changed != kb.source
    assert neutralize(ka.source, rc, ka.local_size) != neutralize(changed, ro, kb.local_size)


def test_generated_cuda_uses_cuda_dialect_tokens():
    g, _, _ = model_graph("small_cnn")
    from nnvm_cuda.backend import generate

    steps, source, _ = generate(g)
    assert source.count('extern "C" __global__') == sum(len(s.kernels) for s in steps)
    assert "__shared__" in source and "__syncthreads();" in source  # tiled conv GEMM
    assert "__launch_bounds__(" in source and "get_global_id" not in source
    assert "__kernel" not in source and "__global " not in source
