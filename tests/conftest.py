"""Shared fixtures: every test starts from a clean SPARK_NIGHTLY_* environment."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _clean_settings_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A maintainer's own SPARK_NIGHTLY_* variables must not change what the tests see."""
    for name in list(os.environ):
        if name.startswith("SPARK_NIGHTLY_") and name != "SPARK_NIGHTLY_OWNER":
            monkeypatch.delenv(name)
