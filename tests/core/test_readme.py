"""README, CI script, hatch workspace and docs stay true to the code.

The Quickstart's first code block holds exactly two commands (the demo, then the test suite);
.ci/run runs the second one verbatim; every Python block of the README runs; every module path
the docs name exists.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import tomllib

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def read(rel: str) -> str:
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def code_blocks(markdown: str) -> list[tuple[str, str]]:
    """``(language, body)`` of every fenced code block, in order."""
    return re.findall(r"^```(\w*)\n(.*?)^```", markdown, flags=re.S | re.M)


def quickstart_commands() -> list[str]:
    readme = read("README.md")
    assert "\n## Quickstart\n" in readme, "README.md needs a '## Quickstart' section"
    section = readme.split("\n## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    blocks = code_blocks(section)
    assert blocks, "the Quickstart section has no code block"
    return [ln.strip() for ln in blocks[0][1].splitlines() if ln.strip()]


def test_quickstart_has_exactly_two_commands_demo_then_tests():
    commands = quickstart_commands()
    assert len(commands) == 2, commands
    demo, tests = commands
    assert "hatch run demo" in demo
    assert "hatch test" in tests


def test_ci_runs_the_second_quickstart_command_verbatim():
    script = read(".ci/run")
    assert os.stat(os.path.join(ROOT, ".ci", "run")).st_mode & stat.S_IXUSR
    assert script.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in script
    lines = [ln.strip() for ln in script.splitlines()]
    assert quickstart_commands()[1] in lines, ".ci/run must run the 2nd Quickstart command"
    assert "-eq 5" in script  # pytest's "no tests collected" is handled
    proc = subprocess.run(["bash", "-n", os.path.join(ROOT, ".ci", "run")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_hatch_workspace_covers_every_package_and_scripts_exist():
    with open(os.path.join(ROOT, "hatch.toml"), "rb") as f:
        config = tomllib.load(f)
    envs = config["envs"]
    for env in ("default", "hatch-test"):
        members = envs[env]["workspace"]["members"]
        assert "packages/*" in members and "examples/nnvm-example-plugin" in members
        assert envs[env]["skip-install"] is True
    deps = " ".join(envs["hatch-test"]["extra-dependencies"])
    for dep in ("onnx", "onnxruntime", "onnxscript", "apache-tvm", "pyopencl",
                "pocl-binary-distribution", "ml_dtypes", "scikit-learn"):
        assert re.search(rf"(^|\s|\"){re.escape(dep)}[<>=~ ]", deps + " "), dep
    scripts = envs["default"]["scripts"]
    assert scripts["demo"].startswith("python examples/demo.py")
    assert os.path.exists(os.path.join(ROOT, "examples", "demo.py"))
    assert "benchmarks/bench_" in scripts["bench"]
    for name in os.listdir(os.path.join(ROOT, "packages")):
        assert os.path.exists(os.path.join(ROOT, "packages", name, "pyproject.toml"))


def test_root_pyproject_is_tool_config_only():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        config = tomllib.load(f)
    assert "project" not in config and "build-system" not in config
    pytest_cfg = config["tool"]["pytest"]["ini_options"]
    assert pytest_cfg["testpaths"] == ["tests"]
    markers = {m.split(":")[0] for m in pytest_cfg["markers"]}
    assert {"llvm", "opencl", "cuda", "slow"} <= markers


def test_readme_packages_table_names_every_package():
    readme = read("README.md")
    for name in os.listdir(os.path.join(ROOT, "packages")):
        assert f"packages/{name}" in readme, name


@pytest.mark.parametrize("doc", ["README.md", "docs/plugins.md"])
def test_python_blocks_run(doc, tmp_path):
    blocks = [body for lang, body in code_blocks(read(doc)) if lang == "python"]
    assert len(blocks) >= 2
    os.symlink(os.path.join(ROOT, "examples"), tmp_path / "examples")
    for i, body in enumerate(blocks):
        if "from_onnx" in body:
            pytest.importorskip("nnvm_onnx")
        if "FuseSwish" in body:
            pytest.importorskip("nnvm_example")  # installed by tests/examples or hatch
        proc = subprocess.run([sys.executable, "-c", body], capture_output=True, text=True,
                              cwd=tmp_path, timeout=300)
        assert proc.returncode == 0, f"{doc}: python block {i} failed:\n{body}\n{proc.stderr}"


DOCS = ("README.md", "docs/architecture.md", "docs/plugins.md", "docs/backends.md")


@pytest.mark.parametrize("doc", DOCS)
def test_docs_name_only_files_that_exist(doc):
    text = read(doc)
    paths = set(re.findall(r"`((?:nnvm|nnvm_\w+)/[\w/]+\.py)`", text))
    roots = {"nnvm": "packages/nnvm-core/src", "nnvm_onnx": "packages/nnvm-frontend-onnx/src",
             "nnvm_passes": "packages/nnvm-passes/src",
             "nnvm_llvm": "packages/nnvm-backend-llvm/src",
             "nnvm_opencl": "packages/nnvm-backend-opencl/src",
             "nnvm_cuda": "packages/nnvm-backend-cuda/src",
             "nnvm_codegen_c": "packages/nnvm-codegen-c/src",
             "nnvm_ray": "packages/nnvm-ray/src",
             "nnvm_example": "examples/nnvm-example-plugin/src"}
    missing = [p for p in paths
               if not os.path.exists(os.path.join(ROOT, roots[p.split("/")[0]], p))]
    assert not missing, f"{doc} names files that do not exist: {missing}"
    links = re.findall(r"\]\(((?!https?:)[^)#]+)\)", text)
    base = os.path.dirname(os.path.join(ROOT, doc))
    broken = [ln for ln in links if not os.path.exists(os.path.join(base, ln))]
    assert not broken, f"{doc} has broken links: {broken}"


def test_docs_show_the_example_plugin_code_verbatim():
    doc = read("docs/plugins.md")
    plugin = read("examples/nnvm-example-plugin/src/nnvm_example/plugin.py")
    blocks = [body for lang, body in code_blocks(doc) if lang == "python"]
    assert plugin in blocks, "docs/plugins.md must include plugin.py verbatim"
    pyproject = read("examples/nnvm-example-plugin/pyproject.toml")
    assert '[project.entry-points.nnvm]\nexample = "nnvm_example.plugin"' in pyproject
    assert '[project.entry-points.nnvm]\nexample = "nnvm_example.plugin"' in doc
