"""Shared fixtures: every test starts from a clean SPARK_NIGHTLY_* environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _clean_settings_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A maintainer's own SPARK_NIGHTLY_* variables must not change what the tests see, and no test reads or writes
    the state of the user running them (the default state directory is under the home directory)."""
    for name in list(os.environ):
        if name.startswith("SPARK_NIGHTLY_") and name != "SPARK_NIGHTLY_OWNER":
            monkeypatch.delenv(name)
    monkeypatch.setenv("SPARK_NIGHTLY_PATHS_STATE", str(tmp_path / "state"))
