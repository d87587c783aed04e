"""Shared test setup: tiers by hardware, and the reference interpreter as the oracle."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)
