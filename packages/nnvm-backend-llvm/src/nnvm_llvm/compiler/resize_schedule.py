"""The ``resize`` kernel's schedule: each per-axis pass in rows, rows in parallel.

Why a template of its own: ``resize_interp`` computes one pass per resized axis into an
intermediate block, reading per-axis index/weight tables; the generic injective schedule
inlines every non-output block, which would put the whole coordinate math and the earlier
passes back into every output element. Here the tables (``resize_tab*``, a few hundred
entries) stay serial loops computed once, and every pass (``resize_stage*`` and the output)
is a loop over rows, parallel when it is large enough, its row a plain loop LLVM
vectorises: the last pass along a leading axis blends two whole input rows with two
per-row weights.
"""

from __future__ import annotations

from . import schedules
from .schedules import _extent, _try

#: block-name prefixes kept out of inlining (see ``resize_interp``)
KEPT = ("resize_stage", "resize_tab")


def _rows(sch, block, lanes: int) -> None:
    loops = sch.get_loops(block)
    if len(loops) < 2:
        return
    inner = loops[-1]
    outer = sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0]
    n_in, n_out = _extent(sch, inner), _extent(sch, outer)
    if n_in % lanes == 0 and n_in >= lanes:
        _, vec = sch.split(inner, [None, lanes])
        _try(sch.vectorize, vec)  # a gather TVM cannot vectorise stays a loop
    if n_out > 1 and n_out * n_in >= schedules.PARALLEL_MIN_WORK:
        sch.parallel(outer)


def schedule_resize(sch, func, info) -> bool:
    """Rows of every pass; False (the generic fallback) when the group has no pass."""
    blocks = [b for b in schedules._blocks(sch)
              if not sch.get(b).name_hint.startswith("resize_tab")]
    if not blocks:
        return False
    for b in blocks:
        _rows(sch, b, info.lanes)
    return True


def install() -> None:
    """Register the template under the ``resize`` kind (the lowering rule's kind), and keep
    the passes and tables materialised where an elementwise op fused after the resize
    masters the group (``sigmoid(resize(x))``: the generic schedule of its output)."""
    schedules.TEMPLATES.setdefault("resize", schedule_resize)
    for kind in ("resize", "elemwise", "injective"):
        kept = schedules.KEEP.get(kind, ())
        schedules.KEEP[kind] = kept + tuple(p for p in KEPT if p not in kept)
