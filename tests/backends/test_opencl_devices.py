"""Device availability tells the truth: a device is usable only when the probe kernel builds
and runs on it, and a driver that cannot compile is reported as such, never as a code
generator bug.

The failing driver is real, not a mock: PoCL with ``POCL_EXTRA_BUILD_FLAGS=-cl-std=CL9.9``
rejects every build, as PoCL does on CPUs newer than its LLVM ("unknown target CPU
'generic'"). Each scenario runs in a fresh process with a fresh cache, since the ICD loader
and PoCL read their environment once per process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("pyopencl")

BROKEN_POCL = {"POCL_EXTRA_BUILD_FLAGS": "-cl-std=CL9.9", "POCL_KERNEL_CACHE": "0"}


def _run(tmp_path, code: str, **env) -> dict:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("NNVM_", "POCL_"))
            and k not in ("OCL_ICD_VENDORS",)}
    full.update(NNVM_CACHE_DIR=str(tmp_path / "cache"), **env)
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


STATE = """
    import json
    import nnvm
    from nnvm.backend import get_backend, best_target
    from nnvm_opencl import device as devices
    info = {p.name: p for p in nnvm.plugins()}["opencl"]
    found = [devices.name(p) for p in devices.devices()]
    print(json.dumps({"available": info.available, "reason": info.reason,
                      "summary": info.summary, "found": found,
                      "usable": [devices.name(p) for p in devices.usable()],
                      "best": best_target()}))
"""


def _pocl_names(state) -> list[str]:
    return [n for n in state["found"] if n.startswith("Portable Computing Language")]


def test_a_driver_that_cannot_compile_is_not_available(tmp_path):
    """Only PoCL visible (wheel drivers off) and PoCL unable to compile: opencl is reported
    unavailable, with the probe's reason and the fix, and is never the best target."""
    state = _run(tmp_path, STATE, NNVM_OPENCL_NO_WHEEL_DRIVERS="1", **BROKEN_POCL)
    if not _pocl_names(state):
        pytest.skip(f"no PoCL device listed here: {state['found']}")
    assert not state["available"], state
    assert state["usable"] == []
    assert "cannot compile a probe kernel" in state["reason"]
    assert "nnvm-backend-opencl[intel]" in state["reason"]
    assert state["best"] != "opencl"


def test_a_working_driver_is_chosen_over_a_broken_one(tmp_path):
    """With Intel's CPU runtime installed from PyPI it is registered without /etc or variables,
    and it is the default; the broken PoCL is listed as unusable with its reason."""
    from nnvm_opencl.drivers import intel_cpu_runtime

    if intel_cpu_runtime() is None:
        pytest.skip("Intel's CPU OpenCL runtime is not installed (nnvm-backend-opencl[intel])")
    state = _run(tmp_path, STATE, **BROKEN_POCL)
    intel = [n for n in state["found"] if n.startswith("Intel")]
    assert intel, state["found"]
    assert state["available"], state
    assert state["usable"][0] == intel[0]
    assert f"{intel[0]} [default]" in state["summary"]
    for name in _pocl_names(state):
        assert name not in state["usable"]
        assert f"{name} [unusable: cannot compile a probe kernel" in state["summary"]


def test_naming_a_broken_device_says_why(tmp_path):
    state = _run(tmp_path, """
        import json
        import nnvm
        from nnvm import sym
        from nnvm.errors import BackendUnavailableError
        from nnvm_opencl import device as devices
        if not any("Portable" in devices.name(p) for p in devices.devices()):
            print(json.dumps({"skip": True})); raise SystemExit
        try:
            nnvm.compiler.build(sym.relu(sym.Variable("x")), target="opencl -platform=portable",
                                shape={"x": (4,)})
            print(json.dumps({"error": None}))
        except BackendUnavailableError as exc:
            print(json.dumps({"error": str(exc)}))
    """, **BROKEN_POCL)
    if state.get("skip"):
        pytest.skip("no PoCL device listed here")
    assert state["error"] and "no matching device among the usable ones" in state["error"]
    assert "cannot compile a probe kernel" in state["error"]


def test_driver_failure_is_not_blamed_on_the_code_generator(tmp_path):
    """A program build that fails because the driver compiles nothing raises
    DriverCannotCompileError (not 'a code generator bug'), even when the cached probe
    verdict said the device worked."""
    state = _run(tmp_path, """
        import json
        from nnvm_opencl import device as devices, program
        pocl = [p for p in devices.devices() if "Portable" in devices.name(p)]
        if not pocl:
            print(json.dumps({"skip": True})); raise SystemExit
        _, dev = pocl[0]
        try:
            program._build_source(devices.context(dev), dev,
                                  "__kernel void k(__global float *a) { a[0] = 1.0f; }",
                                  program.BUILD_OPTIONS)
            print(json.dumps({"error": None}))
        except program.KernelBuildError as exc:
            print(json.dumps({"error": str(exc), "type": type(exc).__name__}))
    """, **BROKEN_POCL)
    if state.get("skip"):
        pytest.skip("no PoCL device listed here")
    assert state["type"] == "DriverCannotCompileError", state
    assert "not a code generator bug" in state["error"]
    assert "nnvm-backend-opencl[intel]" in state["error"]


def test_probe_verdicts_are_cached_per_device(tmp_path):
    """The second process reads the verdicts from disk instead of building the probe."""
    code = STATE
    first = _run(tmp_path, code)
    probes = sorted(os.listdir(tmp_path / "cache" / "opencl" / "probe"))
    assert len(probes) == len(first["found"]) >= 1
    second = _run(tmp_path, code)
    assert second["usable"] == first["usable"]
    assert sorted(os.listdir(tmp_path / "cache" / "opencl" / "probe")) == probes


def test_device_choice_by_environment_variable(tmp_path):
    state = _run(tmp_path, """
        import json
        from nnvm_opencl import device as devices
        ok = devices.usable()
        print(json.dumps({"usable": [devices.name(p) for p in ok],
                          "chosen": devices.name(devices.select())}))
    """)
    if len(state["usable"]) < 2:
        pytest.skip(f"needs two usable OpenCL devices; usable here: {state['usable']}")
    last = state["usable"][-1]
    chosen = _run(tmp_path, """
        import json
        from nnvm_opencl import device as devices
        print(json.dumps({"chosen": devices.name(devices.select())}))
    """, NNVM_OPENCL_DEVICE=last.split(" / ")[0])
    assert chosen["chosen"] == last
    assert state["chosen"] == state["usable"][0]
