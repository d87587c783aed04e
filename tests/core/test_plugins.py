"""Plugin discovery: what ``nnvm.plugins()`` reports, the environment switches, broken plugins.

Switches and broken plugins run in a subprocess so the registries of this process stay clean.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import nnvm

PACKAGE_PLUGINS = {"onnx", "passes", "llvm", "opencl", "cuda"}


def run_python(code: str, env: dict | None = None, path: str | None = None,
               cwd: str | None = None):
    """Run ``code`` in a fresh interpreter; returns the CompletedProcess (text)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("NNVM_")}
    full_env.update(env or {})
    if path:
        full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [path, full_env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=full_env, timeout=120, cwd=cwd)


def test_core_and_package_plugins_are_listed_with_availability():
    infos = {p.name: p for p in nnvm.plugins()}
    assert set(infos) >= {"nnvm"} | PACKAGE_PLUGINS
    core = infos["nnvm"]
    assert core.available and core.reason is None
    assert core.provides["targets"] == ["reference"]
    assert {"InferShape", "InferType"} <= set(core.provides["passes"])
    assert {"relu", "elemwise_add"} <= set(core.provides["ops"])
    for info in infos.values():
        assert info.version and info.module
        if not info.available:  # every unavailable plugin says why, in words
            assert isinstance(info.reason, str) and len(info.reason) > 10, info
    assert infos["passes"].module == "nnvm_passes.plugin"


def test_plugin_str_names_state():
    text = "\n".join(str(p) for p in nnvm.plugins())
    # the listing shows the installed metadata's version; it equals __version__ unless the
    # environment holds a stale editable install (then: `hatch env prune`, or reinstall)
    assert f"nnvm {nnvm.__version__} (available)" in text, (
        f"installed metadata differs from nnvm.__version__ {nnvm.__version__}: {text[:80]!r}; "
        "the environment holds a stale install of the workspace: run `hatch env prune`")
    for info in nnvm.plugins():
        if not info.available:
            assert f"unavailable: {info.reason}" in text


def test_disable_autoload_loads_only_core():
    code = "import nnvm; print(','.join(p.name for p in nnvm.plugins()))"
    proc = run_python(code, {"NNVM_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "nnvm"
    proc = run_python(code, {"NNVM_DISABLE_PLUGIN_AUTOLOAD": "1", "NNVM_PLUGINS": "passes"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "nnvm,passes"


def test_disable_autoload_still_builds_on_reference():
    proc = run_python("""
        import numpy as np, nnvm
        from nnvm import sym
        lib = nnvm.compiler.build(sym.relu(sym.Variable("x")), "reference", shape={"x": (3,)})
        print(lib.run(x=np.array([-1.0, 0.0, 2.0], "float32"))[0].tolist())
    """, {"NNVM_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[0.0, 0.0, 2.0]"


def test_trace_plugins_prints_hook_calls():
    proc = run_python("import nnvm; nnvm.plugins()", {"NNVM_TRACE_PLUGINS": "1"})
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("[nnvm-plugins]")]
    assert any("nnvm_ops -> nnvm" in ln for ln in lines), proc.stderr
    assert any("nnvm_targets" in ln for ln in lines)
    assert any("passes" in ln for ln in lines)  # package plugins are traced too
    quiet = run_python("import nnvm; nnvm.plugins()")
    assert "[nnvm-plugins]" not in quiet.stderr


def test_plugin_registered_at_run_time_that_raises_is_reported_broken():
    proc = run_python("""
        import nnvm
        from nnvm import hookimpl
        from nnvm.plugin_manager import register_plugin

        class Broken:
            @hookimpl
            def nnvm_targets(self):
                raise RuntimeError("no device driver")

        register_plugin(Broken(), "broken")
        info = {p.name: p for p in nnvm.plugins()}["broken"]
        print(info.available, info.reason)
        print(nnvm.backend.best_target())
    """)
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.strip().splitlines()
    assert first.startswith("False broken: plugin 'broken': hook nnvm_targets() raised")
    assert "no device driver" in first
    assert second  # nnvm keeps working


def test_entry_point_that_fails_to_import_is_reported_unavailable(tmp_path):
    dist = tmp_path / "nnvm_broken_plugin-0.3.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: nnvm-broken-plugin\n"
                                   "Version: 0.3\n")
    (dist / "entry_points.txt").write_text("[nnvm]\nbroken = nnvm_broken_plugin.plugin\n")
    pkg = tmp_path / "nnvm_broken_plugin"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "plugin.py").write_text("import a_module_that_is_not_installed\n")
    proc = run_python("""
        import nnvm
        info = {p.name: p for p in nnvm.plugins()}["broken"]
        print(info.available, info.version)
        print(info.reason)
        from nnvm import sym
        print(sym.relu(sym.Variable("x")))
    """, path=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    available, version = proc.stdout.splitlines()[0].split()
    assert (available, version) == ("False", "0.3")
    reason = proc.stdout.splitlines()[1]
    assert "failed to import nnvm_broken_plugin.plugin" in reason
    assert "a_module_that_is_not_installed" in reason


def test_every_hookspec_is_documented_with_its_signature():
    import inspect

    from nnvm import hookspecs

    doc = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "plugins.md"),
               encoding="utf-8").read()
    specs = [n for n in dir(hookspecs) if n.startswith("nnvm_")]
    assert specs
    for name in specs:
        params = ", ".join(inspect.signature(getattr(hookspecs, name)).parameters)
        assert f"{name}({params})" in doc, f"docs/plugins.md does not document {name}({params})"


# -- partial activation (issue 15): load only the plugins a lookup or an artifact needs ---------

IMPORTED_PLUGINS = textwrap.dedent("""
    def imported():
        import sys
        tops = {m.split(".")[0] for m in sys.modules}
        return sorted(tops & {"nnvm_example", "nnvm_passes", "nnvm_onnx", "nnvm_llvm",
                              "nnvm_opencl", "nnvm_cuda", "tinyflow"})
""")


def _needs_entry_points(*names: str) -> None:
    import importlib.metadata

    import pytest

    installed = {ep.name for ep in importlib.metadata.entry_points(group="nnvm")}
    if not set(names) <= installed:
        pytest.skip(f"needs the plugins {sorted(set(names) - installed)} installed (hatch.toml)")


def test_activate_loads_core_and_the_named_plugin_and_a_miss_loads_all():
    _needs_entry_points("example", "passes", "tinyflow")
    proc = run_python(IMPORTED_PLUGINS + textwrap.dedent("""
        from nnvm import op, plugin_manager
        plugin_manager.activate(["example", "not-installed"])
        print(imported(), op.get_op("example_swish").provider, op.get_op("relu").provider)
        print(op.get_op("tf_random_normal").provider, imported())
    """))
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.splitlines()
    assert first == "['nnvm_example'] example nnvm"
    assert second.startswith("tinyflow [") and "'nnvm_passes'" in second


def test_get_backend_activates_only_the_entry_point_named_after_the_target():
    _needs_entry_points("example", "passes")
    proc = run_python(IMPORTED_PLUGINS + textwrap.dedent("""
        import nnvm
        print(nnvm.backend.get_backend("example").name, imported())
        print(nnvm.pass_manager.get_pass("FuseSwish").provider, imported())
    """))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["example ['nnvm_example']",
                                        "example ['nnvm_example']"]


def test_a_name_no_plugin_provides_is_looked_for_among_all_then_reported():
    proc = run_python(IMPORTED_PLUGINS + textwrap.dedent("""
        import nnvm
        from nnvm.plugin_manager import activate
        activate([])
        for lookup in (nnvm.op.get_op, nnvm.pass_manager.get_pass):
            try:
                lookup("no_such_thing")
            except nnvm.NNVMError as exc:
                print(type(exc).__name__, "is not registered" in str(exc))
        print(len(nnvm.plugins()) > 1)
    """))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["OpNotFoundError", "True", "PassError", "True", "True"]


def test_a_pass_imported_before_the_plugins_load_is_credited_to_its_plugin():
    """Importing a pass module registers nothing: the pass is credited to the plugin whose
    ``nnvm_passes`` hook returned it."""
    _needs_entry_points("passes")
    proc = run_python("""
        import nnvm_passes.simplify_algebra  # defines SimplifyAlgebra before any load
        import nnvm
        infos = {p.name: p for p in nnvm.plugins()}
        print(nnvm.pass_manager.get_pass("SimplifyAlgebra").provider)
        print("SimplifyAlgebra" in infos["passes"].provides["passes"],
              "SimplifyAlgebra" in infos["nnvm"].provides["passes"])
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["passes", "True False"]


EXPORT_SWISH = textwrap.dedent("""
    import numpy as np, nnvm
    from nnvm import sym
    x = sym.Variable("x")
    y = sym.relu(sym.example_swish(x, beta=1.0))
    lib = nnvm.compiler.build(y, "reference", shape={"x": (3,)})
    lib.export("swish.nnvm")
""")

RUN_SWISH = IMPORTED_PLUGINS + textwrap.dedent("""
    import numpy as np, nnvm
    (out,) = nnvm.runtime.load("swish.nnvm").run(x=np.array([-1.0, 0.0, 2.0], "float32"))
    print([round(float(v), 3) for v in out], imported())
""")


def test_an_artifact_records_and_activates_the_plugins_that_provided_its_ops(tmp_path):
    _needs_entry_points("example", "passes")
    proc = run_python(EXPORT_SWISH + textwrap.dedent("""
        from nnvm.runtime.artifact import read_artifact
        print(read_artifact("swish.nnvm").manifest["providers"])
    """), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['example', 'nnvm']"
    proc = run_python(RUN_SWISH, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[0.0, 0.0, 1.762] ['nnvm_example']"


def test_an_artifact_without_providers_loads_every_plugin(tmp_path):
    """Artifacts exported before the manifest named its plugins still load and run."""
    _needs_entry_points("example", "passes")
    proc = run_python(EXPORT_SWISH + textwrap.dedent("""
        import json, zipfile
        from nnvm.runtime.artifact import manifest_digest
        with zipfile.ZipFile("swish.nnvm") as zf:
            members = {i.filename: zf.read(i) for i in zf.infolist()}
        manifest = json.loads(members["manifest.json"])
        del manifest["providers"], manifest["manifest_sha256"]
        manifest["manifest_sha256"] = manifest_digest(manifest)
        members["manifest.json"] = json.dumps(manifest).encode()
        with zipfile.ZipFile("swish.nnvm", "w") as zf:
            for name, data in members.items():
                zf.writestr(name, data)
    """), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    proc = run_python(RUN_SWISH, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    values, _, plugins = proc.stdout.strip().partition("] ")
    assert values == "[0.0, 0.0, 1.762" and "'nnvm_passes'" in plugins
