"""``NNVM_CACHE_DIR=off`` disables the disk caches of the llvm, CUDA and OpenCL backends and
writes nothing to the current directory (the shared rule, ``nnvm.cache_dirs``).

The bug this guards: the OpenCL and CUDA backends read the variable as a path, so a run with
``NNVM_CACHE_DIR=off`` left ``./off/opencl/`` and ``./off/pocl/`` behind. Each test runs with
the current directory and HOME empty folders and checks they stay empty, and that the
uncached path was the one taken (a second identical build compiles again instead of hitting
a cache). The OpenCL build runs in a fresh process (the ICD loader, PoCL and pyopencl read
their environment once per process) and only where a driver is usable; the CUDA build needs
nvcc or NVRTC, not a GPU.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap

import pytest

from cache_env import DRIVER_VARS, files, unset
from nnvm import cache_dirs




# -- llvm -------------------------------------------------------------------------------------

def test_llvm_cache_folder_follows_the_shared_rule(monkeypatch, tmp_path):
    """The llvm backend uses ``NNVM_CACHE_DIR`` itself (not ``llvm/`` inside it), default
    ``~/.cache/nnvm/llvm``, none under ``off``; the native-load fallback folders follow."""
    from nnvm_llvm.compiler import cache
    from nnvm_llvm.runtime import executor

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("NNVM_CACHE_DIR", raising=False)
    monkeypatch.delenv("NNVM_NATIVE_DIR", raising=False)
    assert cache.configured_dir() == os.path.join(cache_dirs.default_root(), "llvm")
    assert os.path.join(cache_dirs.default_root(), "llvm", "native") in \
        executor._candidate_dirs()
    monkeypatch.setenv("NNVM_CACHE_DIR", str(tmp_path / "c"))
    assert cache.configured_dir() == str(tmp_path / "c")
    assert str(tmp_path / "c" / "native") in executor._candidate_dirs()
    for value in ("off", "FALSE", " none "):
        monkeypatch.setenv("NNVM_CACHE_DIR", value)
        assert cache.configured_dir() is None and cache.cache_dir() is None
        assert not any(d.endswith("native") for d in executor._candidate_dirs())


# -- CUDA -------------------------------------------------------------------------------------

def test_cuda_cache_folder_follows_the_shared_rule(monkeypatch, tmp_path):
    from nnvm_cuda import toolchain

    monkeypatch.setenv("NNVM_CACHE_DIR", str(tmp_path))
    assert toolchain.cache_dir() == str(tmp_path / "cuda")
    monkeypatch.setenv("NNVM_CACHE_DIR", "off")
    assert toolchain.cache_dir() is None


def test_cuda_compiles_without_its_ptx_cache_when_off(cache_off):
    from nnvm_cuda import toolchain

    if toolchain.compiler_reason() is not None:
        pytest.skip(str(toolchain.compiler_reason()))
    source = 'extern "C" __global__ void nnvm_k(float *a) { a[0] = 1.0f; }\n'
    for _ in range(2):  # a cache would make the second compile a hit
        ptx, report = toolchain.compile_ptx(source, [toolchain.DEFAULT_ARCH])
        assert ".entry nnvm_k" in ptx[toolchain.DEFAULT_ARCH]
        assert (report["compiled"], report["cache_hits"]) == (1, 0), report
    work, home = cache_off
    assert files(work) == [] and files(home) == []


# -- OpenCL, without a driver -----------------------------------------------------------------

def test_opencl_driver_caches_off(monkeypatch, tmp_path):
    """Off: PoCL's and pyopencl's persistent caches off, no POCL_CACHE_DIR; on: PoCL's cache
    under the NNVM cache root; a variable the user set is never overridden."""
    from nnvm_opencl import program

    for name in DRIVER_VARS:
        unset(monkeypatch, name)
    monkeypatch.setenv("NNVM_CACHE_DIR", "off")
    assert program.cache_dir() is None
    program.configure_driver_caches()
    assert "POCL_CACHE_DIR" not in os.environ
    assert os.environ["POCL_KERNEL_CACHE"] == "0" and os.environ["PYOPENCL_NO_CACHE"] == "1"

    for name in DRIVER_VARS:
        unset(monkeypatch, name)
    monkeypatch.setenv("POCL_KERNEL_CACHE", "1")
    program.configure_driver_caches()
    assert os.environ["POCL_KERNEL_CACHE"] == "1"  # the user's choice

    for name in DRIVER_VARS:
        unset(monkeypatch, name)
    monkeypatch.setenv("NNVM_CACHE_DIR", str(tmp_path))
    assert program.cache_dir() == str(tmp_path / "opencl")
    program.configure_driver_caches()
    assert os.environ["POCL_CACHE_DIR"] == str(tmp_path / "pocl")
    assert "POCL_KERNEL_CACHE" not in os.environ and "PYOPENCL_NO_CACHE" not in os.environ


def test_opencl_icd_folder_is_a_private_temp_folder_when_off(cache_off, monkeypatch, tmp_path):
    import tempfile

    from nnvm_opencl import drivers

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    icds = {"nnvm-x.icd": "/opt/x/libx.so"}
    folder = drivers._write_folder(icds, "d1")
    assert folder == str(tmp / f"nnvm-icd-{os.getuid()}" / "d1")
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    with open(os.path.join(folder, "nnvm-x.icd"), encoding="utf-8") as f:
        assert f.read() == "/opt/x/libx.so\n"
    work, home = cache_off
    assert files(work) == [] and files(home) == []

    # a shared folder others can write is not used: a fresh private one is
    squat = tmp / f"nnvm-icd-{os.getuid()}"
    os.chmod(squat, 0o777)
    other = drivers._write_folder(icds, "d2")
    assert other is not None and not other.startswith(str(squat))
    assert os.path.dirname(other) == str(tmp) and os.path.basename(other).startswith("nnvm-icd-")
    assert stat.S_IMODE(os.stat(other).st_mode) == 0o700
    assert os.listdir(other) == ["nnvm-x.icd"]


# -- OpenCL, on every usable driver -----------------------------------------------------------

BUILD_ALL = """
    import json, os
    import numpy as np
    import nnvm
    from nnvm import sym
    from nnvm_opencl import device as devices, program
    x = np.linspace(-2, 2, 16).astype("float32")
    src = "__kernel void nnvm_k(__global float *a) { a[get_global_id(0)] *= 2.0f; }"
    out = {"cache_dir": program.cache_dir(), "devices": {}}
    for p, d in devices.usable():
        name = devices.name((p, d))
        target = f"opencl -platform={p.name.split()[0].split('(')[0]}"  # Intel, Portable
        m = nnvm.compiler.build(sym.relu(sym.Variable("x")) * 3.0, target=target,
                                shape={"x": (16,)})
        ok = bool(np.allclose(m.run(x=x)[0], np.maximum(x, 0) * 3.0))
        hits = [program.build_program(devices.context(d), d, src)[1] for _ in range(2)]
        out["devices"][name] = {"ok": ok, "from_cache": hits,
                                "probe_path": devices._probe_cache_path(d)}
    out["icd"] = os.environ.get("OCL_ICD_VENDORS")
    out["env"] = {k: os.environ.get(k) for k in
                  ("POCL_CACHE_DIR", "POCL_KERNEL_CACHE", "PYOPENCL_NO_CACHE")}
    print(json.dumps(out))
"""


def test_opencl_builds_and_runs_with_the_cache_off(tmp_path):
    pytest.importorskip("pyopencl")
    work, home, tmp = tmp_path / "work", tmp_path / "home", tmp_path / "tmp"
    for d in (work, home, tmp):
        d.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NNVM_", "POCL_", "PYOPENCL_")) and k != "OCL_ICD_VENDORS"}
    env.update(NNVM_CACHE_DIR="off", HOME=str(home), TMPDIR=str(tmp))
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(BUILD_ALL)], env=env,
                         cwd=work, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    if not got["devices"]:
        pytest.skip("no usable OpenCL device here")
    assert got["cache_dir"] is None
    assert got["env"] == {"POCL_CACHE_DIR": None, "POCL_KERNEL_CACHE": "0",
                          "PYOPENCL_NO_CACHE": "1"}
    for name, dev in got["devices"].items():
        assert dev["ok"], name
        assert dev["probe_path"] is None, name
        pocl = name.startswith("Portable Computing Language")
        # PoCL: never cached by us (None); other drivers: compiled twice, never read back
        assert dev["from_cache"] == ([None, None] if pocl else [False, False]), (name, dev)
    assert files(work) == [], "NNVM_CACHE_DIR=off wrote to the current directory"
    # nothing persistent under HOME: no NNVM, pyopencl or PoCL kernel cache (PoCL's
    # uncached build folder ~/.cache/pocl/uncached is its temporary workspace)
    left = [f for f in files(home) if not f.startswith(os.path.join(".cache", "pocl",
                                                                     "uncached"))]
    assert left == [], left
    if got["icd"]:  # the ICD folder written for the wheel-installed drivers: private, in tmp
        assert got["icd"].startswith(str(tmp)), got["icd"]
        assert stat.S_IMODE(os.stat(got["icd"]).st_mode) == 0o700
