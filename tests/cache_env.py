"""Shared by the cache-off tests of core and backends (``NNVM_CACHE_DIR=off``): the OpenCL
driver variables the backend may set, unsetting them so that the test restores them, and the
files a folder gained. The ``cache_off`` fixture itself is in ``tests/conftest.py``."""

from __future__ import annotations

import os

#: environment the OpenCL backend sets for PoCL and pyopencl when the cache is off
DRIVER_VARS = ("POCL_CACHE_DIR", "POCL_KERNEL_CACHE", "PYOPENCL_NO_CACHE")


def unset(monkeypatch, name: str) -> None:
    """Unset ``name`` for this test and restore it afterwards, also when the code under test
    sets it (``monkeypatch.delenv`` of an unset variable records nothing to undo)."""
    monkeypatch.setenv(name, "")
    monkeypatch.delenv(name)


def files(folder) -> list[str]:
    """Every file under ``folder``, as paths relative to it, sorted."""
    return sorted(os.path.relpath(os.path.join(d, f), folder)
                  for d, _, names in os.walk(folder) for f in names)
