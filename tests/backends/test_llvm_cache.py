"""The llvm kernel cache heals: a bad entry is discarded with a warning and rebuilt.

Each case builds a small model (filling the disk cache), damages the entry the way a full
disk, a crash, a stray tool or another user would, forgets the in-memory cache (what a new
process sees) and builds again: the build must succeed, warn, match the reference target and
leave a valid entry behind. The "replaced" case swaps in a real shared library whose
constructor writes a marker file, in a subprocess: the marker must not appear (no native code
from the cache ran) and the build must still match.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import nnvm
from nnvm import sym

pytest.importorskip("tvm")
from nnvm_llvm.compiler import cache  # noqa: E402

SHAPE = {"x": (4, 16)}


def _model(units: int = 16):
    rng = np.random.default_rng(units)
    x = sym.Variable("x")
    y = sym.relu(sym.dense(x, units=units, name="fc"))
    params = {"fc_weight": rng.standard_normal((units, 16)).astype("float32"),
              "fc_bias": rng.standard_normal(units).astype("float32")}
    return y, params


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("NNVM_CACHE_DIR", str(d))
    monkeypatch.delenv("NNVM_CACHE_MAX_BYTES", raising=False)
    cache.clear_memory()
    yield d
    cache.clear_memory()


def _build_and_check(units: int = 16):
    y, params = _model(units)
    xv = np.random.default_rng(7).standard_normal(SHAPE["x"]).astype("float32")
    lib = nnvm.compiler.build(y, target="llvm", shape=SHAPE, params=params)
    ref = nnvm.compiler.build(y, target="reference", shape=SHAPE, params=params)
    np.testing.assert_allclose(lib.run(x=xv)[0], ref.run(x=xv)[0], rtol=1e-5, atol=1e-5)
    return lib


def _entries(d) -> list:
    """The model libraries' entries (not the thread-pool object's)."""
    return sorted(p for p in (d / "libs").glob("*.entry")
                  if not p.name.startswith("threadpool-"))


@pytest.mark.parametrize("how", ["truncated", "garbage", "flipped"])
def test_bad_threadpool_object_is_rebuilt_not_linked(cache_dir, how):
    _build_and_check()
    (pool,) = (cache_dir / "libs").glob("threadpool-*.entry")
    good = pool.read_bytes()
    _damage(pool, how)
    cache.clear_memory()
    with pytest.warns(cache.CacheWarning, match="is unusable.*rebuilt"):
        _build_and_check(units=8)  # a new model: links the pool object again
    assert pool.read_bytes() == good


def _damage(path, how: str, other: bytes | None = None) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[:len(data) // 2])
    elif how == "emptied":
        path.write_bytes(b"")
    elif how == "garbage":
        path.write_bytes(np.random.default_rng(1).bytes(len(data)))
    elif how == "flipped":
        b = bytearray(data)
        b[-100] ^= 0xFF
        path.write_bytes(bytes(b))
    elif how == "other_entry":  # a whole valid entry of another model, renamed
        path.write_bytes(other)
    elif how == "legacy_raw_so":  # what the old cache stored: the library, no header
        path.write_bytes(data[cache._HEADER.size:])


@pytest.mark.parametrize("how", ["truncated", "emptied", "garbage", "flipped", "other_entry",
                                 "legacy_raw_so"])
def test_bad_entry_is_discarded_rebuilt_and_warned(cache_dir, how):
    _build_and_check()
    (entry,) = _entries(cache_dir)
    other = None
    if how == "other_entry":
        _build_and_check(units=8)
        other = next(p for p in _entries(cache_dir) if p != entry).read_bytes()
    good = entry.read_bytes()
    _damage(entry, how, other)
    cache.clear_memory()  # a new process: only the disk is left
    with pytest.warns(cache.CacheWarning, match="is unusable.*rebuilt"):
        lib = _build_and_check()
    assert not lib.stats()["lib_cache_hit"]
    assert entry.read_bytes() == good  # rebuilt, written again (builds are deterministic)
    cache.clear_memory()
    assert _build_and_check().stats()["lib_cache_hit"]  # and trusted again


def test_entries_are_private_and_atomic(cache_dir):
    _build_and_check()
    assert stat.S_IMODE((cache_dir / "libs").stat().st_mode) == 0o700
    assert stat.S_IMODE(cache_dir.stat().st_mode) == 0o700  # created by the cache
    (entry,) = _entries(cache_dir)
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600
    assert not [p for p in (cache_dir / "libs").iterdir() if p.name.startswith(".tmp-")]
    assert not (cache_dir / "kernels").exists()  # no TVMScript text is stored, or evaluated


def test_loose_libs_folder_is_tightened(cache_dir):
    (cache_dir / "libs").mkdir(parents=True, mode=0o755)
    os.chmod(cache_dir / "libs", 0o777)
    _build_and_check()
    assert stat.S_IMODE((cache_dir / "libs").stat().st_mode) == 0o700


def test_size_cap_evicts_least_recently_used(cache_dir, monkeypatch):
    _build_and_check(units=16)
    (first,) = _entries(cache_dir)
    os.utime(first, (1, 1))  # long unused
    monkeypatch.setenv("NNVM_CACHE_MAX_BYTES", str(first.stat().st_size + 100))
    _build_and_check(units=8)
    left = _entries(cache_dir)
    assert len(left) == 1 and left[0] != first  # the new one stays, the old one went
    monkeypatch.setenv("NNVM_CACHE_MAX_BYTES", "lots")
    with pytest.raises(nnvm.errors.NNVMError, match="NNVM_CACHE_MAX_BYTES"):
        cache.max_bytes()


def test_cli_cache_info_and_clear(cache_dir, capsys):
    from nnvm.cli import main

    _build_and_check()
    assert main(["cache", "info", "--json"]) == 0
    i = json.loads(capsys.readouterr().out)
    # the model's library and the compiled thread pool
    assert i["dir"] == str(cache_dir) and i["entries"] == 2 and i["bytes"] > 1000
    assert i["max_bytes"] == 2 << 30
    keep = cache_dir / "notes.txt"  # NNVM_CACHE_DIR may hold other things: left alone
    keep.write_text("mine")
    assert main(["cache", "clear"]) == 0
    assert "removed" in capsys.readouterr().out
    assert _entries(cache_dir) == [] and keep.read_text() == "mine"
    assert main(["cache", "info"]) == 0
    assert "entries: 0" in capsys.readouterr().out


_REPLACED = textwrap.dedent("""
    import json, os, sys, subprocess, warnings
    import numpy as np, nnvm
    from nnvm import sym
    from nnvm_llvm.compiler import cache
    marker, evil_c, evil_so = sys.argv[1], sys.argv[2], sys.argv[3]
    rng = np.random.default_rng(3)
    x = sym.Variable("x")
    y = sym.relu(sym.dense(x, units=16, name="fc"))
    p = {"fc_weight": rng.standard_normal((16, 16)).astype("float32"),
         "fc_bias": rng.standard_normal(16).astype("float32")}
    xv = rng.standard_normal((4, 16)).astype("float32")
    want = nnvm.compiler.build(y, target="reference", shape={"x": (4, 16)}, params=p).run(x=xv)[0]
    nnvm.compiler.build(y, target="llvm", shape={"x": (4, 16)}, params=p)
    libs = os.path.join(os.environ["NNVM_CACHE_DIR"], "libs")
    (entry,) = [os.path.join(libs, n) for n in os.listdir(libs)
                if n.endswith(".entry") and not n.startswith("threadpool-")]
    with open(evil_c, "w") as f:
        f.write('#include <stdio.h>\\n__attribute__((constructor)) static void evil(void) '
                '{ FILE *f = fopen("%s", "w"); if (f) { fputs("ran", f); fclose(f); } }\\n'
                % marker)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", evil_so, evil_c], check=True)
    evil = open(evil_so, "rb").read()
    header = bytearray(open(entry, "rb").read()[:cache._HEADER.size])
    header[-8:] = len(evil).to_bytes(8, "little")  # a consistent length; the hash is not
    open(entry, "wb").write(bytes(header) + evil)
    cache.clear_memory()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        lib = nnvm.compiler.build(y, target="llvm", shape={"x": (4, 16)}, params=p)
    got = lib.run(x=xv)[0]
    print(json.dumps({"warned": [str(m.message) for m in w
                                 if issubclass(m.category, cache.CacheWarning)],
                      "match": bool(np.allclose(got, want, rtol=1e-5, atol=1e-5)),
                      "ran": os.path.exists(marker)}))
""")


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_replaced_entry_runs_no_native_code(tmp_path):
    marker = tmp_path / "marker"
    env = dict(os.environ, NNVM_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", _REPLACED, str(marker),
                           str(tmp_path / "evil.c"), str(tmp_path / "evil.so")],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not out["ran"] and not marker.exists()
    assert out["match"]
    assert any("content hash mismatch" in m for m in out["warned"]), out
