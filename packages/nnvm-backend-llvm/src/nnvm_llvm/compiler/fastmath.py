"""Vectorisable float32 ``exp`` and ``erf`` for the kernels this backend compiles.

TVM lowers ``exp`` to ``llvm.exp`` and ``erf`` to a call of libm's ``erff``; without a
vector math library LLVM turns a 16-lane ``exp`` into 16 scalar ``expf`` calls, so softmax,
sigmoid, SiLU and erf-GELU ran at 20-40 ns an element (7 ms for one BERT softmax). Here both
become straight-line polynomials that LLVM vectorises like any arithmetic (what MLAS does
with its own ``MlasComputeExp``/``Erf`` kernels):

* ``exp``: Cody-Waite range reduction ``x = n ln2 + r`` and a degree-6 polynomial for
  ``e^r`` (``EXP_Q``; Cephes ``expf`` has degree 7), ``2^n`` built in the exponent bits; relative
  error about 2 ulp over the range [-86.6, 88.38]; above it +inf, below it 0, NaN kept;
* ``exp_nonpositive``: softmax's ``e^(x - max)``, the same reduction and polynomial without
  the overflow side and the selects (called by the softmax rule directly, not installed);
* ``erf``: Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7) with the ``exp`` above,
  and its Taylor series for ``|x| < 0.5`` (relative error below 1e-7 there);
* ``rsqrt`` (``1 / sqrt(x)``, which TVM legalizes as a square root and a division, both
  long-latency, low-throughput instructions): on x86 the CPU's estimate (``vrsqrt14ps``,
  14 bits, AVX-512; ``vrsqrtps``, 12 bits, AVX/SSE) and one Newton step, about 2 ulp; other
  targets and lane counts keep ``1 / sqrt(x)``.

The rules are installed as TVM's ``llvm.FLowerIntrinsic`` of ``tirx.exp``/``tirx.erf`` but act
only inside ``enabled()`` (the backend's own ``tvm.compile``); anywhere else in the process
they defer to TVM's original lowering, so other TVM users see no change.
"""

from __future__ import annotations

import contextlib
import threading

import tvm
from tvm import tirx

_state = threading.local()
_KEY = "llvm.FLowerIntrinsic"
_ORIGINAL: dict[str, object] = {}


def _lanes(dtype: str) -> int:
    return int(dtype.split("x")[1]) if "x" in dtype else 1


def _const(v, dtype: str, scalar: str = "float32"):
    c = tirx.const(v, scalar)
    return tirx.Broadcast(c, _lanes(dtype)) if _lanes(dtype) > 1 else c


def _consts(dtype: str):
    """A maker of float32 constants broadcast to ``dtype``'s lanes."""
    return lambda v: _const(v, dtype)


def _int_type(dtype: str) -> str:
    """The int32 type with ``dtype``'s lanes (for the exponent-field arithmetic)."""
    lanes = _lanes(dtype)
    return f"int32x{lanes}" if lanes > 1 else "int32"


def _reduce(xv, nv, _c):
    """Cody-Waite: ``x - n ln 2`` in two steps (ln 2's leading bits exact in float32)."""
    return xv - nv * _c(0.693359375) + nv * _c(2.12194440e-4)


#: ``q`` of ``e^r = 1 + r + r^2 q(r)`` on ``|r| <= ln 2 / 2``, highest power first: a
#: degree-4 fit at Chebyshev nodes (relative error 3.8e-9 in exact arithmetic, 6.5e-8 in
#: float32, as Cephes ``expf``'s degree-5 ``q``, one FMA longer, gives there)
EXP_Q = (1.37514e-3, 8.36892e-3, 4.166953e-2, 1.6666518e-1, 4.9999988e-1)


def _exp_reduced(rv, _c, q=EXP_Q):
    """``e^r`` for ``|r| <= ln 2 / 2`` as ``1 + r + r^2 q(r)``, its ``r^2`` computed beside
    the Horner chain of ``q`` rather than after it."""
    p = _c(q[0])
    for coef in q[1:]:
        p = p * rv + _c(coef)
    return p * (rv * rv) + rv + _c(1.0)


def fast_exp(x, dtype: str = "float32"):
    """``e^x`` for a float32 (or float32xN) expression, as arithmetic only."""
    _c, itype = _consts(dtype), _int_type(dtype)
    x0, xv, nv, rv = (tirx.Var(f"fexp_{v}", dtype) for v in ("x0", "x", "n", "r"))
    hi, lo = _c(88.3762626647949), _c(-86.6)
    clamped = tirx.max(tirx.min(x0, hi), lo)
    n = tirx.floor(xv * _c(1.44269504088896341) + _c(0.5))
    r = _reduce(xv, nv, _c)
    p = _exp_reduced(rv, _c)
    # 2^n as 2 * 2^(n-1): n reaches 128 at the top of the range
    two_n = tirx.reinterpret(dtype, (nv.astype(itype) + _const(126, dtype, "int32"))
                             << _const(23, dtype, "int32")) * _c(2.0)
    # IEEE special values as libm gives them (the clamp alone turned NaN and +inf into
    # 2.4e38): above the range +inf, below it 0 (true value < 1.2e-38), NaN stays NaN
    body = tirx.Select(x0 > hi, _c(float("inf")), tirx.Select(
        x0 < lo, _c(0.0), tirx.Select(tirx.isnan(x0), x0, p * two_n)))
    return tirx.Let(x0, x, tirx.Let(xv, clamped, tirx.Let(nv, n, tirx.Let(rv, r, body))))


def exp_nonpositive(x, dtype: str = "float32"):
    """``e^x`` for ``x <= 0`` or NaN (softmax's ``x - max(x)``), cheaper than :func:`fast_exp`.

    Why a second exp: in softmax the exponentials are most of the work, and :func:`fast_exp`
    spends about a third of its ~22 vector operations on its contract for any input (the
    overflow side, +-inf, NaN: two clamps, three compares and selects, floor, a float to int
    conversion). Here the input has no overflow side: one clamp at -88 (NaN passes it, as
    ``max(lo, x)`` keeps ``x`` on a failed compare; -inf becomes -88), ``n = round(x /
    ln 2)`` by adding ``1.5 * 2^23 + 127`` (the float's low mantissa bits then hold ``n +
    127``), and ``2^n`` those bits shifted into the exponent field: no floor, no conversion,
    no selects. Below -87.68 ``n + 127`` is 0, so ``2^n`` and the result are exactly 0 (the
    true value is under 8.5e-39, a subnormal; ``fast_exp`` gives 0 from -86.6). Same
    Cody-Waite reduction and polynomial as :func:`fast_exp`: about 2 ulp."""
    _c, itype = _consts(dtype), _int_type(dtype)
    xv, tv, nv, rv = (tirx.Var(f"fexpn_{v}", dtype) for v in ("x", "t", "n", "r"))
    magic = _c(12582912.0 + 127.0)  # 1.5 * 2^23: adding it rounds to an integer
    clamped = tirx.max(_c(-88.0), x)
    t = xv * _c(1.44269504088896341) + magic
    n = tv - magic
    r = _reduce(xv, nv, _c)
    p = _exp_reduced(rv, _c)
    two_n = tirx.reinterpret(dtype, tirx.reinterpret(itype, tv) << _const(23, dtype, "int32"))
    return tirx.Let(xv, clamped, tirx.Let(tv, t, tirx.Let(nv, n, tirx.Let(
        rv, r, p * two_n))))


def fast_erf(x, dtype: str = "float32"):
    """``erf(x)`` for a float32 (or float32xN) expression (A&S 7.1.26), arithmetic only."""
    def _c(v):
        return _const(v, dtype)
    xv = tirx.Var("ferf_x", dtype)
    tv = tirx.Var("ferf_t", dtype)
    ax = tirx.abs(xv)
    t = _c(1.0) / (_c(1.0) + _c(0.3275911) * ax)
    poly = _c(1.061405429)
    for coef in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        poly = poly * tv + _c(coef)
    y = _c(1.0) - poly * tv * fast_exp(-(xv * xv), dtype)
    far = tirx.Select(xv < _c(0.0), -y, y)
    # near 0 the formula's absolute error is a large relative one: Taylor series to x^13
    x2 = xv * xv
    series = _c(-1.0 / 75600)
    for coef in (1.0 / 9360, -1.0 / 1320, 1.0 / 216, -1.0 / 42, 1.0 / 10, -1.0 / 3, 1.0):
        series = series * x2 + _c(coef)
    near = series * xv * _c(1.1283791670955126)
    body = tirx.Select(ax < _c(0.5), near, far)
    return tirx.Let(xv, x, tirx.Let(tv, t, body))


#: x86 reciprocal square root estimates by float32 lanes: (LLVM intrinsic, CPU feature,
#: whether it takes AVX-512's pass-through vector and mask, bits of its relative error bound)
RSQRT_ESTIMATES = {16: ("llvm.x86.avx512.rsqrt14.ps.512", "avx512f", True, 14),
                   8: ("llvm.x86.avx.rsqrt.ps.256", "avx", False, 11),
                   4: ("llvm.x86.sse.rsqrt.ps", "sse", False, 11)}


def rsqrt_estimated(lanes: int, tgt=None) -> bool:
    """Whether the CPU of ``tgt`` (the current target when None) estimates ``rsqrt`` of
    float32x``lanes`` vectors (:func:`rsqrt_estimate`). Target features only, no probing."""
    entry = RSQRT_ESTIMATES.get(lanes)
    tgt = tgt if tgt is not None else tvm.target.Target.current(allow_none=True)
    if entry is None or tgt is None or str(tgt.kind.name) != "llvm":
        return False
    return bool(tvm.target.codegen.target_has_features(entry[1], tgt))


def rsqrt_estimate(x, dtype: str):
    """``(e, bits)``: the CPU's estimate ``e`` of ``1 / sqrt(x)`` for a float32xN
    expression, relative error below ``2**-bits`` (inf at 0, 0 at inf, NaN below 0), or
    None where the target has none for N lanes. Why: ``vsqrtps`` and ``vdivps`` are
    long-latency, low-throughput instructions; callers refine ``e`` by Newton steps, only
    multiplies and FMAs. Needs an explicit vector: TVM lowers intrinsics before it widens a
    ``vectorized`` loop, so a scalar call never reaches here as a vector."""
    lanes = _lanes(dtype)
    if not dtype.startswith("float32") or not rsqrt_estimated(lanes):
        return None
    name, _, masked, bits = RSQRT_ESTIMATES[lanes]
    extra = (_const(0.0, dtype), tirx.const(-1, "int16")) if masked else ()
    return tirx.call_llvm_pure_intrin(dtype, name, x, *extra), bits


def fast_rsqrt(x, dtype: str = "float32"):
    """``1 / sqrt(x)`` as :func:`rsqrt_estimate` refined by Newton steps, ``e (1.5 - x/2
    e^2)`` (relative error ``d`` becomes ``1.5 d^2``: one step after 14 bits, two after 11),
    or None where the target has no estimate for ``dtype``. Where a step gives NaN (``0 *
    inf`` at ``x = 0`` or ``inf``) the estimate is already exact (inf, 0)."""
    found = rsqrt_estimate(x, dtype)
    if found is None:
        return None
    e, bits = found
    _c = _consts(dtype)
    # repeated subexpressions rather than Lets: the estimate is a pure call that LLVM's CSE
    # computes once, and a Let here was bound twice with different values once TVM's passes
    # copied the loop body that holds it
    y = e
    for _ in range(1 if bits >= 14 else 2):
        y = y * (_c(1.5) - (_c(0.5) * x * y) * y)
    return tirx.Select(tirx.isnan(y), e, y)


def _rule(op_name: str, fast):
    def lower(call):
        dtype = str(getattr(call, "ty", "") or "")
        if getattr(_state, "on", False) and (dtype == "float32" or
                                             dtype.startswith("float32x")):
            try:
                out = fast(call.args[0], dtype)
                if out is not None:
                    return out
            except Exception:  # noqa: BLE001 - any surprise: TVM's own lowering
                pass
        orig = _ORIGINAL.get(op_name)
        return orig(call) if orig is not None else call
    return lower


def install() -> None:
    """Register the scoped rules once per process (idempotent)."""
    if _ORIGINAL:
        return
    for op_name, fast in (("tirx.exp", fast_exp), ("tirx.erf", fast_erf),
                          ("tirx.rsqrt", fast_rsqrt)):
        op = tvm.ir.Op.get(op_name)
        _ORIGINAL[op_name] = op.get_attr(_KEY) or op.get_attr("default.FLowerIntrinsic")
        tvm.ir.register_op_attr(op_name, _KEY, _rule(op_name, fast), level=99)


@contextlib.contextmanager
def enabled():
    """Within this block (this thread), float32 exp/erf compile to the polynomials and
    rsqrt to the refined estimate."""
    install()
    prev = getattr(_state, "on", False)
    _state.on = True
    try:
        yield
    finally:
        _state.on = prev
