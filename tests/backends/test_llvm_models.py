"""The llvm target end to end: an MLP and a small CNN against the reference interpreter,
export/load, tampering, threads, the kernel cache, and a deployment without apache-tvm."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest

import nnvm
import nnvm.symbol as sym
from nnvm.backend import get_backend
from nnvm.errors import SerializationError

REASON = get_backend("llvm", require_available=False).compiler_available()
pytestmark = pytest.mark.skipif(REASON is not None, reason=str(REASON))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _mlp(rng):
    x = sym.Variable("x")
    y = sym.relu(sym.dense(x, units=64, name="fc1"))
    y = sym.tanh(sym.dense(y, units=48, name="fc2"))
    y = sym.softmax(sym.dense(y, units=10, name="fc3"))
    shapes = {"fc1": (64, 32), "fc2": (48, 64), "fc3": (10, 48)}
    params = {}
    for name, (n, k) in shapes.items():
        params[f"{name}_weight"] = (rng.standard_normal((n, k)) / np.sqrt(k)).astype("float32")
        params[f"{name}_bias"] = rng.standard_normal(n).astype("float32")
    return y, params, {"x": (8, 32)}


def _cnn(rng):
    x = sym.Variable("x")
    y = sym.relu(sym.conv2d(x, channels=16, kernel_size=(3, 3), padding=(1, 1), name="c1"))
    y = sym.max_pool2d(y, pool_size=(2, 2), strides=(2, 2))
    r = sym.relu(sym.conv2d(y, channels=16, kernel_size=(3, 3), padding=(1, 1), name="c2"))
    y = sym.relu(sym.conv2d(r, channels=16, kernel_size=(3, 3), padding=(1, 1), groups=16,
                            use_bias=False, name="dw")) + y
    y = sym.flatten(sym.global_avg_pool2d(y))
    y = sym.softmax(sym.dense(y, units=10, name="fc"))
    params = {"c1_weight": (1, (16, 3, 3, 3)), "c1_bias": (0.1, (16,)),
              "c2_weight": (1, (16, 16, 3, 3)), "c2_bias": (0.1, (16,)),
              "dw_weight": (1, (16, 1, 3, 3)), "fc_weight": (1, (10, 16)),
              "fc_bias": (0.1, (10,))}
    params = {k: (rng.standard_normal(s) * sc / np.sqrt(np.prod(s[1:]) or 1)).astype("float32")
              for k, (sc, s) in params.items()}
    return y, params, {"x": (2, 3, 16, 16)}


@pytest.fixture(params=["mlp", "cnn"])
def model(request, rng):
    return request.param, *(_mlp if request.param == "mlp" else _cnn)(rng)


@pytest.mark.parametrize("opt_level", [0, 3])
def test_model_matches_reference(model, opt_level, rng):
    name, y, params, shape = model
    lib = nnvm.compiler.build(y, target="llvm", shape=shape, params=params, opt_level=opt_level)
    ref = nnvm.compiler.build(y, target="reference", shape=shape, params=params,
                              opt_level=opt_level)
    x = rng.standard_normal(shape["x"]).astype("float32")
    np.testing.assert_allclose(lib.run(x=x)[0], ref.run(x=x)[0], rtol=1e-4, atol=1e-5)
    s = lib.stats()
    assert s["num_fallback_kernels"] == 0 and s["schedule_fallbacks"] == []
    if opt_level >= 1 and "group_root" in lib.graph.attrs:  # fused: fewer kernels than ops
        assert s["num_kernels"] < s["num_nodes"]
    assert s["executor_bytes"] <= s["activation_bytes_naive"]


def test_rebinding_a_weight_repacks_it(rng):
    y, params, shape = _mlp(rng)
    lib = nnvm.compiler.build(y, target="llvm", shape=shape, params=params)
    ref = nnvm.compiler.build(y, target="reference", shape=shape, params=params)
    x = rng.standard_normal(shape["x"]).astype("float32")
    w = rng.standard_normal((64, 32)).astype("float32")
    lib.set_input(fc1_weight=w)
    ref.set_input(fc1_weight=w)
    np.testing.assert_allclose(lib.run(x=x)[0], ref.run(x=x)[0], rtol=1e-4, atol=1e-5)


def test_threads_are_settable_and_results_stable(rng):
    y, params, shape = _cnn(rng)
    lib = nnvm.compiler.build(y, target="llvm -num-threads=1",
                              shape=shape, params=params)
    assert lib.stats()["num_threads"] == 1
    x = rng.standard_normal(shape["x"]).astype("float32")
    one = lib.run(x=x)[0]
    assert lib.set_num_threads(2) == 2
    np.testing.assert_allclose(lib.run(x=x)[0], one, rtol=1e-6, atol=1e-7)


def test_bad_target_option_is_rejected():
    with pytest.raises(nnvm.errors.NNVMError, match="Valid options"):
        nnvm.compiler.build(sym.relu(sym.Variable("x")), target="llvm -bogus=1",
                            shape={"x": (2,)})


def test_identical_groups_compile_once_and_rebuild_hits_cache(rng, tmp_path, monkeypatch):
    monkeypatch.setenv("NNVM_CACHE_DIR", str(tmp_path))
    from nnvm_llvm.compiler import cache

    cache.clear_memory()
    x = sym.Variable("x")
    y = x
    for i in range(3):  # three identical dense+relu layers -> one function
        y = sym.relu(sym.dense(y, units=16, name=f"fc{i}"))
    params = {}
    for i in range(3):
        params[f"fc{i}_weight"] = rng.standard_normal((16, 16)).astype("float32")
        params[f"fc{i}_bias"] = rng.standard_normal(16).astype("float32")
    lib = nnvm.compiler.build(y, target="llvm", shape={"x": (4, 16)}, params=params)
    s = lib.stats()
    assert s["num_kernels"] == 3 and s["num_compiled_kernels"] == 1
    assert not s["lib_cache_hit"]
    assert os.listdir(tmp_path / "libs") and not (tmp_path / "kernels").exists()
    cache.clear_memory()  # a new process: only the disk cache is left
    again = nnvm.compiler.build(y, target="llvm", shape={"x": (4, 16)}, params=params)
    assert again.stats()["lib_cache_hit"]
    xv = rng.standard_normal((4, 16)).astype("float32")
    np.testing.assert_array_equal(lib.run(x=xv)[0], again.run(x=xv)[0])


def test_export_load_roundtrip(model, tmp_path, rng):
    name, y, params, shape = model
    lib = nnvm.compiler.build(y, target="llvm", shape=shape, params=params, opt_level=3)
    path = str(tmp_path / f"{name}.nnvm")
    lib.export(path)
    with zipfile.ZipFile(path) as zf:
        assert {"lib.so", "executor.json", "graph.json", "params.bin"} <= set(zf.namelist())
    loaded = nnvm.runtime.load(path)
    x = rng.standard_normal(shape["x"]).astype("float32")
    np.testing.assert_array_equal(loaded.run(x=x)[0], lib.run(x=x)[0])


def test_tampered_library_is_refused(tmp_path, rng):
    y, params, shape = _mlp(rng)
    path = str(tmp_path / "m.nnvm")
    nnvm.compiler.build(y, target="llvm", shape=shape, params=params).export(path)
    bad = str(tmp_path / "bad.nnvm")
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(bad, "w") as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename == "lib.so":
                data = data[:-16] + bytes(16)  # patch the native code
            dst.writestr(info, data)
    with pytest.raises(SerializationError, match="lib.so"):
        nnvm.runtime.load(bad)


DEPLOY = textwrap.dedent("""
    import sys, numpy as np, nnvm
    mod = nnvm.runtime.load(sys.argv[1])
    assert "tvm" not in sys.modules, "the runtime imported apache-tvm"
    out = mod.run(x=np.load(sys.argv[2]))[0]
    assert "tvm" not in sys.modules
    np.save(sys.argv[3], out)
    print("llvm" in [p.name for p in nnvm.plugins() if p.available])
""")


@pytest.mark.slow
def test_deploy_without_apache_tvm(tmp_path, rng):
    """A fresh venv that sees nothing of this interpreter's site-packages gets nnvm-core and
    nnvm-backend-llvm (no [compiler] extra) from pip, their dependencies (numpy, pluggy,
    apache-tvm-ffi) from the package index, and loads and runs a model exported here;
    apache-tvm is not installed there. Hermetic on purpose: a venv with
    --system-site-packages passed only where someone had installed apache-tvm-ffi by hand."""
    y, params, shape = _cnn(rng)
    lib = nnvm.compiler.build(y, target="llvm", shape=shape, params=params, opt_level=3)
    art, xin, out = tmp_path / "m.nnvm", tmp_path / "x.npy", tmp_path / "y.npy"
    lib.export(str(art))
    x = rng.standard_normal(shape["x"]).astype("float32")
    np.save(xin, x)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") and not k.startswith("NNVM_")}
    pip = subprocess.run([py, "-m", "pip", "install", "-q",
                          os.path.join(ROOT, "packages", "nnvm-core"),
                          os.path.join(ROOT, "packages", "nnvm-backend-llvm")],
                         capture_output=True, text=True, env=env, timeout=900)
    if pip.returncode != 0 and "No matching distribution found" in pip.stderr:
        pytest.skip(f"no package index reachable for the venv's dependencies: "
                    f"{pip.stderr.strip().splitlines()[-1]}")
    assert pip.returncode == 0, pip.stdout + pip.stderr
    check = subprocess.run([py, "-c", "import tvm"], capture_output=True, text=True, env=env)
    assert check.returncode != 0 and "No module named 'tvm'" in check.stderr
    env.update(NNVM_DISABLE_PLUGIN_AUTOLOAD="1", NNVM_PLUGINS="llvm",
               NNVM_CACHE_DIR=str(tmp_path / "cache"))
    res = subprocess.run([py, "-c", DEPLOY, str(art), str(xin), str(out)], env=env,
                         capture_output=True, text=True, cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip() == "True"
    np.testing.assert_allclose(np.load(out), lib.run(x=x)[0], rtol=1e-6, atol=1e-7)
