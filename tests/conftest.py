"""Shared fixtures: every test starts from a clean SPARK_NIGHTLY_* environment; and the parallel phase's scheduling."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadFileScheduling

# Folders whose files share one booted server (a package-scoped fixture): pytest-xdist hands such a folder to one
# worker whole, since a worker that ran another file between two of them would stop the server and boot it again.
SHARED_SERVER_FOLDERS = ("tests/integration/served/",)


class FileAndSharedFolderScheduling(LoadFileScheduling):
    """`--dist loadfile`, except that each folder of SHARED_SERVER_FOLDERS is one unit of work."""

    def _split_scope(self, nodeid: str) -> str:
        folder = next((f for f in SHARED_SERVER_FOLDERS if nodeid.startswith(f)), None)
        return folder or super()._split_scope(nodeid)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadFileScheduling | None:
    """The suite's `--dist loadfile` keeps shared-server folders together; any other mode is pytest-xdist's own."""
    if config.getoption("dist") != "loadfile":
        return None
    return FileAndSharedFolderScheduling(config, log)


# The owner marker is the suite's own; the cache only saves time and may live elsewhere (a second disk, an empty one to
# measure a cold run): the session's fixtures, made before this one runs, see it, so every test must see the same one
KEPT_VARIABLES = ("SPARK_NIGHTLY_OWNER", "SPARK_NIGHTLY_PATHS_CACHE")


@pytest.fixture(autouse=True)
def _clean_settings_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A maintainer's own SPARK_NIGHTLY_* variables (but the cache's place) must not change what the tests see, and
    no test reads or writes the state of the user running them (the default state directory is under the home
    directory)."""
    for name in list(os.environ):
        if name.startswith("SPARK_NIGHTLY_") and name not in KEPT_VARIABLES:
            monkeypatch.delenv(name)
    monkeypatch.setenv("SPARK_NIGHTLY_PATHS_STATE", str(tmp_path / "state"))
