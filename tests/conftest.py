"""Shared fixtures. Sets the test-only seed permission *before* pipeline modules are used, and
isolates Airflow state in a temp AIRFLOW_HOME."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline.noise import TEST_SEED_ENV, TEST_SEED_VALUE, NoiseSource  # noqa: E402

os.environ.setdefault(TEST_SEED_ENV, TEST_SEED_VALUE)


@pytest.fixture
def secure_noise() -> NoiseSource:
    """A real, CSPRNG-seeded noise source (what statistical tests should use)."""
    return NoiseSource.secure()


@pytest.fixture
def seeded_noise() -> NoiseSource:
    """Reproducible noise, for determinism tests only."""
    return NoiseSource.seeded_for_tests(12345)
