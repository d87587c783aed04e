"""Issue 17, Build item 5: per-package loggers, ``-v/-q`` anywhere on the line, progress
bars on a terminal only, the long llvm steps no longer silent, and a kernel's NumPy
warnings reported once instead of on every run."""

from __future__ import annotations

import io
import logging
import os
import re
import warnings

import numpy as np
import pytest

import nnvm
import nnvm.symbol as sym
from nnvm import progress
from cli_helpers import run_cli

MODELS = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "models")


@pytest.fixture
def graph_json(tmp_path):
    return os.path.join(MODELS, "digits_mlp.json"), os.path.join(MODELS, "digits_mlp.params")


@pytest.fixture(autouse=True)
def _restore_logging():
    root = logging.getLogger("nnvm")
    level, handlers = root.level, list(root.handlers)
    progress.set_enabled(None)  # an earlier in-process `nnvm -q` turned bars off
    yield
    root.setLevel(level)
    root.handlers[:] = handlers
    progress.set_enabled(None)


def _compile(capsys, tmp_path, graph_json, flag=None, where="before"):
    model, params = graph_json
    argv = ["compile", model, "--params", params, "--shape", "data=1,64", "--target",
            "reference", "-o", tmp_path / "m.nnvm"]
    if flag:
        argv = [flag, *argv] if where == "before" else [*argv, flag]
    return run_cli(capsys, *argv)


@pytest.mark.parametrize("where", ["before", "after"])
def test_quiet_and_verbose_work_before_or_after_the_subcommand(capsys, tmp_path, graph_json,
                                                               where):
    code, out, err = _compile(capsys, tmp_path, graph_json, "-q", where)
    assert code == 0 and "wrote" in out and err == ""
    code, _, default = _compile(capsys, tmp_path, graph_json)
    assert code == 0 and "compiling for target reference" in default
    assert "done in" not in default  # DEBUG lines only with -v
    code, _, verbose = _compile(capsys, tmp_path, graph_json, "--verbose", where)
    assert code == 0 and "InferShape" in verbose and "done in" in verbose


def test_every_package_logs_under_the_nnvm_logger(caplog):
    x = sym.Variable("x")
    with caplog.at_level(logging.INFO, logger="nnvm"):
        nnvm.compiler.build(sym.relu(x), "reference", shape={"x": ("N", 2)})
    names = {r.name for r in caplog.records}
    assert {"nnvm.compiler", "nnvm.progress"} <= names
    assert all(n.startswith("nnvm.") for n in names)


def test_bars_are_drawn_on_a_terminal_only(monkeypatch):
    pytest.importorskip("tqdm")
    monkeypatch.setattr(progress, "DELAY", 0)

    class Terminal(io.StringIO):
        def isatty(self):
            return True
    for stream, drawn in ((io.StringIO(), False), (Terminal(), True)):
        monkeypatch.setattr("sys.stderr", stream)
        assert list(progress.track(range(5), "lowering kernels", unit="kernels")) == \
            list(range(5))
        assert ("lowering kernels:" in stream.getvalue()) is drawn  # the bar, not a log line
    progress.set_enabled(False)  # the CLI's -q, even on a terminal
    stream = Terminal()
    monkeypatch.setattr("sys.stderr", stream)
    with progress.step("compiling"):
        pass
    assert "compiling:" not in stream.getvalue()  # the bar's "desc: elapsed" form


def test_llvm_lowering_and_compiling_are_not_silent(caplog, monkeypatch, tmp_path):
    """Issue 17's text detector printed nothing for 7 s while its kernels were lowered and
    compiled; each of those steps now announces itself (and draws a bar on a terminal)."""
    pytest.importorskip("tvm")
    monkeypatch.setenv("NNVM_CACHE_DIR", str(tmp_path))  # a cold kernel cache: it compiles
    x = sym.Variable("x")
    with caplog.at_level(logging.INFO, logger="nnvm"):
        nnvm.compiler.build(sym.tanh(sym.relu(x) + 1.5), "llvm", shape={"x": (4, 3)})
    text = caplog.text
    assert "checking target llvm" in text
    assert re.search(r"lowering kernels for llvm \(\d+ kernels\)", text)
    assert re.search(r"compiling \d+ kernels with LLVM", text)


def test_numpy_warnings_of_kernels_are_reported_once(caplog):
    x = sym.Variable("x")
    lib = nnvm.compiler.build(sym.log(x), "reference", shape={"x": (2,)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a leaked RuntimeWarning would raise here
        with caplog.at_level(logging.WARNING, logger="nnvm.runtime"):
            for _ in range(3):
                out = lib.run(x=np.array([0.0, -1.0], "float32"))[0]
    assert np.isneginf(out[0]) and np.isnan(out[1])
    messages = [r.getMessage() for r in caplog.records if r.name == "nnvm.runtime"]
    assert len(messages) == 2  # divide by zero, invalid value: each once, not per run
    assert any("divide by zero" in m for m in messages)
