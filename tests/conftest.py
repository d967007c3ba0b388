"""Shared fixtures and grouping: every test starts from a clean SPARK_NIGHTLY_* environment."""

from __future__ import annotations

import os

import pytest

SERVED = "served"  # tests/integration/served/: one package-scoped server, so its files share one worker


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under `--dist loadgroup` a file's tests stay on one worker, and the served folder's files all on one, so
    module- and package-scoped fixtures (a booted server) are made once rather than once per worker."""
    for item in items:
        group = SERVED if item.path.parent.name == SERVED else str(item.path)
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(autouse=True)
def _clean_settings_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A maintainer's own SPARK_NIGHTLY_* variables must not change what the tests see."""
    for name in list(os.environ):
        if name.startswith("SPARK_NIGHTLY_") and name != "SPARK_NIGHTLY_OWNER":
            monkeypatch.delenv(name)
