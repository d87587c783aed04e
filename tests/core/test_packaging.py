"""Every package of the monorepo ships its type information (PEP 561 ``py.typed``), so
type checkers use the annotations of an installed nnvm package instead of ignoring it."""

from __future__ import annotations

import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = sorted(p.parent for pattern in ("packages/*/src/*/__init__.py",
                                           "examples/*/src/*/__init__.py")
                  for p in ROOT.glob(pattern))


def test_the_monorepo_has_packages():
    assert len(PACKAGES) >= 6, PACKAGES


@pytest.mark.parametrize("pkg", PACKAGES, ids=lambda p: p.name)
def test_package_is_typed(pkg):
    assert (pkg / "py.typed").is_file(), f"{pkg.relative_to(ROOT)} has no py.typed marker"


def _pyproject_version(path: pathlib.Path) -> str:
    import tomllib

    return tomllib.loads(path.read_text())["project"]["version"]


def test_versions_agree_with_the_changelog():
    """One version for the monorepo: every pyproject, every __version__, the CHANGELOG."""
    import re

    top = re.search(r"^## (\d+\.\d+\.\d+)", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert top, "CHANGELOG.md has no '## X.Y.Z' entry"
    want = top.group(1)
    for pkg in PACKAGES:
        project = pkg.parents[1] / "pyproject.toml"
        assert _pyproject_version(project) == want, project
        init = (pkg / "__init__.py").read_text()
        found = re.search(r'^__version__ = "([^"]+)"', init, re.M)
        assert found and found.group(1) == want, pkg / "__init__.py"


def _project(name: str) -> dict:
    import tomllib

    return tomllib.loads((ROOT / "packages" / name / "pyproject.toml").read_text())["project"]


def test_codegen_c_is_a_library_on_core_alone_that_the_c_like_backends_use():
    """nnvm-codegen-c has no ``nnvm`` entry point (it is not a plugin and registers nothing),
    needs nnvm-core only, and is declared by the two backends that import it."""
    project = _project("nnvm-codegen-c")
    assert project["dependencies"] == ["nnvm-core"]
    assert "nnvm" not in project.get("entry-points", {})
    assert not (ROOT / "packages/nnvm-codegen-c/src/nnvm_codegen_c/plugin.py").exists()
    assert not (ROOT / "packages/nnvm-core/src/nnvm/codegen").exists()
    for backend in ("nnvm-backend-opencl", "nnvm-backend-cuda"):
        assert "nnvm-codegen-c" in _project(backend)["dependencies"], backend
