"""A GEMM with one output column (``x @ w`` with ``w`` of shape ``(K, 1)``, a 1-unit
``Gemm``): every output is a dot product, scheduled as ``lanes`` partial sums along K.

Why: the register-tile templates vectorise along N; with N = 1 the tile is one scalar and
the K loop one chain of dependent multiply-adds (a 128-long dot product took ~0.15 us, four
cycles per element). Split K into vectors and ``rfactor`` the lanes: the partial sums are
one vector accumulator (one vector FMA per ``lanes`` elements), summed once at the end.
"""

from __future__ import annotations


def schedule_dot(sch, anchor, lanes: int) -> bool:
    """Vector partial sums along K for an anchor whose output has one column; False (the
    schedule untouched) when K is not a whole number of at least two vectors."""
    from .schedules import PARALLEL_MIN_WORK, _extent as extent, _try as attempt

    *spatial, k = sch.get_loops(anchor)
    kk = extent(sch, k)
    if kk % lanes or kk < 2 * lanes:
        return False
    _ko, ki = sch.split(k, [None, lanes])
    rf = sch.rfactor(ki, len(spatial))
    sch.set_scope(rf, 0, "local")
    attempt(sch.vectorize, sch.get_loops(rf)[-1])
    rows = 1
    for lp in spatial:
        rows *= extent(sch, lp)
    outer = sch.get_loops(rf)[0]
    if rows * kk >= PARALLEL_MIN_WORK and extent(sch, outer) > 1:
        attempt(sch.parallel, outer)
    return True
