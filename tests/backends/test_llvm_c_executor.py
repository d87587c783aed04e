"""``lib.run()`` on llvm goes through the C executor: one C call per run (issue 19).

The executor loop of the exported C library (``deploy/nnvm_executor.h``) also serves Python
(``nnvm_llvm.runtime.c_executor``). Checked here: a plan of compiled steps is one C call and
gives the same bits as the per-kernel Python loop; host steps split the run into C stretches
around them; a failing kernel's own message reaches Python with the step named; the
``NNVM_LLVM_EXECUTOR`` switch, the no-compiler fallback and the executor's disk cache
(verified, and never read from another user's folder), in fresh processes; and changed
params are rebound although a run no longer compares every one of them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import nnvm
import nnvm.symbol as sym
from nnvm.backend import get_backend
from nnvm.testing import models

REASON = get_backend("llvm", require_available=False).compiler_available()
pytestmark = pytest.mark.skipif(REASON is not None, reason=str(REASON))


def _small_cnn(executor: str, monkeypatch):
    monkeypatch.setenv("NNVM_LLVM_EXECUTOR", executor)
    net, params, shapes = models.MODELS["small_cnn"]()
    lib = nnvm.compiler.build(net, target="llvm", shape=shapes, params=params)
    rng = np.random.default_rng(5)
    return lib, {k: rng.standard_normal(s).astype("float32") for k, s in shapes.items()}


def test_run_is_one_c_call_and_equals_the_python_loop(monkeypatch):
    from nnvm_llvm.runtime import c_executor

    if c_executor.compiler() is None and c_executor.library() is None:
        pytest.skip(f"no C executor here: {c_executor.reason()}")
    lib, feed = _small_cnn("c", monkeypatch)
    loop, _ = _small_cnn("python", monkeypatch)
    assert lib.stats()["executor"] == "c"
    assert loop.stats()["executor"] == "python (NNVM_LLVM_EXECUTOR=python)"
    assert len(lib._runs) == 1 and lib.stats()["num_kernels"] > 1  # every kernel, one call
    for _ in range(3):  # repeated runs reuse the same buffers
        for a, b in zip(lib.run(**feed), loop.run(**feed)):
            assert a.tobytes() == b.tobytes()
    # profiling still times every kernel through the Python loop
    assert len(lib.profile(repeat=2, warmup=0)) == lib.stats()["num_kernels"]
    assert lib.benchmark(repeat=3, warmup=1) > 0


def test_host_step_splits_the_run_around_it():
    """``det`` has no llvm rule and runs in NumPy between two compiled stretches."""
    x = sym.Variable("x")
    y = sym.exp(sym.det(sym.relu(x) * 0.5) * 0.1)
    shape = {"x": (4, 3, 3)}
    lib = nnvm.compiler.build(y, target="llvm", shape=shape)
    ref = nnvm.compiler.build(y, target="reference", shape=shape)
    if lib.stats()["executor"] != "c":
        pytest.skip(lib.stats()["executor"])
    assert lib.stats()["fallback_ops"] == ["det"]
    kinds = ["host" if run[2] < 0 else "c" for run in lib._runs]
    assert kinds == ["c", "host", "c"], kinds
    xv = np.random.default_rng(2).standard_normal(shape["x"]).astype("float32")
    np.testing.assert_allclose(lib.run(x=xv)[0], ref.run(x=xv)[0], rtol=1e-5, atol=1e-6)


def test_a_failing_kernel_reports_its_message_and_step():
    """The kernel's own shape check fails (a tensor of the wrong shape is bound): the TVM
    error travels through the C executor as a Python exception, the step is recorded."""
    from nnvm_llvm.runtime import c_executor

    x = sym.Variable("x")
    lib = nnvm.compiler.build(sym.relu(x), target="llvm", shape={"x": (8, 4)})
    exe = c_executor.library()
    if exe is None:
        pytest.skip(f"no C executor here: {c_executor.reason()}")
    step = lib._plan["steps"][0]
    fn = lib._lib[step["func"]]
    wrong = [np.zeros((3, 5), "float32") for _ in step["args"]]
    cx = c_executor.CExecutor(exe, wrong, [fn], [(0, list(range(len(wrong))))])
    with pytest.raises(Exception, match=r"(?i)shape|mismatch|expect") as info:
        cx.run(cx.handle, 0, 1)
    assert not isinstance(info.value, nnvm.NNVMError)  # the kernel's error, not ours
    assert cx.failed_step() == 0
    with pytest.raises(Exception, match=r"(?i)shape|mismatch|expect"):  # timed runs too
        cx.time(cx.handle, 0, 1, 5)
    right = [lib._arrays[a["entry"]] for a in step["args"]]
    ok = c_executor.CExecutor(exe, right, [fn], [(0, list(range(len(right))))])
    ok.run(ok.handle, 0, 1)
    assert ok.failed_step() == -1
    assert ok.time(ok.handle, 0, 1, 5) > 0
    with pytest.raises(Exception, match="repeat < 1"):
        ok.time(ok.handle, 0, 1, 0)


def test_benchmark_times_the_steps_in_c(monkeypatch):
    """A plan of compiled steps is timed inside the C executor: ``benchmark`` goes through
    ``nnvm_exec_time`` (counted here by wrapping it) for the runs it asks for in all, and
    the host-step split and the Python loop keep the per-run Python clock."""
    lib, _ = _small_cnn("c", monkeypatch)
    calls = []
    timed = lib._c.time

    def counting(handle, lo, hi, repeat):
        calls.append(repeat)
        return timed(handle, lo, hi, repeat)
    lib._c.time = counting
    assert lib.benchmark(repeat=40, warmup=1) > 0
    assert calls[0] == 1 and sum(calls[1:]) <= 40 and len(calls) >= 2
    loop, _ = _small_cnn("python", monkeypatch)
    assert loop._c is None and loop.benchmark(repeat=3, warmup=1) > 0


_MODES = textwrap.dedent("""
    import json, os, sys
    import numpy as np, nnvm
    out = {}
    for mode in ("auto", "python", "c", "bogus"):
        os.environ["NNVM_LLVM_EXECUTOR"] = mode
        try:
            lib = nnvm.runtime.load(sys.argv[1])
            v = np.arange(16, dtype="float32").reshape(2, 8) - 8
            assert np.array_equal(lib.run(x=v)[0], np.maximum(v, 0) * 2)
            out[mode] = lib.stats()["executor"]
        except nnvm.NNVMError as exc:
            out[mode] = "error: " + type(exc).__name__ + ": " + str(exc)
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    """A small llvm artifact; the processes below only load it (as a deployment would)."""
    x = sym.Variable("x")
    path = str(tmp_path_factory.mktemp("cexec") / "relu.nnvm")
    nnvm.compiler.build(sym.relu(x) * 2.0, target="llvm", shape={"x": (2, 8)}).export(path)
    return path


def _modes(artifact: str, env_extra: dict) -> dict:
    env = dict(os.environ, **env_extra)
    proc = subprocess.run([sys.executable, "-c", _MODES, artifact], capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_without_a_compiler_the_python_loop_runs_and_says_why(artifact, tmp_path):
    """No C compiler and nothing cached (a runtime-only machine): the Python loop runs,
    ``stats()["executor"]`` says why, and ``NNVM_LLVM_EXECUTOR=c`` makes it an error."""
    out = _modes(artifact, {"CC": str(tmp_path / "no-such-cc"), "NNVM_CACHE_DIR": "off"})
    assert out["auto"].startswith("python (") and "no-such-cc" in out["auto"], out
    assert out["python"] == "python (NNVM_LLVM_EXECUTOR=python)"
    assert out["c"].startswith("error: ExecutionError") and "unavailable" in out["c"], out
    assert out["bogus"].startswith("error: NNVMError") and "auto|c|python" in out["bogus"]


def test_the_executor_is_compiled_once_into_the_cache(artifact, tmp_path):
    """First process compiles and stores it (0700 folder, verified entry); a second process
    with no compiler at all still gets the C executor from the cache."""
    from nnvm_llvm.runtime import c_executor

    if c_executor.compiler() is None:
        pytest.skip("no C compiler (cc) on PATH")
    cache = tmp_path / "cache"
    assert _modes(artifact, {"NNVM_CACHE_DIR": str(cache)})["auto"] == "c"
    (entry,) = (cache / "runtime").glob("c-executor-*.entry")
    assert (cache / "runtime").stat().st_mode & 0o777 == 0o700
    assert _modes(artifact, {"NNVM_CACHE_DIR": str(cache), "CC": str(tmp_path / "no-cc")}
                  )["c"] == "c"
    entry.write_bytes(entry.read_bytes()[:100])  # damaged: recompiled, never loaded
    assert _modes(artifact, {"NNVM_CACHE_DIR": str(cache)})["auto"] == "c"
    assert entry.stat().st_size > 100


def test_changed_params_are_rebound_on_the_next_run():
    """``run`` checks one version number instead of every param: an item assigned, a
    ``set_input`` of a weight and a replaced dict each take effect on the next run."""
    rng = np.random.default_rng(4)
    x = sym.Variable("x")
    p = {"fc_weight": rng.standard_normal((4, 8)).astype("float32"),
         "fc_bias": np.zeros(4, "float32")}
    lib = nnvm.compiler.build(sym.dense(x, units=4, name="fc"), target="llvm",
                              shape={"x": (2, 8)}, params=p)
    xv = rng.standard_normal((2, 8)).astype("float32")
    base = lib.run(x=xv)[0]
    np.testing.assert_allclose(base, xv @ p["fc_weight"].T, rtol=1e-5, atol=1e-5)
    lib.params["fc_bias"] = np.ones(4, "float32")
    np.testing.assert_allclose(lib.run(x=xv)[0], base + 1, rtol=1e-5, atol=1e-5)
    lib.set_input(fc_bias=np.full(4, 2, "float32"))
    np.testing.assert_allclose(lib.run(x=xv)[0], base + 2, rtol=1e-5, atol=1e-5)
    lib.params = {**lib.params, "fc_bias": np.full(4, 3, "float32")}
    np.testing.assert_allclose(lib.run(x=xv)[0], base + 3, rtol=1e-5, atol=1e-5)
    lib.params.update(fc_weight=2 * p["fc_weight"])
    np.testing.assert_allclose(lib.run(x=xv)[0], 2 * base + 3, rtol=1e-5, atol=1e-5)


def test_a_param_fed_to_run_does_not_hide_a_later_set_input():
    """An overridable default (graph attr ``input_defaults``: compiled as an input, held as
    a param) fed to ``run`` as an exact array, then rebound with ``set_input``: the rebound
    value is used. The fast path used to keep the fed array, which won over the param."""
    from nnvm.ir import Graph

    rng = np.random.default_rng(6)
    x = sym.Variable("x")
    w = rng.standard_normal((4, 8)).astype("float32")
    graph = Graph(sym.dense(x, units=4, use_bias=False, name="fc").outputs)
    lib = nnvm.compiler.build(graph.with_attrs(input_defaults=["fc_weight"]), target="llvm",
                              shape={"x": (2, 8)}, params={"fc_weight": w})
    assert lib.input_names == ["x"] and "fc_weight" in lib.params
    xv = rng.standard_normal((2, 8)).astype("float32")
    np.testing.assert_allclose(lib.run(x=xv)[0], xv @ w.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(lib.run(x=xv, fc_weight=2 * w)[0], 2 * xv @ w.T,
                               rtol=1e-5, atol=1e-5)
    lib.set_input(fc_weight=3 * w)
    np.testing.assert_allclose(lib.run(x=xv)[0], 3 * xv @ w.T, rtol=1e-5, atol=1e-5)
    lib.run(x=xv, fc_weight=2 * w)
    lib.params["fc_weight"] = w  # the params dict is the other way to rebind
    np.testing.assert_allclose(lib.run(x=xv)[0], xv @ w.T, rtol=1e-5, atol=1e-5)


def test_an_entry_in_a_folder_of_another_user_is_never_loaded(artifact, tmp_path):
    """Whoever can write the cached executor chooses the code ``run`` executes: a
    ``runtime/`` folder owned by another user is not read (the executor is compiled
    afresh), even when its entry is well-formed."""
    from nnvm_llvm.compiler import cache as kcache
    from nnvm_llvm.runtime import c_executor

    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("needs root to hand a folder to another user")
    if c_executor.compiler() is None:
        pytest.skip("no C compiler (cc) on PATH")
    cache = tmp_path / "cache"
    assert _modes(artifact, {"NNVM_CACHE_DIR": str(cache)})["auto"] == "c"
    (entry,) = (cache / "runtime").glob("c-executor-*.entry")
    marker, evil_c = tmp_path / "marker", tmp_path / "evil.c"
    evil_c.write_text('#include <stdio.h>\n__attribute__((constructor)) static void evil(void)'
                      f' {{ FILE *f = fopen("{marker}", "w"); if (f) fclose(f); }}\n')
    subprocess.run([c_executor.compiler(), "-shared", "-fPIC", "-o", str(tmp_path / "evil.so"),
                    str(evil_c)], check=True)
    key = entry.name[:-len(kcache.ENTRY_SUFFIX)]
    entry.write_bytes(kcache.encode_entry(key, (tmp_path / "evil.so").read_bytes()))
    os.chown(cache / "runtime", 65534, 65534)
    assert _modes(artifact, {"NNVM_CACHE_DIR": str(cache)})["auto"] == "c"
    assert not marker.exists()
