"""Thread safety of runtime modules: one module shared by many threads gives, for every call
of ``outs = module.run(x=...)``, exactly what a sequential run with the same input gives.

Each call feeds a distinct input, so an output computed from another thread's input (the
bug: a shared feed dict and a shared activation arena let one thread's input or outputs be
overwritten by another's mid-run) is caught as a wrong output. The model is tiny so that 8
threads x 500 runs take about a second per target and runs interleave at fine grain.
"""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

import nnvm
import nnvm.symbol as sym
from nnvm.backend import get_backend
from nnvm.errors import BackendUnavailableError

THREADS = 8
RUNS = 500


def _reason(target: str) -> str | None:
    try:
        backend = get_backend(target, require_available=False)
    except BackendUnavailableError as exc:
        return str(exc)
    if target == "llvm":  # building needs the compiler, not only the runtime
        return backend.compiler_available()
    return backend.is_available()


def _model():
    rng = np.random.default_rng(0)
    x = sym.Variable("x")
    y = sym.tanh(sym.dense(x, units=16, name="fc1"))
    y = sym.dense(y, units=4, name="fc2") * 2.0
    params = {"fc1_weight": rng.standard_normal((16, 8)).astype("float32"),
              "fc1_bias": rng.standard_normal(16).astype("float32"),
              "fc2_weight": rng.standard_normal((4, 16)).astype("float32"),
              "fc2_bias": rng.standard_normal(4).astype("float32")}
    return y, params, {"x": (2, 8)}


def hammer(module, inputs, expected, threads=THREADS, runs=RUNS) -> tuple[int, list]:
    """Run ``module`` from ``threads`` threads, ``runs`` calls each, every call with its own
    input; returns (number of wrong outputs, exceptions raised)."""
    wrong = [0] * threads
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def worker(t: int) -> None:
        try:
            start.wait()
            for r in range(runs):
                i = (t * runs + r) % len(inputs)
                out = module.run(x=inputs[i])[0]
                if not np.array_equal(out, expected[i]):
                    wrong[t] += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often: races show up in few runs
    try:
        for th in pool:
            th.start()
        for th in pool:
            th.join()
    finally:
        sys.setswitchinterval(interval)
    return sum(wrong), errors


@pytest.mark.parametrize("target", ["reference", "llvm", "opencl"])
def test_shared_module_concurrent_runs_match_sequential(target):
    reason = _reason(target)
    if reason is not None:
        pytest.skip(f"{target} unavailable: {reason}")
    net, params, shapes = _model()
    lib = nnvm.compiler.build(net, target=target, shape=shapes, params=params)
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(shapes["x"]).astype("float32") for _ in range(64)]
    expected = [lib.run(x=a)[0] for a in inputs]  # sequential results are the oracle
    assert len({e.tobytes() for e in expected}) == len(inputs), "inputs must give distinct outputs"
    wrong, errors = hammer(lib, inputs, expected)
    assert not errors, errors[:3]
    assert wrong == 0, f"{wrong} of {THREADS * RUNS} concurrent outputs differ from sequential"


def test_set_input_then_run_still_works_single_threaded():
    """The graph-runtime sequence stays available for one owning thread."""
    net, params, shapes = _model()
    lib = nnvm.compiler.build(net, target="reference", shape=shapes, params=params)
    a = np.ones(shapes["x"], "float32")
    lib.set_input("x", a)
    out = lib.run()[0]
    np.testing.assert_array_equal(lib.get_output(0), out)
    np.testing.assert_array_equal(out, lib.run(x=a)[0])
