"""Shared by llvm test modules: skip the whole module, with the reason, where the llvm
backend or its C compiler is missing (the tiered-tests rule: a backend test runs where its
device is usable and says why not otherwise)."""

from __future__ import annotations

import pytest


def skip_without_llvm() -> None:
    """Call at module level: skips the module unless llvm can compile here."""
    from nnvm.backend import get_backend

    try:
        reason = get_backend("llvm", require_available=False).compiler_available()
    except Exception as exc:  # noqa: BLE001 - not installed, or broken: skip with why
        reason = f"llvm backend not installed ({exc})"
    if reason is not None:
        pytest.skip(reason, allow_module_level=True)


def has_avx2() -> bool:
    """Whether this x86 CPU can run AVX2+FMA code (``-mcpu=haswell`` builds): tests of the
    8-lane kernel paths run those builds on AVX-512 machines too."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split() for line in f if line.startswith("flags")), [])
    except OSError:
        return False
    return "avx2" in flags and "fma" in flags


def run_weighted(y, x, params: dict, threads: int):
    """``(lib, output)``: ``y`` built for llvm at opt level 3 with ``params`` bound (the
    weights), run on input ``x`` with ``threads`` threads."""
    import numpy as np

    import nnvm

    shape = {"x": x.shape, **{k: v.shape for k, v in params.items()}}
    lib = nnvm.compiler.build(y, target="llvm", shape=shape, params=params, opt_level=3)
    lib.set_num_threads(threads)
    got = lib.run(x=x)
    return lib, np.asarray(got[0] if isinstance(got, (list, tuple)) else got)


def build_onnx(model, feed: dict, **build_kw):
    """``model`` imported with ``nnvm.frontend.from_onnx`` at the shapes of ``feed`` (its
    initializers as params) and built for llvm; ``build_kw`` goes to ``nnvm.compiler.build``
    (``opt_level``...). The one-node tests' shared first half."""
    import nnvm

    shapes = {k: v.shape for k, v in feed.items()}
    graph, params = nnvm.frontend.from_onnx(model, shape=shapes)
    return nnvm.compiler.build(graph, target="llvm", shape=shapes, params=params, **build_kw)


def ort_outputs(model, feed: dict) -> list:
    """onnxruntime's outputs of ``model`` on ``feed`` (the oracle; skips without it)."""
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feed)
