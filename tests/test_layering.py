"""The architecture as tests: the import layering (import-linter), the lint gate (ruff) and what
``import nnvm``, a ``reference`` build and a loaded artifact may import (issue 15).

The contracts and the rule set live in the root pyproject.toml; each gate is also run once on a
small tree that breaks it, so a contract or rule set that can no longer fail is noticed.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import textwrap
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIG = ROOT / "pyproject.toml"
BIN = pathlib.Path(sys.executable).parent


def _tool(name: str, module: str) -> str:
    pytest.importorskip(module, reason=f"{name} is a test dependency (hatch.toml)")
    exe = BIN / name if (BIN / name).exists() else shutil.which(name)
    if exe is None:
        pytest.skip(f"{name} is not on PATH next to {sys.executable}")
    return str(exe)


def _run(cmd: list[str], cwd: pathlib.Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


def _root_packages() -> list[str]:
    return tomllib.loads(CONFIG.read_text())["tool"]["importlinter"]["root_packages"]


# -- import-linter -------------------------------------------------------------------------------

def test_import_contracts_hold():
    proc = _run([_tool("lint-imports", "importlinter"), "--no-cache", "--config", str(CONFIG)],
                ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


def test_import_contracts_catch_a_core_to_plugin_a_plugin_to_plugin_and_an_ir_upward_import(
        tmp_path):
    """The same contracts, on stand-in packages shadowing the installed ones: core importing a
    pass package, one plugin importing another and the IR importing above the registry are all
    reported (the IR's import of the registry is not)."""
    for name in _root_packages():
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / "nnvm" / "graph.py").write_text("import nnvm_passes.fuse\n")
    (tmp_path / "nnvm_passes" / "fuse.py").write_text("")
    (tmp_path / "nnvm" / "ir.py").write_text("from nnvm import op, symbol\n")
    (tmp_path / "nnvm" / "op.py").write_text("")
    (tmp_path / "nnvm" / "symbol.py").write_text("from nnvm import ir\n")
    (tmp_path / "nnvm_onnx" / "importer.py").write_text("from nnvm_llvm import backend\n")
    (tmp_path / "nnvm_llvm" / "backend.py").write_text("import nnvm\n")
    proc = _run([_tool("lint-imports", "importlinter"), "--no-cache", "--config", str(CONFIG)],
                tmp_path, PYTHONPATH=str(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "core imports no plugin package BROKEN" in proc.stdout, proc.stdout
    assert "plugins import no other plugin BROKEN" in proc.stdout, proc.stdout
    assert "nnvm.graph -> nnvm_passes.fuse" in proc.stdout
    assert "nnvm_onnx.importer -> nnvm_llvm" in proc.stdout
    assert "the IR is a leaf: nnvm.ir imports only the op registry and errors BROKEN" \
        in proc.stdout, proc.stdout
    assert "nnvm.ir -> nnvm.symbol" in proc.stdout
    assert "nnvm.ir -> nnvm.op" not in proc.stdout


def test_the_graph_facade_is_installed_by_importing_the_ir_alone(tmp_path):
    """``nnvm.ir`` imports nothing above the registry, yet a Graph made from it applies passes,
    serialises, prints and turns back into a Symbol: importing any nnvm module imports the
    package, which installs the facade (``nnvm.graph``)."""
    proc = _run([sys.executable, "-c", textwrap.dedent("""
        from nnvm.ir import Graph, make_node, make_variable

        x = make_variable("x")
        g = Graph([make_node("relu", [x[0]], name="r")[0]])
        g = g.apply(["InferShape"], shape_inputs={"x": (2, 3)})
        print(g.attrs["shape"][-1], g.symbol.list_output_names(), "relu(%x)" in g.ir(),
              '"op": "relu"' in g.json())
    """)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["(2,", "3)", "['r_output']", "True", "True"], proc.stdout


# -- ruff ----------------------------------------------------------------------------------------

def test_ruff_passes():
    proc = _run([_tool("ruff", "ruff"), "check", "--no-cache", "--config", str(CONFIG), "."],
                ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_reports_an_unused_import_and_an_undefined_name(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\n\ndef f():\n    return undefined_name\n")
    proc = _run([_tool("ruff", "ruff"), "check", "--no-cache", "--config", str(CONFIG),
                 str(bad)], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "F401" in proc.stdout and "F821" in proc.stdout


# -- what core imports ---------------------------------------------------------------------------

DEVICE_LIBRARIES = ("pyopencl", "cupy", "tvm", "tvm_ffi")
PLUGIN_PACKAGES = ("nnvm_onnx", "nnvm_passes", "nnvm_llvm", "nnvm_opencl", "nnvm_cuda",
                   "nnvm_codegen_c", "nnvm_ray", "nnvm_example", "tinyflow")

BUILD_MLP = """
    import numpy as np
    import nnvm
    from nnvm import sym

    x = sym.Variable("x")
    y = sym.softmax(sym.dense(sym.relu(sym.dense(x, units=16, name="fc1")), units=4, name="fc2"))
    rng = np.random.default_rng(0)
    params = {"fc1_weight": rng.standard_normal((16, 8)), "fc1_bias": np.zeros(16),
              "fc2_weight": rng.standard_normal((4, 16)), "fc2_bias": np.zeros(4)}
    params = {k: v.astype("float32") for k, v in params.items()}
    lib = nnvm.compiler.build(y, target="reference", shape={"x": (2, 8)}, params=params)
"""

LOADED = """
    import sys
    print(" ".join(sorted({m.split(".")[0] for m in sys.modules})))
"""


def _top_level_modules(cwd: pathlib.Path, *scripts: str) -> set[str]:
    """The top-level modules imported after running ``scripts`` (one after another, in one
    fresh interpreter)."""
    proc = _run([sys.executable, "-c", "".join(map(textwrap.dedent, scripts + (LOADED,)))], cwd)
    assert proc.returncode == 0, proc.stderr
    return set(proc.stdout.split())


def test_import_nnvm_imports_no_device_library(tmp_path):
    proc = _run([sys.executable, "-X", "importtime", "-c", "import nnvm"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0]
                for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "nnvm" in imported, proc.stderr[-2000:]
    assert not imported & set(DEVICE_LIBRARIES), sorted(imported & set(DEVICE_LIBRARIES))


def test_a_reference_build_imports_no_device_library(tmp_path):
    imported = _top_level_modules(tmp_path, BUILD_MLP)
    assert "nnvm" in imported
    assert not imported & set(DEVICE_LIBRARIES), sorted(imported & set(DEVICE_LIBRARIES))


def test_running_a_reference_artifact_imports_no_plugin_package(tmp_path):
    """The manifest names the plugins that provided the graph's ops and target (here core
    alone) and loading activates just those."""
    _top_level_modules(tmp_path, BUILD_MLP, 'lib.export("mlp.nnvm")\n')
    imported = _top_level_modules(tmp_path, """
        import numpy as np
        import nnvm

        (out,) = nnvm.runtime.load("mlp.nnvm").run(x=np.ones((2, 8), "float32"))
        assert out.shape == (2, 4)
    """)
    assert "nnvm" in imported
    assert not imported & set(PLUGIN_PACKAGES + DEVICE_LIBRARIES), \
        sorted(imported & set(PLUGIN_PACKAGES + DEVICE_LIBRARIES))


# -- .ci/run -------------------------------------------------------------------------------------

@pytest.mark.parametrize("pytest_exit, ci_exit", [(0, 0), (1, 1), (5, 1)])
def test_ci_run_fails_when_no_test_ran_and_counts_lines(tmp_path, pytest_exit, ci_exit):
    """.ci/run with its prepared venv holding stand-ins for pip and hatch (the network step):
    pytest's exit 5 ("no tests collected") fails CI, and the per-package line count prints.
    Environments kept from an earlier run are pruned before the tests (stale editable
    metadata failed a CI run once: version 0.3.0 listed for 0.4.0)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "activate").write_text(f'PATH="{bin_dir}:$PATH"\n')
    calls = tmp_path / "hatch-calls"
    for name, code in (("pip", 0), ("hatch", pytest_exit)):
        (bin_dir / name).write_text(
            f'#!/bin/sh\necho "{name} $*" >> "{calls}"\n[ "$1 $2" = "env prune" ] && exit 0\n'
            f"exit {code}\n")
        (bin_dir / name).chmod(0o755)
    proc = _run(["bash", str(ROOT / ".ci" / "run")], tmp_path, NNVM_CI_VENV=str(tmp_path))
    assert proc.returncode == ci_exit, proc.stdout + proc.stderr
    hatch_calls = [c for c in calls.read_text().splitlines() if c.startswith("hatch")]
    assert hatch_calls == ["hatch env prune", "hatch test"], hatch_calls
    counts = dict(line.split() for line in proc.stdout.splitlines()[1:] if line.startswith("  "))
    assert int(counts["nnvm-core"]) > 1000 and int(counts["nnvm-codegen-c"]) > 500, counts
    assert ("collected no tests" in proc.stderr) is (pytest_exit == 5)
