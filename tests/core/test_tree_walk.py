"""The tree ensembles' level-synchronous walk (leaves folded into the node table, looping to
themselves) reaches the same leaf as the masked walk it replaces for LEQ splits: random
forests with leaf roots, missing values tracked both ways, NaN inputs, float32 and float64
comparisons. Needs only core."""

from __future__ import annotations

import numpy as np
import pytest

from nnvm.ops import ml


def _random_forest(rng, trees: int, features: int, miss: bool) -> dict:
    feat, split, tid, tleaf, fid, fleaf, track = [], [], [], [], [], [], []
    roots, root_leaf, leaves = [], [], [0]

    def leaf():
        leaves[0] += 1
        return leaves[0] - 1, 1

    def node(depth):
        if depth == 0 or rng.random() < 0.25:
            return leaf()
        k = len(feat)
        for lst in (feat, split, tid, tleaf, fid, fleaf, track):
            lst.append(0)
        feat[k], split[k] = int(rng.integers(features)), float(rng.standard_normal())
        track[k] = int(miss and rng.random() < 0.5)
        tid[k], tleaf[k] = node(depth - 1)
        fid[k], fleaf[k] = node(depth - 1)
        return k, 0

    for _ in range(trees):
        r, is_leaf = node(int(rng.integers(0, 7)))
        roots.append(r)
        root_leaf.append(is_leaf)
    n_leaf = leaves[0]
    return {"nodes_featureids": feat, "nodes_splits": split, "nodes_modes": [0] * len(feat),
            "nodes_truenodeids": tid, "nodes_trueleafs": tleaf, "nodes_falsenodeids": fid,
            "nodes_falseleafs": fleaf, "nodes_missing_value_tracks_true": track,
            "membership_values": [], "tree_roots": roots, "roots_are_leaves": root_leaf,
            "leaf_entries": list(range(n_leaf)), "leaf_targetids": [0] * n_leaf,
            "leaf_weights": rng.standard_normal(n_leaf).tolist(),
            "aggregate_function": "SUM", "single_precision": True}


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_level_walk_reaches_the_masked_walks_leaves(seed, dtype):
    rng = np.random.default_rng(seed)
    attrs = _random_forest(rng, trees=int(rng.integers(1, 12)), features=5, miss=seed % 2 == 1)
    attrs["single_precision"] = dtype == "float32"
    prep = ml._prepared(attrs, 1)
    x = rng.standard_normal((9, 5)).astype(dtype)
    x[rng.random(x.shape) < 0.15] = np.nan
    fast = ml._tree_leaves(attrs, prep, x)
    # an unused second mode sends the same trees down the masked walk
    masked = ml._tree_leaves(attrs, dict(prep, modes=[0, 1]), x)
    np.testing.assert_array_equal(fast, masked)
    assert "unified" in prep  # the level walk ran
