"""The LeNet example end to end, shortened: trains on the 8x8 digits well above chance and
prints the memory plan and, last, ``test accuracy: <float>``."""

from __future__ import annotations

import importlib.util
import os
import sys
import time

import pytest

try:
    import tinyflow  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples",
                                    "tinyflow", "src"))

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "tinyflow",
                        "examples")


def _load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_lenet_digits_short_run(capsys):
    pytest.importorskip("sklearn")
    lenet = _load("lenet_digits")
    start = time.perf_counter()
    accuracy = lenet.main(["--target", "reference", "--epochs", "2"])
    elapsed = time.perf_counter() - start
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == f"test accuracy: {accuracy:.4f}"
    assert accuracy > 0.8, f"accuracy {accuracy} after 2 epochs (chance is 0.1)"
    assert elapsed < 60
    memory = next(line for line in lines if line.startswith("memory per training step"))
    planned, naive = [int(w) for w in memory.split() if w.isdigit()][:2]
    assert planned < naive
    conv1 = next(line for line in lines if line.startswith("shape[conv1_weight] = "))
    assert conv1.endswith(", 1, 3, 3)")  # inferred from the (N, 1, 8, 8) data shape


def test_softmax_digits_short_run(capsys):
    pytest.importorskip("sklearn")
    accuracy = _load("softmax_digits").main(["--steps", "200"])
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("test accuracy:")
    assert accuracy > 0.85
