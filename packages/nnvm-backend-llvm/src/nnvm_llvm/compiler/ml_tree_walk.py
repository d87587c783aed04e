"""How a compiled tree ensemble (``ml_trees``) walks its trees for one row.

``CodeWalk`` emits every tree as code (an ``if`` per interior node on an immediate
threshold, the leaf's weights added in the branch): the fastest walk, for ensembles LLVM
compiles in seconds. ``ml_tree_table.TableWalk`` reads the node table from a constant
instead, for the larger ones. Both fill per-target accumulators ``acc`` (float64) and
``seen`` flags (int32), aggregated as ``nnvm.ops.ml._tree_raw`` does.
"""

from __future__ import annotations

import numpy as np
from tvm import te, tirx
from tvm.tirx.script.builder import ir as T

from nnvm.ops.ml import _prepared

from . import ml_rows
from .ml_rows import F64, c64

#: comparisons by ``nodes_modes`` code (6, BRANCH_MEMBER, stays on the host); NEQ holds
#: for NaN as in NumPy and C++ (TVM emits an ordered compare, false for NaN)
_COMPARE = (lambda v, s: v <= s, lambda v, s: v < s, lambda v, s: v >= s,
            lambda v, s: v > s, lambda v, s: v == s,
            lambda v, s: tirx.Or(v != s, te.isnan(v)))


class Walk:
    """What every walk shares: the ensemble's arrays, the compare dtype, the targets that
    need no scored flag, and the aggregated score of a target after the walk. Subclasses
    add ``trees(row, acc, seen)``, which adds every tree's leaf weights for one row."""

    def __init__(self, attrs, n_targets: int, x_buf, single: bool):
        self.prep = _prepared(attrs, n_targets)
        self.agg = attrs["aggregate_function"]
        self.x, self.single = x_buf, single
        self.cmp = "float32" if single else F64
        p = self.prep
        reached = np.concatenate([p["tid"][p["tleaf"]], p["fid"][p["fleaf"]],
                                  p["roots"][p["root_leaf"]]]).astype(np.int64)
        #: targets every reachable leaf weights: always scored, no flag to keep (skl's
        #: forests), which also keeps the code LLVM compiles smaller
        self.always = p["has"][reached].all(axis=0) if len(p["roots"]) else \
            np.zeros(n_targets, bool)

    def value(self, row, f):
        return ml_rows.x_at(self.x, row, f, self.cmp)

    def final(self, acc, seen, t):
        """The aggregated score of target ``t`` (0 where no tree gave it a weight)."""
        v = acc[t]
        if self.agg == "AVERAGE":
            v = v / c64(max(len(self.prep["roots"]), 1))
        return v if self.always[t] else tirx.Select(seen[t] != 0, v, c64(0))

    def scored(self, seen, t):
        """Whether some tree gave target ``t`` a weight in this row."""
        return tirx.const(True, "bool") if self.always[t] else seen[t] != 0


class CodeWalk(Walk):
    """Every tree as nested ``if``s adding into ``acc``/``seen``."""

    def node(self, k: int, row, acc, seen) -> None:
        p = self.prep
        v = self.value(row, int(p["feat"][k]))
        split = p["split32"][k] if self.single else p["split64"][k]
        cond = _COMPARE[int(p["mode"][k])](v, tirx.const(float(split), self.cmp))
        if p["miss"][k]:
            cond = tirx.Or(cond, te.isnan(v))
        with T.If(cond):
            with T.Then():
                self.child(int(p["tid"][k]), bool(p["tleaf"][k]), row, acc, seen)
            with T.Else():
                self.child(int(p["fid"][k]), bool(p["fleaf"][k]), row, acc, seen)

    def child(self, k: int, leaf: bool, row, acc, seen) -> None:
        if leaf:
            self.leaf(k, acc, seen)
        else:
            self.node(k, row, acc, seen)

    def leaf(self, k: int, acc, seen) -> None:
        weight, has = self.prep["weight"], self.prep["has"]
        stored = False
        for t in np.nonzero(has[k])[0].tolist():
            w = c64(weight[k, t])
            now = acc[t]
            new = {"MIN": tirx.min(now, w), "MAX": tirx.max(now, w)}.get(self.agg, now + w)
            T.buffer_store(acc, new, [t])
            if not self.always[t]:
                T.buffer_store(seen, tirx.const(1, "int32"), [t])
            stored = True
        if not stored:
            T.evaluate(0)  # an empty branch still needs a statement

    def trees(self, row, acc, seen) -> None:
        for root, is_leaf in zip(self.prep["roots"].tolist(), self.prep["root_leaf"]):
            self.child(int(root), bool(is_leaf), row, acc, seen)
