"""Host tails beyond the data-dependent ops themselves: a model whose other outputs fold to
constants at import (the Shape of a static tensor, arithmetic on initializers) - those
outputs come from neither the compiled part nor the tail, so the module holds their values
and its artifact carries them - checked against onnxruntime on every target and after export
in a fresh process; and what an artifact says about its tail (``nnvm inspect`` and the
manifest describe the compiled part only)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

import nnvm  # noqa: E402

from onnx_test_helpers import make_model, ort_run  # noqa: E402

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model():
    """NonZero over relu(x) > th (data-dependent), next to Shape(x) and th * 2 (constants
    after import) and relu(x) itself (compiled)."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Greater", ["r", "th"], ["mask"]),
             helper.make_node("NonZero", ["mask"], ["nz"], name="find"),
             helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Mul", ["th", "two"], ["doubled"])]
    inits = [helper.make_tensor("th", F, [], [0.3]), helper.make_tensor("two", F, [], [2.0])]
    return make_model(nodes, [helper.make_tensor_value_info("x", F, [2, 12])],
                      [helper.make_tensor_value_info("nz", I64, [2, None]),
                       helper.make_tensor_value_info("shape", I64, [2]),
                       helper.make_tensor_value_info("doubled", F, []),
                       helper.make_tensor_value_info("r", F, [2, 12])], inits)


def _build(target: str):
    if target == "llvm":
        pytest.importorskip("tvm")
    graph, params = nnvm.frontend.from_onnx(_model(), shape={"x": (2, 12)})
    return nnvm.compiler.build(graph, target=target, shape={"x": (2, 12)}, params=params)


def _assert_matches(outs, want):
    assert len(outs) == len(want)
    for got, ref in zip(outs, want):
        assert got.shape == ref.shape and got.dtype == ref.dtype
        np.testing.assert_array_equal(got, ref)


FEEDS = [{"x": np.random.default_rng(seed).standard_normal((2, 12)).astype("float32")}
         for seed in (0, 1)]

LOAD = textwrap.dedent("""
    import sys, numpy as np, nnvm
    lib = nnvm.runtime.load(sys.argv[1])
    outs = [lib.run(**dict(np.load(f))) for f in sys.argv[2:]]
    np.savez(sys.argv[1] + ".out.npz", *[o for run in outs for o in run])
""")


@pytest.mark.parametrize("target", ["reference", "llvm"])
def test_constant_outputs_beside_a_host_tail_run_and_export(tmp_path, target):
    lib = _build(target)
    assert lib.output_names == ["nz", "shape", "doubled", "r"]
    for feed in FEEDS:
        _assert_matches(lib.run(**feed), ort_run(_model(), feed))
    art = tmp_path / "m.nnvm"
    lib.export(str(art))
    files = []
    for i, feed in enumerate(FEEDS):
        files.append(str(tmp_path / f"in{i}.npz"))
        np.savez(files[-1], **feed)
    res = subprocess.run([sys.executable, "-c", LOAD, str(art), *files],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    got = np.load(str(art) + ".out.npz")
    n = len(lib.output_names)
    for i, feed in enumerate(FEEDS):
        _assert_matches([got[f"arr_{i * n + k}"] for k in range(n)], ort_run(_model(), feed))


def test_artifact_and_stats_name_the_tail(tmp_path):
    """The summary names the tail's size, first node and the model's own outputs (the
    artifact's graph.json has the compiled part's); an artifact without a tail has none."""
    from nnvm.runtime.artifact import read_artifact
    from nnvm.runtime.host_tail import host_tail_summary

    lib = _build("llvm")
    assert lib.stats()["host_tail_from"] == "find (non_zero)"
    lib.export(str(tmp_path / "m.nnvm"))
    summary = host_tail_summary(read_artifact(str(tmp_path / "m.nnvm")))
    assert summary["host_nodes"] == 1 and summary["ops"] == {"non_zero": 1}
    assert (summary["first_node"], summary["first_op"]) == ("find", "non_zero")
    assert [(o["name"], o["shape"], o["dtype"]) for o in summary["outputs"]] == [
        ("nz", None, "int64"), ("shape", [2], "int64"), ("doubled", [], "float32"),
        ("r", [2, 12], "float32")]
    lib.static.export(str(tmp_path / "static.nnvm"))
    assert host_tail_summary(read_artifact(str(tmp_path / "static.nnvm"))) is None


def test_inspect_names_the_tail_and_the_models_outputs(tmp_path, capsys):
    """`nnvm inspect` of a host-tail artifact shows the model's outputs (not the compiled
    part's), the tail's first node, and stats counting the host nodes."""
    import json

    from nnvm import cli

    lib = _build("llvm")
    lib.export(str(tmp_path / "m.nnvm"))
    assert cli.main(["inspect", str(tmp_path / "m.nnvm")]) == 0
    text = capsys.readouterr().out
    assert "host tail: 1 node(s) from 'find' (non_zero) onwards" in text
    assert "nz: ? int64" in text
    assert cli.main(["inspect", str(tmp_path / "m.nnvm"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert [o["name"] for o in info["outputs"]] == ["nz", "shape", "doubled", "r"]
    assert info["stats"]["host_tail_from"] == "find (non_zero)"
