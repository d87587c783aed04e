"""ArtifactRunner (no Ray): rows of any count run in chunks of the compiled batch, equal to
running the artifact directly; bytes are verified like files; bad rows are refused; among
artifacts of one model for several targets, the best usable target is loaded."""

from __future__ import annotations

import numpy as np
import pytest
from nnvm import NNVMError
from nnvm.errors import SerializationError
from nnvm_ray.runner import ArtifactRunner, choose_artifact, read_signature

from ray_helpers import BATCH, FEATURES, artifact_claiming, build_mlp, direct, llvm_reason


def test_rows_in_chunks_equal_the_artifact_run_directly(mlp_artifact, rng):
    x = rng.standard_normal((5 * BATCH, FEATURES)).astype("float32")
    got = ArtifactRunner(mlp_artifact).run_rows({"x": x})
    assert list(got) == ["prob_output"]
    assert np.array_equal(got["prob_output"], direct(mlp_artifact, x))


def test_a_short_last_chunk_is_padded_and_its_padding_dropped(mlp_artifact, rng):
    x = rng.standard_normal((BATCH + 1, FEATURES)).astype("float32")
    padded = np.concatenate([x] + [x[-1:]] * (BATCH - 1))  # the last row repeated
    got = ArtifactRunner(mlp_artifact).run_rows({"x": x})["prob_output"]
    assert got.shape == (BATCH + 1, 3)
    assert np.array_equal(got, direct(mlp_artifact, padded)[:BATCH + 1])


def test_bytes_load_like_the_file_and_tampering_is_refused(mlp_artifact, rng):
    data = open(mlp_artifact, "rb").read()
    x = rng.standard_normal((BATCH, FEATURES)).astype("float32")
    assert np.array_equal(ArtifactRunner(data).run_rows({"x": x})["prob_output"],
                          direct(mlp_artifact, x))
    assert read_signature(data).input_names == ["x"]
    i = data.index(b"params.bin") + 200  # a byte inside the zip, past the first header
    bad = data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:]
    with pytest.raises(SerializationError):
        ArtifactRunner(bad)


@pytest.mark.parametrize("columns, match", [
    ({"y": np.zeros((2, FEATURES), "float32")}, "missing input"),
    ({"x": np.zeros((2, FEATURES), "float64")}, "wrong dtype"),
    ({"x": np.zeros((2, FEATURES + 1), "float32")}, "wrong row shape"),
])
def test_bad_rows_are_refused_with_the_fix(mlp_artifact, columns, match):
    with pytest.raises(NNVMError, match=match):
        ArtifactRunner(mlp_artifact).run_rows(columns)


def test_an_artifact_without_a_batch_axis_is_refused(tmp_path):
    import nnvm
    from nnvm import sym

    x = sym.Variable("x")
    lib = nnvm.compiler.build(nnvm.graph.create(sym.sum(x, axis=0)), target="reference",
                              shape={"x": (BATCH, FEATURES)})
    path = str(tmp_path / "sum.nnvm")
    lib.export(path)
    with pytest.raises(NNVMError, match="no batch axis"):
        read_signature(path)


def test_among_candidates_an_unusable_target_is_passed_over(mlp_artifact, tmp_path, rng):
    from nnvm.errors import BackendUnavailableError

    vulkan = artifact_claiming(tmp_path, "vulkan")  # no installed plugin provides it
    runner = ArtifactRunner([vulkan, mlp_artifact])
    assert runner.target == "reference"
    x = rng.standard_normal((BATCH, FEATURES)).astype("float32")
    assert np.array_equal(runner.run_rows({"x": x})["prob_output"], direct(mlp_artifact, x))
    with pytest.raises(BackendUnavailableError, match="none of the artifacts' targets can run "
                                                      "here.*vulkan: plugin not installed"):
        choose_artifact([vulkan, vulkan])


@pytest.mark.llvm
@pytest.mark.skipif(llvm_reason() is not None, reason=f"llvm unavailable: {llvm_reason()}")
def test_the_best_usable_target_among_candidates_is_loaded(mlp_artifact, tmp_path, rng):
    llvm = str(tmp_path / "mlp-llvm.nnvm")
    build_mlp("llvm").export(llvm)
    runner = ArtifactRunner([open(mlp_artifact, "rb").read(), llvm], num_threads=1)
    assert runner.target.split()[0] == "llvm" and runner.module.num_threads == 1
    x = rng.standard_normal((BATCH, FEATURES)).astype("float32")
    assert np.array_equal(runner.run_rows({"x": x})["prob_output"], direct(llvm, x))


def test_candidates_must_be_one_model(mlp_artifact, tmp_path):
    import nnvm
    from nnvm import sym

    other = str(tmp_path / "relu.nnvm")
    nnvm.compiler.build(nnvm.graph.create(sym.relu(sym.Variable("x"))), target="reference",
                        shape={"x": (BATCH, FEATURES)}).export(other)
    with pytest.raises(NNVMError, match="is not the same model as the first artifact"):
        read_signature([mlp_artifact, other])
