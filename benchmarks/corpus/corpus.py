"""Shared helpers of the model corpus: the manifest, the cache folder, and input generators.

Why: ``fetch.py`` (obtains the files), ``run.py`` (checks nnvm against onnxruntime) and the CI
slice (``tests/frontend_onnx/test_corpus_slice.py``) must agree on where a model lives, which
bytes it must have (sha256 pinned in ``manifest.json``) and which inputs it is fed. Keeping
that in one module with no heavy dependency (numpy and onnx only) lets all three use it.

Input generators (``"gen"`` of each input in the manifest) produce *realistic* values for the
model's domain, deterministically from a seed: images in [0, 1] (optionally normalised),
token ids inside the vocabulary with an attention mask, speech-like audio, tabular features
drawn around the training data's mean/std, the ONNX test-data inputs shipped with a test.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.json"

_DTYPES = {"float32": np.float32, "float16": np.float16, "float64": np.float64,
           "int64": np.int64, "int32": np.int32, "int8": np.int8, "uint8": np.uint8,
           "bool": np.bool_}


class CorpusError(Exception):
    """A corpus problem the user must act on (missing file, checksum mismatch...)."""


def cache_dir() -> Path:
    """``$NNVM_CORPUS_DIR`` or ``~/.cache/nnvm/corpus``."""
    env = os.environ.get("NNVM_CORPUS_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "nnvm" / "corpus"


def load_manifest(path: Path | None = None) -> dict:
    with open(path or MANIFEST, encoding="utf-8") as f:
        return json.load(f)


def models(manifest: dict | None = None) -> list[dict]:
    return list((manifest or load_manifest())["models"])


def model_path(entry: dict, root: Path | None = None) -> Path:
    return (root or cache_dir()) / entry["id"] / "model.onnx"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def source_text(entry: dict) -> str:
    """One short line naming where the model came from."""
    s = entry["source"]
    kind = s["kind"]
    if kind == "pypi":
        return f"pypi:{s['package']}=={s['version']}:{s['member'].rsplit('/', 1)[-1]}"
    if kind == "onnx-testdata":
        return f"onnx=={s['onnx_version']}:{s['folder']}/{s['test']}"
    if kind == "export":
        return f"{s['exporter']}:{s['recipe']}"
    return kind


# ---------------------------------------------------------------------------- input generators
def _image(rng, shape, layout):
    """A smooth, natural-looking image in [0, 1]: low-frequency colour gradients and blobs
    plus a little noise (photographs are not white noise)."""
    if len(shape) == 3:  # one CHW image (detection models take a list of images)
        return _image(rng, (1,) + tuple(shape), "NCHW")[0]
    if layout == "NHWC":
        n, h, w, c = shape
    else:
        n, c, h, w = shape
    yy, xx = np.meshgrid(np.linspace(0, 1, h), np.linspace(0, 1, w), indexing="ij")
    out = np.empty((n, c, h, w), np.float64)
    for i in range(n):
        for ch in range(c):
            fx, fy, ph = rng.uniform(0.5, 4, 2).tolist() + [rng.uniform(0, 6.3)]
            base = 0.5 + 0.35 * np.sin(2 * np.pi * (fx * xx + fy * yy) + ph)
            cx, cy = rng.uniform(0.2, 0.8, 2)
            blob = np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / 0.02)
            out[i, ch] = base + 0.3 * blob + 0.03 * rng.standard_normal((h, w))
    out = np.clip(out, 0.0, 1.0)
    if layout == "NHWC":
        out = out.transpose(0, 2, 3, 1)
    return out


def _audio(rng, shape, scale):
    """Speech-like audio at 16 kHz: a few harmonics of a gliding pitch under a syllable-rate
    envelope, plus background noise; ``scale`` 1.0 for float audio, 32767 for int16 range."""
    flat = int(np.prod(shape))
    t = np.arange(flat) / 16000.0
    f0 = 120 + 40 * np.sin(2 * np.pi * 0.7 * t + rng.uniform(0, 6.3))
    phase = 2 * np.pi * np.cumsum(f0) / 16000.0
    sig = sum((0.5 / k) * np.sin(k * phase) for k in range(1, 6))
    env = 0.5 + 0.5 * np.sin(2 * np.pi * 4.0 * t + rng.uniform(0, 6.3)) ** 2
    sig = 0.3 * env * sig + 0.01 * rng.standard_normal(flat)
    return (sig * scale).reshape(shape)


def _document(rng, shape, layout):
    """A scanned-text-like image in [0, 1]: light paper with rows of dark glyph strokes
    (OCR and layout models see no text in smooth photos, and output ~0 everywhere)."""
    if len(shape) == 3:
        return _document(rng, (1,) + tuple(shape), "NCHW")[0]
    n, c, h, w = (shape[0], shape[3], shape[1], shape[2]) if layout == "NHWC" else shape
    out = np.empty((n, c, h, w))
    for i in range(n):
        page = 0.92 + 0.04 * rng.standard_normal((h, w)) * 0.2
        line_h = max(6, h // 8) if h < 100 else int(rng.integers(14, 24))
        y = int(rng.integers(1, max(2, line_h // 2)))
        while y + line_h <= h:
            x = int(rng.integers(0, max(1, w // 10)))
            x_end = int(w * rng.uniform(0.6, 0.98))
            while x < x_end:
                gw = int(rng.integers(max(2, line_h // 3), max(3, line_h)))
                glyph = rng.random((line_h - 2, gw)) < 0.45
                glyph[:, :: max(2, gw // 2)] = True  # vertical strokes
                sub = page[y + 1:y + line_h - 1, x:x + gw]
                sub[glyph[:, :sub.shape[1]]] = rng.uniform(0.05, 0.25)
                x += gw + int(rng.integers(1, max(2, gw // 2)))
                if rng.random() < 0.15:
                    x += gw  # word gap
            y += int(line_h * rng.uniform(1.3, 1.8))
        for ch in range(c):
            out[i, ch] = page
    out = np.clip(out, 0.0, 1.0)
    return out.transpose(0, 2, 3, 1) if layout == "NHWC" else out


def generate(spec: dict, shape, dtype: str, rng: np.random.Generator, model_dir: Path | None):
    """Values for one input from its manifest ``gen`` spec."""
    kind = spec["kind"]
    shape = tuple(int(d) for d in shape)
    if kind == "image":
        if spec.get("content") == "document":
            x = _document(rng, shape, spec.get("layout", "NCHW"))
        else:
            x = _image(rng, shape, spec.get("layout", "NCHW"))
        norm = spec.get("norm", "01")
        if norm == "imagenet":
            mean = np.array([0.485, 0.456, 0.406])
            std = np.array([0.229, 0.224, 0.225])
            if spec.get("layout", "NCHW") == "NHWC":
                x = (x - mean) / std
            else:
                x = (x - mean[:, None, None]) / std[:, None, None]
        elif norm == "pm1":
            x = (x - 0.5) / 0.5
        elif norm == "mtcnn":
            x = (x * 255.0 - 127.5) / 128.0
        elif norm == "255":
            x = x * 255.0
    elif kind == "audio":
        x = _audio(rng, shape, float(spec.get("scale", 1.0)))
    elif kind == "tokens":
        lo, hi = int(spec.get("low", 0)), int(spec["vocab"])
        x = rng.integers(lo, hi, size=shape)
    elif kind == "bytes":
        # the first/last bytes of a text file: printable ASCII and newlines, padded with
        # magika's padding token 256 after ``length`` bytes
        n = int(spec.get("length", shape[-1]))
        alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz  ETAOIN{}():;=,.\n\n0123456789",
                                 dtype=np.uint8)
        x = np.full(shape, int(spec.get("pad", 256)), dtype=np.int64)
        x[..., :n] = rng.choice(alphabet, size=shape[:-1] + (n,))
    elif kind == "ones":
        x = np.ones(shape)
    elif kind == "zeros":
        x = np.zeros(shape)
    elif kind == "value":
        x = np.full(shape, spec["value"])
    elif kind == "normal":
        x = rng.standard_normal(shape) * float(spec.get("std", 1.0)) + float(spec.get("mean", 0))
    elif kind == "uniform":
        x = rng.uniform(float(spec.get("low", 0.0)), float(spec.get("high", 1.0)), size=shape)
    elif kind == "tabular":
        mean = np.asarray(spec["mean"], np.float64)
        std = np.asarray(spec["std"], np.float64)
        x = mean + std * rng.standard_normal(shape)
        if spec.get("nonnegative"):
            x = np.abs(x)
    elif kind == "testdata":
        from onnx import numpy_helper, TensorProto

        if model_dir is None:
            raise CorpusError("testdata inputs need the model's cache folder")
        t = TensorProto()
        t.ParseFromString((model_dir / "test_data_set_0" / spec["file"]).read_bytes())
        return numpy_helper.to_array(t)
    else:
        raise CorpusError(f"unknown input generator {kind!r}")
    return np.asarray(x).astype(_DTYPES[dtype])


def make_inputs(entry: dict, root: Path | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """The feed dict for a manifest entry (deterministic for a seed)."""
    rng = np.random.default_rng(seed)
    model_dir = model_path(entry, root).parent
    feed = {}
    for inp in entry["inputs"]:
        feed[inp["name"]] = generate(inp["gen"], inp.get("shape", ()), inp.get("dtype", "float32"),
                                     rng, model_dir)
    return feed


def input_shapes(feed: dict[str, Any]) -> dict[str, tuple]:
    return {k: tuple(np.asarray(v).shape) for k, v in feed.items()}
