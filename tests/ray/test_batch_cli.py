"""``nnvm batch`` on a local Ray cluster: 64 .npz files in, 64 .npz files out equal to
running the artifact directly; bad files reported by name (skipped, or stopping the run
with --on-error fail); Parquet in and out; a running cluster joined by its address."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from nnvm import cli
from ray_helpers import BATCH, FEATURES, artifact_claiming, direct

pytestmark = pytest.mark.slow


def _npz_folder(folder, rng, files: int = 64) -> dict[str, np.ndarray]:
    """``files`` .npz files, most with one compiled batch of rows, every 8th with two."""
    os.makedirs(folder, exist_ok=True)
    data = {}
    for i in range(files):
        rows = BATCH * (2 if i % 8 == 7 else 1)
        data[f"s{i:02d}"] = rng.standard_normal((rows, FEATURES)).astype("float32")
        np.savez(os.path.join(folder, f"s{i:02d}.npz"), x=data[f"s{i:02d}"])
    return data


def _batch(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main(["batch", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_64_npz_files_give_64_outputs_equal_to_the_artifact(ray_local, mlp_artifact,
                                                             tmp_path, rng, capsys):
    data = _npz_folder(tmp_path / "in", rng)
    (tmp_path / "in" / "corrupt.npz").write_bytes(b"not a zip")
    np.savez(tmp_path / "in" / "narrow.npz", x=np.zeros((BATCH, FEATURES - 1), "float32"))
    code, out, err = _batch(capsys, mlp_artifact, "--input", tmp_path / "in", "--output",
                            tmp_path / "out", "--workers", 2, "--batch-size", 8, "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["files"] == 64 and summary["written"] == 64
    assert summary["rows"] == sum(len(v) for v in data.values())
    assert sum(w["rows"] for w in summary["per_worker"].values()) == summary["rows"]
    assert [os.path.basename(p) for p in summary["skipped"]] == ["corrupt.npz", "narrow.npz"]
    assert "corrupt.npz': is not an .npz file" in err
    assert "narrow.npz', input 'x': wrong row shape" in err
    assert sorted(os.listdir(tmp_path / "out")) == sorted(f"{s}.npz" for s in data)
    for stem, x in data.items():
        with np.load(tmp_path / "out" / f"{stem}.npz") as z:
            assert z.files == ["prob_output"]
            assert np.array_equal(z["prob_output"], direct(mlp_artifact, x)), stem


def test_on_error_fail_stops_before_running_and_names_the_file(ray_local, mlp_artifact,
                                                               tmp_path, rng, capsys):
    _npz_folder(tmp_path / "in", rng, files=2)
    np.savez(tmp_path / "in" / "ints.npz", x=np.zeros((BATCH, FEATURES), "int32"))
    code, out, err = _batch(capsys, mlp_artifact, "--input", tmp_path / "in", "--output",
                            tmp_path / "out", "--on-error", "fail")
    assert code == 2 and out == ""
    assert err.startswith("nnvm: error: input '") and "ints.npz', input 'x': wrong dtype" in err
    assert not (tmp_path / "out").exists()


def test_parquet_in_parquet_out(ray_local, mlp_artifact, tmp_path, rng, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    x = rng.standard_normal((10, FEATURES)).astype("float32")  # not a multiple of BATCH
    column = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), FEATURES)
    pq.write_table(pa.table({"x": column, "note": pa.array(["extra"] * 10)}),
                   tmp_path / "in.parquet")
    code, out, err = _batch(capsys, mlp_artifact, "--input", tmp_path / "in.parquet",
                            "--output", tmp_path / "out.parquet", "--workers", 1, "-q")
    assert code == 0, err
    assert "10 rows" in out
    table = pq.read_table(tmp_path / "out.parquet")
    assert table.column_names == ["prob_output"]
    got = table.column("prob_output").combine_chunks().to_numpy_ndarray()
    padded = np.concatenate([x, x[-1:], x[-1:]])  # the last row repeated to a full batch
    assert np.array_equal(got, direct(mlp_artifact, padded)[:10])


def test_the_command_joins_a_running_cluster_by_address(ray_local, mlp_artifact, tmp_path,
                                                        rng):
    """The console entry point in a new process, as a user on a cluster node runs it, with
    two candidate artifacts: one for a target no node has (skipped), one for reference."""
    data = _npz_folder(tmp_path / "in", rng, files=3)
    vulkan = artifact_claiming(tmp_path, "vulkan")  # no installed plugin provides it
    address = ray_local.get_runtime_context().gcs_address
    env = {k: v for k, v in os.environ.items() if not k.startswith("NNVM_")}
    run = subprocess.run([sys.executable, "-m", "nnvm", "batch",
                          vulkan, mlp_artifact, "--input",
                          str(tmp_path / "in"), "--output", str(tmp_path / "out"),
                          "--ray", address, "--workers", "1", "--json"],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.strip().splitlines()[-1])["rows"] == 3 * BATCH
    for stem, x in data.items():
        with np.load(tmp_path / "out" / f"{stem}.npz") as z:
            assert np.array_equal(z["prob_output"], direct(mlp_artifact, x))


def test_bad_command_lines_are_refused_with_the_fix(mlp_artifact, tmp_path, capsys):
    code, _, err = _batch(capsys, mlp_artifact, "--input", tmp_path / "missing", "--output",
                          tmp_path / "out")
    assert code == 2 and "does not exist" in err
    (tmp_path / "in.parquet").write_bytes(b"")
    code, _, err = _batch(capsys, mlp_artifact, "--input", tmp_path / "in.parquet",
                          "--output", tmp_path / "out")
    assert code == 2 and "must be a .parquet file" in err
