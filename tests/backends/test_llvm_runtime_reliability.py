"""Native code of the ``llvm`` runtime: loaded without an executable temp dir, unloaded with
its threads, never confused with another model's library, clear errors when it cannot load.

Counts come from the kernel (``/proc/self/task``, ``/proc/self/maps``), not from our own
bookkeeping, so a leaked worker thread or a library that stays mapped fails the test.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import nnvm
import nnvm.symbol as sym
from nnvm.backend import get_backend
from nnvm.errors import NNVMError

REASON = get_backend("llvm", require_available=False).compiler_available()
pytestmark = [
    pytest.mark.skipif(REASON is not None, reason=str(REASON)),
    pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc"),
]
CYCLES = 200


def _net(units: int):
    rng = np.random.default_rng(units)
    x = sym.Variable("x")
    y = sym.relu(sym.dense(x, units=units, name="fc"))
    params = {"fc_weight": rng.standard_normal((units, 32)).astype("float32"),
              "fc_bias": rng.standard_normal(units).astype("float32")}
    return y, params, {"x": (8, 32)}


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    """An exported llvm model (2 pool threads, so each load starts a worker) + its oracle."""
    net, params, shapes = _net(64)
    path = str(tmp_path_factory.mktemp("art") / "mlp.nnvm")
    lib = nnvm.compiler.build(net, target="llvm -num-threads=2", shape=shapes, params=params)
    lib.export(path)
    x = np.random.default_rng(5).standard_normal(shapes["x"]).astype("float32")
    ref = nnvm.compiler.build(net, target="reference", shape=shapes, params=params).run(x=x)[0]
    return path, x, ref


def _native_libs() -> int:
    """Mapped nnvm model libraries (memfd or fallback-directory files) of this process."""
    names = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and ("nnvm-llvm-lib" in parts[5] or "nnvm-native-" in parts[5]):
                names.add(parts[5].strip())
    return len(names)


def _counts() -> tuple[int, int, int]:
    return threading.active_count(), len(os.listdir("/proc/self/task")), _native_libs()


def test_load_unload_cycles_leave_threads_and_libraries_flat(artifact, monkeypatch):
    path, x, ref = artifact
    # the artifact keeps no thread count: the pool sizes itself from TVM_NUM_THREADS (then
    # OMP_NUM_THREADS, then the CPUs); two threads whatever the machine or the environment
    monkeypatch.setenv("TVM_NUM_THREADS", "2")
    m = nnvm.runtime.load(path)
    assert m.num_threads == 2
    loaded = _counts()
    assert loaded[2] == 1, "the loaded library should be visible in /proc/self/maps"
    del m
    gc.collect()
    base = _counts()
    assert base[2] == 0, "deleting the module must unmap its library"
    assert base[1] <= loaded[1] - 1, "deleting the module must join its pool worker"
    for _ in range(CYCLES):
        m = nnvm.runtime.load(path)
        out = m.run(x=x)[0]
        del m  # plain refcounting: no gc.collect() needed to release threads and library
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    assert _counts() == base


def test_memfd_is_used_and_nothing_is_written_to_tmpdir(artifact, tmp_path, monkeypatch):
    if not hasattr(os, "memfd_create"):
        pytest.skip("os.memfd_create unavailable on this OS")
    from nnvm_llvm.runtime import executor

    path, x, ref = artifact
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr("tempfile.tempdir", None)  # re-read TMPDIR
    m = nnvm.runtime.load(path)
    assert executor.last_load_method == "memfd"
    with open("/proc/self/maps") as f:
        assert "/memfd:nnvm-llvm-lib" in f.read()
    np.testing.assert_allclose(m.run(x=x)[0], ref, rtol=1e-5, atol=1e-5)
    assert list(tmp.iterdir()) == []


def test_two_live_models_never_share_a_library(artifact):
    """dlopen matches libraries by path string and fd numbers are reused: a second model
    loaded while the first is alive must still get its own code."""
    path, x, ref = artifact
    first = nnvm.runtime.load(path)
    net, params, shapes = _net(24)
    second = nnvm.compiler.build(net, target="llvm", shape=shapes, params=params)
    want = nnvm.compiler.build(net, target="reference", shape=shapes, params=params).run(x=x)
    np.testing.assert_allclose(second.run(x=x)[0], want[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(first.run(x=x)[0], ref, rtol=1e-5, atol=1e-5)


def test_without_memfd_a_private_dir_is_used_and_removed(artifact, tmp_path, monkeypatch):
    from nnvm_llvm.runtime import executor

    path, x, ref = artifact
    native = tmp_path / "native"
    monkeypatch.delattr(os, "memfd_create", raising=False)  # an OS without memfd
    monkeypatch.setenv("NNVM_NATIVE_DIR", str(native))
    seen = []
    real = executor._dlopen

    def spy(tvm_ffi, so_path):
        seen.append((so_path, os.stat(os.path.dirname(so_path)).st_mode & 0o777))
        return real(tvm_ffi, so_path)

    monkeypatch.setattr(executor, "_dlopen", spy)
    m = nnvm.runtime.load(path)
    np.testing.assert_allclose(m.run(x=x)[0], ref, rtol=1e-5, atol=1e-5)
    assert executor.last_load_method == str(native)
    assert len(seen) == 1 and seen[0][0].startswith(str(native)) and seen[0][1] == 0o700
    assert list(native.iterdir()) == [], "the private directory and .so must be removed"
    del m
    gc.collect()
    assert _native_libs() == 0


def test_unloadable_library_raises_a_clear_error(tmp_path, monkeypatch):
    from nnvm_llvm.runtime import executor

    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.delattr(os, "memfd_create", raising=False)
    monkeypatch.setenv("NNVM_NATIVE_DIR", str(blocker / "native"))
    monkeypatch.setenv("NNVM_CACHE_DIR", "off")
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr("tempfile.tempdir", str(blocker / "tmp"))
    with pytest.raises(NNVMError) as err:
        executor.load_library(b"\x7fELF but not really a shared library")
    msg = str(err.value)
    assert msg.startswith("llvm runtime, loading the model's native code")
    assert "NNVM_NATIVE_DIR" in msg and str(blocker) in msg


def test_damaged_library_bytes_raise_nnvm_error_and_leave_nothing(tmp_path, monkeypatch):
    from nnvm_llvm.runtime import executor

    native = tmp_path / "native"
    monkeypatch.setenv("NNVM_NATIVE_DIR", str(native))
    monkeypatch.setenv("NNVM_CACHE_DIR", "off")
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    with pytest.raises(NNVMError, match="damaged or built for another"):
        executor.load_library(b"\x7fELF but not really a shared library")
    assert list(native.iterdir()) == [] and list((tmp_path / "tmp").iterdir()) == []


_CRASH = textwrap.dedent("""
    import os, signal, sys
    from nnvm_llvm.runtime import executor
    if sys.argv[2] == "nomemfd":
        del os.memfd_create
    def crash(tvm_ffi, path):  # the process dies in the middle of loading
        os.kill(os.getpid(), signal.SIGKILL)
    executor._dlopen = crash
    import nnvm
    nnvm.runtime.load(sys.argv[1])
""")


@pytest.mark.parametrize("mode", ["memfd", "nomemfd"])
def test_crash_while_loading_leaves_no_native_file_behind(artifact, tmp_path, mode,
                                                         monkeypatch):
    if mode == "memfd" and not hasattr(os, "memfd_create"):
        pytest.skip("os.memfd_create unavailable on this OS")
    from nnvm_llvm.runtime import executor

    path, x, ref = artifact
    tmp, native = tmp_path / "tmp", tmp_path / "native"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), NNVM_NATIVE_DIR=str(native))
    proc = subprocess.run([sys.executable, "-c", _CRASH, path, mode], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert list(tmp.iterdir()) == []
    if mode == "memfd":
        assert not native.exists() or list(native.iterdir()) == []
        return
    # a directory load cannot avoid the file, but the next load sweeps what the dead
    # process left
    (left,) = native.iterdir()
    assert [f.suffix for f in left.iterdir()] == [".so"]
    old = left.stat().st_mtime - 3600  # leftovers are swept once older than 10 minutes
    os.utime(left, (old, old))
    monkeypatch.delattr(os, "memfd_create", raising=False)
    monkeypatch.setenv("NNVM_NATIVE_DIR", str(native))
    m = nnvm.runtime.load(path)
    assert executor.last_load_method == str(native)
    np.testing.assert_allclose(m.run(x=x)[0], ref, rtol=1e-5, atol=1e-5)
    assert list(native.iterdir()) == []


def test_concurrent_loads_each_get_their_own_working_library(artifact):
    """Loads from several threads at once (memfd descriptors and unique paths race) all
    run correctly, and dropping them leaves the thread count where it was."""
    path, x, ref = artifact
    nnvm.runtime.load(path).run(x=x)  # one-time runtime threads start before the baseline
    gc.collect()
    base = _counts()
    wrong, errors = [], []

    def worker():
        try:
            for _ in range(15):
                m = nnvm.runtime.load(path)
                if not np.allclose(m.run(x=x)[0], ref, rtol=1e-5, atol=1e-5):
                    wrong.append(1)
                del m
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gc.collect()
    assert not errors, errors[:2]
    assert not wrong
    assert _counts() == base
