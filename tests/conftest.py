"""Shared test setup: tiers by hardware, and the reference interpreter as the oracle."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture
def cache_off(tmp_path, tmp_path_factory, monkeypatch):
    """NNVM_CACHE_DIR=off, the current directory an empty ``work``, HOME an empty folder."""
    from cache_env import DRIVER_VARS, unset

    work, home = tmp_path / "work", tmp_path_factory.mktemp("home")
    work.mkdir()
    monkeypatch.setenv("NNVM_CACHE_DIR", "off")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    for name in DRIVER_VARS:  # the OpenCL backend may set them under "off": undo after
        unset(monkeypatch, name)
    return work, home
