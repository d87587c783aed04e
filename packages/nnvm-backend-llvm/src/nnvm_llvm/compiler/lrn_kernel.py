"""float32 LRN as one kernel written in TIR: explicit ``lanes``-wide vectors along each
channel plane, and ``x * b ** -beta`` from ``rsqrt`` (beta 0.5 and 0.75).

Why: as a TE compute (``lowering_nn._lrn``) the plane loop of a 27x27 or 55x55 image is
left to LLVM's loop vectoriser (no vector divides the plane), so every math call reaches
code generation as a scalar: ``x / b ** 0.75`` became two ``vsqrtps`` and a ``vdivps`` per
16 outputs, long-latency, low-throughput instructions that bound the kernel on Zen 4 (LRN
1x192x27x27 at 2.2x its memory roof at 1 thread). Here the vectors are explicit, so the
CPU's reciprocal square root estimates (``fastmath.rsqrt_estimate``: ``vrsqrt14ps`` with
AVX-512, ``vrsqrtps`` with AVX/SSE) can be used, refined by Newton steps: only multiplies
and FMAs after them (1x192x27x27: 64 -> 51 us, 1x64x55x55: 88 -> 66 us at 1 thread on Zen 4).
Targets without the estimates keep the TE compute.

Layout: the input seen as ``(outer, C, inner)`` (``inner`` the axes after the channel one);
one loop over the ``outer x C`` planes (parallel when large), each plane as whole vectors
plus a scalar tail. A plane's window of channels is the same for all its pixels, so the
planes whose window lies inside ``[0, C)`` sum their taps unguarded and only the edge planes
test each tap's channel (the test is uniform per plane: a branch, not a per-lane select).
"""

from __future__ import annotations

from tvm import tirx
from tvm.tirx.script.builder import ir as T

from . import fastmath
from .int8_gemm import _prod, flat, tir_body
from .schedules import PARALLEL_MIN_WORK


def _const(v: float, lanes: int):
    c = tirx.const(v, "float32")
    return tirx.Broadcast(c, lanes) if lanes > 1 else c


def _inverse_power(base, beta: float, lanes: int):
    """``base ** -beta`` (beta 0.5 or 0.75) for a float32x``lanes`` vector from the CPU's
    reciprocal square root estimates, pieces bound as statements (``T.bind``).

    0.75: ``p0 = e1 * (e1 * e2)`` with ``e1 ~ b ** -0.5`` and ``e2 ~ e1 ** -0.5`` (error
    below 2.5 estimate errors), then Newton steps on ``b ** 3 p ** 4 = 1``, written ``t =
    (b p) ** 3 p`` so nothing overflows: ``p (1.25 - t / 4)`` squares the error (times 2.5):
    one step after AVX-512's 14-bit estimates, two after AVX's 11 bits. Two estimates and
    eight multiplies or FMAs, where ``x / b ** 0.75`` took two ``vsqrtps`` and a ``vdivps``.
    Where ``p0`` is NaN (``inf * 0`` at ``b = 0`` or ``inf``) ``e1`` is the power (inf,
    0); NaN and negative ``b`` give NaN."""
    dtype = f"float32x{lanes}"
    b = T.bind(base)
    e1, bits = fastmath.rsqrt_estimate(b, dtype)
    if beta == 0.5:
        return tirx.rsqrt(b)  # fastmath's refined estimate
    e1 = T.bind(e1)
    e2, _ = fastmath.rsqrt_estimate(e1, dtype)
    p = T.bind(e1 * (e1 * e2))
    for _ in range(1 if bits >= 14 else 2):
        bp = b * p
        p = T.bind(p * (_const(1.25, lanes) - _const(0.25, lanes) * ((bp * bp) * (bp * p))))
    return tirx.Select(tirx.isnan(p), e1, p)


def _exact_power(base, beta: float):
    """``base ** -beta`` of a plane's scalar tail: ``rsqrt`` of a scalar is legalized as
    ``1 / sqrt`` (exact; the estimates exist for vectors only)."""
    r = tirx.rsqrt(T.bind(base))
    if beta == 0.5:
        return r
    r = T.bind(r)
    p = T.bind(r * (r * tirx.rsqrt(r)))
    return tirx.Select(tirx.isnan(p), r, p)


class _Lrn:
    def __init__(self, x, y, size: int, alpha: float, beta: float, bias: float, ax: int,
                 lanes: int):
        shape = [int(d) for d in x.shape]
        self.outer, self.c, self.inner = _prod(shape[:ax]), shape[ax], _prod(shape[ax + 1:])
        n = _prod(shape)
        self.xf, self.yf = flat(x, n), flat(y, n)
        self.size, self.lo, self.beta, self.lanes = size, (size - 1) // 2, beta, lanes
        self.alpha, self.bias = alpha / size, bias

    def _store(self, start, plane_c, lanes: int, guarded: bool) -> None:
        """The outputs at flat offsets ``start .. start + lanes`` of a plane whose channel is
        ``plane_c``: one ``float32x{lanes}`` vector (explicit, so the intrinsic lowering of
        ``rsqrt`` sees the vector type; a ``T.vectorized`` loop is widened only after it)."""
        def at(offset):
            first = start + offset
            return tirx.Ramp(first, 1, lanes) if lanes > 1 else first

        total = None
        for k in range(self.size):
            d = k - self.lo
            v = self.xf[at(d * self.inner)]
            sq = v * v
            if guarded:
                ch = plane_c + d
                sq = tirx.if_then_else(tirx.And(ch >= 0, ch < self.c), sq, _const(0, lanes))
            total = sq if total is None else total + sq
        b = _const(self.bias, lanes) + _const(self.alpha, lanes) * total
        power = _inverse_power(b, self.beta, lanes) if lanes > 1 else \
            _exact_power(b, self.beta)
        T.buffer_store(self.yf, self.xf[at(0)] * power, [at(0)])

    def _plane(self, base, plane_c, guarded: bool) -> None:
        whole = self.inner - self.inner % self.lanes
        if whole:
            with T.serial(0, whole // self.lanes) as o:
                self._store(base + o * self.lanes, plane_c, self.lanes, guarded)
        if self.inner - whole:
            with T.serial(whole, self.inner) as i:
                self._store(base + i, plane_c, 1, guarded)

    def body(self) -> None:
        planes = self.outer * self.c
        work = planes * self.inner * (self.size + 6)  # loads, FMAs and the roots' steps
        loop = T.parallel if work >= PARALLEL_MIN_WORK and planes > 1 else T.serial
        lo, hi = self.lo, self.size - 1 - self.lo  # channels the window reaches below/above
        with loop(0, planes) as p:
            plane_c = p % self.c
            base = p * self.inner
            with T.If(tirx.And(plane_c >= lo, plane_c + hi < self.c)):
                with T.Then():
                    self._plane(base, plane_c, guarded=False)
                with T.Else():
                    self._plane(base, plane_c, guarded=True)


def lrn_vectorised(x, out_shape, size: int, alpha: float, beta: float, bias: float,
                   ax: int, lanes: int, name: str):
    """The float32 TE tensor of LRN over axis ``ax`` as one extern kernel (see the module
    docstring); ``beta`` must be 0.5 or 0.75."""
    from tvm import te

    body = tir_body(name, lambda i, o: _Lrn(i[0], o[0], size, alpha, beta, bias, ax,
                                            lanes).body())
    return te.extern(tuple(out_shape), [x], body, name=name, dtype="float32")
