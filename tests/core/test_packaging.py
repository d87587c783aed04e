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
