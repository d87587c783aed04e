"""LRN's vector kernel (``lrn_kernel``: explicit vectors, ``b ** -beta`` from the CPU's
reciprocal square root estimates and Newton steps) against onnxruntime and a float64
reference.

Why: the estimates are 11-14 bits; only the Newton steps make the result float32-exact, and
the special values (a zero or infinite denominator, NaN) come from a fix-up select, not from
IEEE arithmetic. A step too few, a wrong constant, a tap read from the wrong plane, or a
vector tail that misses pixels shows up here as a wrong number. Shapes have planes of whole
vectors plus a scalar tail (27x27, 5x7), channel counts that are odd or smaller than the
window; inputs from 1e-3 to 1e3, and a bias near 0.
"""

from __future__ import annotations

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import nnvm  # noqa: E402
from test_llvm_rows_lrn import _model  # noqa: E402 - the same one-node LRN model

# id: (input shape, size, alpha, beta, bias, input scale)
CASES = {
    "alexnet_beta075": ((1, 24, 27, 27), 5, 1e-4, 0.75, 1.0, 3.0),
    "odd_channels_size3": ((2, 7, 5, 7), 3, 0.01, 0.75, 2.0, 1.0),
    "beta_half": ((1, 9, 11, 13), 5, 0.1, 0.5, 1.0, 2.0),
    "window_wider_than_channels": ((1, 3, 8, 8), 7, 0.5, 0.75, 0.5, 1.0),
    "large_inputs": ((1, 6, 9, 9), 5, 1e-2, 0.75, 1.0, 1e3),
    "small_inputs_bias_near_0": ((1, 6, 9, 9), 3, 1.0, 0.75, 1e-6, 1e-3),
    "bias_near_0_beta_half": ((1, 5, 4, 10), 5, 2.0, 0.5, 1e-5, 10.0),
    "other_beta_pow": ((1, 8, 6, 6), 5, 1e-3, 0.6, 1.0, 3.0),
}


def _llvm_and_ort(model, x):
    graph, params = nnvm.frontend.from_onnx(model, shape={"x": x.shape})
    lib = nnvm.compiler.build(graph, target="llvm", opt_level=3, shape={"x": x.shape},
                              params=params)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(lib.run(x=x)[0]), sess.run(None, {"x": x})[0]


def _reference(x, size, alpha, beta, bias, axis=1):
    """LRN by its definition in float64."""
    xd = np.moveaxis(x.astype(np.float64), axis, 0)
    c, lo = xd.shape[0], (size - 1) // 2
    sq = np.zeros_like(xd)
    for ch in range(c):
        sq[ch] = (xd[max(0, ch - lo):min(c, ch - lo + size)] ** 2).sum(axis=0)
    return np.moveaxis(xd / (bias + alpha / size * sq) ** beta, 0, axis)


@pytest.mark.parametrize("case", sorted(CASES))
def test_lrn_vector_kernel_matches_onnxruntime(rng, case):
    shape, size, alpha, beta, bias, scale = CASES[case]
    x = (rng.standard_normal(shape) * scale).astype("float32")
    got, want = _llvm_and_ort(_model(shape, size, alpha, beta, bias), x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=0)
    np.testing.assert_allclose(got, _reference(x, size, alpha, beta, bias), rtol=2e-6,
                               atol=0)


def test_lrn_vector_kernel_special_values(rng):
    """In planes of whole vectors: a NaN poisons only its windows; an inf makes its own
    output NaN (inf / inf) and its neighbours' 0 (finite / inf); with bias 0 an all-zero
    window is 0 / 0 = NaN, and a lone tiny value whose square underflows gives x / 0 = inf,
    as onnxruntime's ``x * pow(b, -beta)``."""
    shape = (1, 8, 4, 16)
    x = rng.standard_normal(shape).astype("float32")
    x[0, 1, 0, 3] = np.nan
    x[0, 6, 2, 9] = np.inf
    x[0, :, 3, :] = 0
    x[0, 4, 3, 5] = 1e-30
    got, want = _llvm_and_ort(_model(shape, 3, 1e-2, 0.75, 0.0), x)
    assert np.isnan(got[0, :3, 0, 3]).all() and np.isfinite(got[0, 3:, 0, 3]).all()
    assert np.isnan(got[0, 6, 2, 9]) and (got[0, [5, 7], 2, 9] == 0).all()
    assert np.isinf(got[0, 4, 3, 5]) and got[0, 4, 3, 5] > 0
    assert np.isnan(got[0, 0, 3, 0])  # 0 / 0
    ok = np.ones(shape, bool)
    ok[0, :, 0, 3] = ok[0, :, 2, 9] = False  # onnxruntime's running sum smears these
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-5, atol=0)


def _host_has(*features) -> bool:
    from nnvm.backend import parse_target
    from nnvm_llvm.compiler.target import tvm_target

    host = tvm_target(parse_target("llvm"))
    return all(bool(tvm.target.codegen.target_has_features(f, host)) for f in features)


# the kernel at each x86 vector width: (lanes, -mcpu, host features it needs, instruction)
WIDTHS = {
    "avx512": (16, "skylake-avx512", ("avx512f",), "vrsqrt14ps"),
    "avx2": (8, "haswell", ("avx2", "fma"), "vrsqrtps"),
    "sse": (4, "nehalem", ("sse4.2",), "rsqrtps"),
}


@pytest.mark.parametrize("width", sorted(WIDTHS))
@pytest.mark.parametrize("beta", [0.75, 0.5])
def test_lrn_vector_kernel_each_x86_width(rng, width, beta):
    """The kernel built for AVX-512 (one Newton step after 14 bits), AVX2 and SSE (two
    steps after 11 bits) on a host that runs that code: it uses the estimate instruction
    and matches the float64 definition. The AVX2 and SSE paths are what AVX2-only machines
    compile; here they are forced by ``-mcpu``."""
    from tvm import te

    from nnvm_llvm.compiler import fastmath
    from nnvm_llvm.compiler.lrn_kernel import lrn_vectorised

    lanes, mcpu, needs, instruction = WIDTHS[width]
    if not _host_has(*needs):
        pytest.skip(f"the host CPU lacks {needs}: cannot run {width} code")
    tgt = tvm.target.Target({"kind": "llvm", "mcpu": mcpu})
    shape, size, alpha, bias = (1, 5, 7, 9), 5, 0.3, 1e-3
    with tgt:
        assert fastmath.rsqrt_estimated(lanes)
        x = te.placeholder(shape, "float32", name="x")
        y = lrn_vectorised(x, shape, size, alpha, beta, bias, 1, lanes, "lrn")
        func = te.create_prim_func([x, y]).with_attr("global_symbol", "lrn")
        with fastmath.enabled():
            lib = tvm.compile(tvm.IRModule({"lrn": func}), target=tgt)
    mod = lib.mod if hasattr(lib, "mod") else lib
    assert instruction in mod.inspect_source("asm")
    xv = (rng.standard_normal(shape) * 4).astype("float32")
    out = tvm.runtime.tensor(np.zeros(shape, "float32"))
    lib["lrn"](tvm.runtime.tensor(xv), out)
    np.testing.assert_allclose(out.numpy(), _reference(xv, size, alpha, beta, bias),
                               rtol=2e-6, atol=0)
