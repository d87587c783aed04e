"""A tree ensemble walked over a constant node table: ensembles too large to compile as code.

Why: ``CodeWalk`` (an ``if`` per node) is the fastest walk, but LLVM's build time grows
faster than the code (40 s at 13,000 nodes), and scikit-learn's default forests (100 trees
of unlimited depth) hold tens of thousands of nodes. Here the ensemble is ``ml._unified``'s
node table (leaves as nodes looping to themselves, so every walk is a fixed ``depth`` steps
with no branch on leafness), baked into the kernel as a constant (``ml_const``): one record
per node (feature, both children, compare mode and missing-value flag, threshold) and one
per (leaf, target) (weight, has-a-score flag). The code is the same whatever the size.
"""

from __future__ import annotations

import numpy as np
from tvm import te, tirx
from tvm.tirx.script.builder import ir as T

from nnvm.ops.ml import _unified

from . import ml_const
from .ml_rows import F64
from .ml_tree_walk import _COMPARE, Walk


#: trees walked side by side (independent load chains for the out-of-order core)
LANES = 16


def _bits(n: int) -> int:
    return max(int(n).bit_length(), 1)


def _tree_depths(u) -> np.ndarray:
    """Interior levels of each tree (0 for a tree that is one leaf)."""
    n, depths = u["n"], []
    for start in u["start"].tolist():
        level, depth = np.asarray([start]) if start < n else np.zeros(0, np.int64), 0
        while level.size:
            depth += 1
            nxt = np.concatenate([u["tid"][level], u["fid"][level]])
            level = np.unique(nxt[nxt < n])
        depths.append(depth)
    return np.asarray(depths, np.int64)


class TableWalk(Walk):
    """Each tree as table steps from its start node (as many as the deepest tree of its
    group of ``LANES``), then its leaf's weights."""

    def __init__(self, attrs, n_targets: int, x_buf, single: bool):
        super().__init__(attrs, n_targets, x_buf, single)
        u = _unified(self.prep)
        self.u, self.n_targets = u, n_targets
        total = len(u["feat"])
        n = u["n"]
        mode = np.concatenate([self.prep["mode"], np.zeros(total - n, np.int64)])
        miss = u["miss"] if u["miss"] is not None else np.zeros(total, bool)
        self.modes = sorted(set(mode[:n].tolist())) or [0]
        self.has_miss = bool(miss.any())
        split = u["split32"] if single else u["split64"]
        self.nodes = ml_const.Table({
            "feat": (u["feat"], _bits(u["feat"].max(initial=0))),
            "tid": (u["tid"], _bits(total)), "fid": (u["fid"], _bits(total)),
            "flags": (mode + 8 * miss.astype(np.int64), 4),
            "split": ml_const.float_bits(split, self.cmp)})
        self.starts = ml_const.Table({"start": (u["start"], _bits(total))})
        depth = _tree_depths(u)
        lanes = min(LANES, len(depth))
        self.lanes = lanes
        groups = -(-len(depth) // lanes)  # each group walks its deepest tree's levels
        pad = np.concatenate([depth, np.zeros(groups * lanes - len(depth), np.int64)])
        group_depth = pad.reshape(groups, lanes).max(axis=1)
        self.groups = ml_const.Table({"depth": (group_depth, _bits(group_depth.max()))})
        weight, has = self.prep["weight"], self.prep["has"]
        self.leaves = ml_const.Table({
            "weight": ml_const.float_bits(np.where(has, weight, 0.0).reshape(-1), F64),
            "has": (has.reshape(-1).astype(np.int64), 1)})

    def trees(self, row, acc, seen) -> None:
        """Trees in groups of ``LANES`` walked step by step together: each walk is a chain
        of dependent loads, and independent chains side by side hide their latency."""
        for table in (self.nodes, self.starts, self.leaves, self.groups):
            table.declare()
        n_trees, lanes = len(self.u["start"]), self.lanes
        node = T.alloc_buffer((lanes,), "int32", scope="local")
        with T.serial(0, -(-n_trees // lanes)) as group:
            def tree(g):
                return tirx.min(group * lanes + g, n_trees - 1)
            with T.unroll(0, lanes) as g:
                T.buffer_store(node, self.starts.field(tree(g), "start").astype("int32"), [g])
            with T.serial(0, self.groups.field(group, "depth").astype("int32")):
                with T.unroll(0, lanes) as g:
                    self.step(row, node, g)
            with T.unroll(0, lanes) as g:
                with T.If(group * lanes + g < n_trees):  # the last group's spare lanes
                    with T.Then():
                        self.add_leaf(node[g] - self.u["n"], acc, seen)

    def step(self, row, node, g) -> None:
        k = node[g]
        tab = self.nodes
        v = self.value(row, tab.field(k, "feat").astype("int32"))
        split = ml_const.as_float(tab.field(k, "split"), self.cmp)
        flags = tab.field(k, "flags").astype("int32") if len(self.modes) > 1 or \
            self.has_miss else None
        cond = _COMPARE[self.modes[-1]](v, split)
        for code in self.modes[:-1]:
            cond = tirx.Select((flags & 7) == code, _COMPARE[code](v, split), cond)
        if self.has_miss:
            cond = tirx.Or(cond, tirx.And((flags & 8) != 0, te.isnan(v)))
        T.buffer_store(node, tirx.Select(cond, tab.field(k, "tid"), tab.field(
            k, "fid")).astype("int32"), [g])

    def add_leaf(self, leaf, acc, seen) -> None:
        with T.serial(0, self.n_targets) as t:
            slot = leaf * self.n_targets + t
            has = self.leaves.field(slot, "has") != tirx.const(0, "uint32")
            w = ml_const.as_float(self.leaves.field(slot, "weight"), F64)
            now = acc[t]
            new = {"MIN": tirx.min(now, w), "MAX": tirx.max(now, w)}.get(self.agg, now + w)
            T.buffer_store(acc, tirx.Select(has, new, now), [t])
            T.buffer_store(seen, tirx.Select(has, tirx.const(1, "int32"), seen[t]), [t])
