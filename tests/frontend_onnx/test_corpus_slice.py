"""CI slice of the real-model corpus (benchmarks/corpus): real ONNX files nobody here wrote.

Why: the repository's other model tests run models this project built itself. This slice
takes a handful of models from the corpus that need no heavy exporter: voice-activity models
shipped inside PyPI wheels (fetched with ``pip download`` of the pinned release, about 12 MB,
cached in ``$NNVM_CORPUS_DIR`` or ``~/.cache/nnvm/corpus``) and model tests shipped inside the
installed ``onnx`` package. Each is imported with ``nnvm.frontend.from_onnx``, run on the
``reference`` target with the corpus's generated inputs and compared with onnxruntime, exactly
as ``benchmarks/corpus/run.py`` does for the full corpus.

Models that fail today are ``xfail(strict=True)`` with their error class, so a fix shows up as
an XPASS failure and the mark must then be removed. Wheel-shipped models are skipped (with the
reason) when PyPI cannot be reached or pip is missing; a sha256 mismatch is a failure.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

CORPUS = Path(__file__).resolve().parents[2] / "benchmarks" / "corpus"


def _load(name: str):
    sys.path.insert(0, str(CORPUS))
    try:
        spec = importlib.util.spec_from_file_location(f"nnvm_corpus_{name}", CORPUS / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(CORPUS))


corpus = _load("corpus")
fetch = _load("fetch")
runner = _load("run")

# model id -> None (expected to match onnxruntime today) or the xfail reason (its error class)
SLICE = {
    # PyPI wheels: faster-whisper 1.2.1 (1.1 MB), silero-vad 6.2.3 (11 MB)
    "faster-whisper-silero-vad-v6": None,
    "silero-vad-16k-op15": None,
    "silero-vad-op18-ifless": None,
    "silero-vad-v6": None,  # If on the sample rate; its untaken 8 kHz branch once failed import
    # onnx package test data (no network)
    "onnxtest-pytorch-converted-Conv2d": None,
    "onnxtest-pytorch-converted-BatchNorm2d_eval": None,
    "onnxtest-pytorch-operator-operator_repeat": None,
    "onnxtest-simple-sign_model": None,
    "onnxtest-pytorch-converted-PReLU_2d_multiparam": None,  # legacy (opset 6) per-channel slope
    "onnxtest-simple-expand_shape_model1": None,  # Expand's shape is a graph input: run time
}


def _params():
    entries = {e["id"]: e for e in corpus.models()}
    out = []
    for mid, reason in SLICE.items():
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(entries[mid], id=mid, marks=marks))
    return out


@pytest.fixture(scope="module")
def root() -> Path:
    path = corpus.cache_dir()
    path.mkdir(parents=True, exist_ok=True)
    return path


def _ensure(entry: dict, root: Path) -> None:
    if entry["source"]["kind"] == "pypi":
        try:
            fetch.pip_command()
        except corpus.CorpusError as exc:
            pytest.skip(str(exc))
    status, msg = fetch.fetch_one(entry, root, sys.executable, pin=False)
    if status == "error" and "pip download" in msg:
        pytest.skip(f"PyPI unreachable, cannot fetch {entry['id']}: {msg.splitlines()[0]}")
    assert status in ("cached", "fetched"), f"{entry['id']}: {status}: {msg}"


@pytest.mark.parametrize("entry", _params())
def test_corpus_model_matches_onnxruntime(entry, root):
    _ensure(entry, root)
    row = runner.run_model(entry, "reference", None, root)
    assert row["status"] == "ok", f"{entry['id']}: {row['status']}: {row['error']}"


def test_slice_models_are_in_manifest():
    ids = {e["id"] for e in corpus.models()}
    assert set(SLICE) <= ids
    assert os.path.exists(CORPUS / "manifest.json")
