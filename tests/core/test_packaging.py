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
