"""nnvm_ray.map_batches on a local Ray cluster: outputs equal to running the artifact
directly, for the artifact shipped through the object store or opened by path, and every
row exactly once when an actor is killed mid-run."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest
from nnvm import NNVMError
from ray_helpers import BATCH, FEATURES, build_mlp, direct, llvm_reason

pytestmark = pytest.mark.slow


def _dataset(ray, x: np.ndarray):
    return ray.data.from_items([{"x": row, "id": i} for i, row in enumerate(x)])


def _by_id(rows: list[dict], column: str) -> np.ndarray:
    return np.stack([r[column] for r in sorted(rows, key=lambda r: r["id"])])


@pytest.mark.parametrize("share", ["object_store", "path"])
def test_64_groups_equal_the_artifact_run_directly(ray_local, mlp_artifact, share, rng):
    import nnvm_ray

    x = rng.standard_normal((64 * BATCH, FEATURES)).astype("float32")
    out = nnvm_ray.map_batches(_dataset(ray_local, x), mlp_artifact, batch_size=32,
                               concurrency=2, share=share)
    rows = out.take_all()
    assert sorted(rows[0]) == ["id", "prob_output"]  # inputs replaced by outputs, ids kept
    assert sorted(r["id"] for r in rows) == list(range(len(x)))
    assert np.array_equal(_by_id(rows, "prob_output"), direct(mlp_artifact, x))


@pytest.mark.llvm
@pytest.mark.skipif(llvm_reason() is not None, reason=f"llvm unavailable: {llvm_reason()}")
def test_actors_pick_the_llvm_candidate_and_equal_it_run_directly(ray_local, mlp_artifact,
                                                                  tmp_path, rng):
    """Given the model for reference and for llvm, each actor loads the best its node can
    run (llvm here): native code through Ray, mapped from the bytes the actor fetched."""
    import nnvm_ray

    path = str(tmp_path / "mlp-llvm.nnvm")
    build_mlp("llvm").export(path)
    x = rng.standard_normal((16 * BATCH, FEATURES)).astype("float32")
    rows = nnvm_ray.map_batches(_dataset(ray_local, x), [mlp_artifact, path], batch_size=16,
                                concurrency=2).take_all()
    want = direct(path, x)
    assert not np.array_equal(want, direct(mlp_artifact, x))  # the two targets' bits differ
    assert np.array_equal(_by_id(rows, "prob_output"), want)


def test_a_killed_actor_is_replaced_and_every_row_comes_once(ray_local, mlp_artifact, rng):
    """SIGKILL the actor that produced the first batch while the rest is still running:
    Ray restarts it (it loads the artifact again) and retries its batches."""
    import nnvm_ray

    n = 128 * BATCH
    x = rng.standard_normal((n, FEATURES)).astype("float32")
    out = nnvm_ray.map_batches(_dataset(ray_local, x), mlp_artifact, batch_size=BATCH,
                               concurrency=2, worker_column="worker")
    ids, probs, killed, seen_at_kill = [], [], None, None
    for batch in out.iter_batches(batch_size=None, batch_format="numpy"):
        ids.extend(batch["id"].tolist())
        probs.append(batch["prob_output"])
        if killed is None:
            killed = str(batch["worker"][0])
            seen_at_kill = len(ids)
            os.kill(int(killed.rsplit(":", 1)[1]), signal.SIGKILL)
    assert seen_at_kill < n, "the run ended before the kill; nothing was tested"
    assert sorted(ids) == list(range(n)), "rows lost or duplicated"
    got = np.concatenate(probs)[np.argsort(ids)]
    assert np.array_equal(got, direct(mlp_artifact, x))


@pytest.mark.parametrize("kwargs, match", [
    ({"share": "nfs"}, "unknown share mode"),
    ({"concurrency": 0}, "bad concurrency"),
    ({"concurrency": (2, 1)}, "bad concurrency"),
    ({"batch_size": 0}, "bad batch_size"),
])
def test_bad_arguments_are_refused_before_any_actor_starts(ray_local, mlp_artifact, kwargs,
                                                           match):
    import nnvm_ray

    with pytest.raises(NNVMError, match=match):
        nnvm_ray.map_batches(ray_local.data.range(4), mlp_artifact, **kwargs)
