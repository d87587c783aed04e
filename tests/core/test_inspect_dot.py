"""``nnvm inspect --dot/--svg``: the graph as Graphviz DOT, fused kernels as clusters."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

import nnvm
from nnvm import sym
from nnvm.graph_dot import _quote, to_dot
from nnvm.testing import models
from cli_helpers import error_line, run_cli


def _check_dot(text: str) -> None:
    """What Graphviz would refuse: unbalanced braces, edges to undeclared nodes."""
    assert text.startswith("digraph ") and text.rstrip().endswith("}")
    body = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)  # strings may hold braces
    assert body.count("{") == body.count("}")
    declared = set(re.findall(r"^\s*(n\d+|out\d+) \[", text, re.M))
    for a, b in re.findall(r"^\s*(\w+) -> (\w+)", text, re.M):
        assert a in declared and b in declared, (a, b)


@pytest.fixture
def cnn_artifact(tmp_path):
    net, params, shapes = models.small_cnn()
    lib = nnvm.compiler.build(net, target="reference", shape=shapes, params=params,
                              opt_level=2)
    path = tmp_path / "cnn.nnvm"
    lib.export(str(path))
    return path


def test_dot_of_an_artifact_has_kernels_and_shapes(capsys, tmp_path, cnn_artifact):
    out = tmp_path / "cnn.dot"
    code, _, err = run_cli(capsys, "inspect", cnn_artifact, "--dot", out)
    assert code == 0, err
    text = out.read_text()
    _check_dot(text)
    assert 'label="input data"' in text and 'label="output ' in text
    assert "1x3x16x16 float32" in text  # the input's shape and dtype on its edge
    graph = nnvm.runtime.load(str(cnn_artifact)).graph
    roots = graph.attrs.get("group_root")
    if roots is not None:
        multi = {r for r in roots if r >= 0 and list(roots).count(r) > 1}
        assert text.count("subgraph cluster_") == len(multi) > 0
        assert "kernel: conv2d" in text


def test_dot_without_groups_draws_every_op():
    x = sym.Variable("x")
    y = sym.relu(sym.exp(x, name="e"), name="r")
    graph = nnvm.graph.create(y).apply(["InferShape", "InferType"],
                                       shape_inputs={"x": (2, 3)},
                                       dtype_inputs={"x": "float32"})
    text = to_dot(graph)
    _check_dot(text)
    assert "cluster" not in text
    assert text.count("->") == 3 and "2x3 float32" in text


def test_quoting_survives_hostile_names():
    assert _quote('a"b\\c\nd') == '"a\\"b\\\\c\\nd"'
    x = sym.Variable('we"ird{name}')
    text = to_dot(nnvm.graph.create(sym.relu(x, name="r}\\")))
    _check_dot(text)


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_svg_renders_with_graphviz(capsys, tmp_path, cnn_artifact):
    svg = tmp_path / "cnn.svg"
    code, _, err = run_cli(capsys, "inspect", cnn_artifact, "--svg", svg)
    assert code == 0, err
    assert svg.read_text().lstrip().startswith(("<?xml", "<svg"))
    dot = tmp_path / "cnn.dot"
    run_cli(capsys, "inspect", cnn_artifact, "--dot", dot)
    check = subprocess.run(["dot", "-Tsvg", str(dot)], capture_output=True, check=False)
    assert check.returncode == 0 and not check.stderr, check.stderr


def test_svg_without_graphviz_says_how(capsys, tmp_path, cnn_artifact, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    code, _, err = run_cli(capsys, "inspect", cnn_artifact, "--svg", tmp_path / "x.svg")
    assert code != 0
    assert "Install Graphviz" in error_line(err, only_progress_before=False)


def test_dot_to_missing_folder_is_one_clear_error(capsys, tmp_path, cnn_artifact):
    code, _, err = run_cli(capsys, "inspect", cnn_artifact, "--dot", tmp_path / "no" / "x.dot")
    assert code != 0
    assert "cannot write" in error_line(err, only_progress_before=False)
