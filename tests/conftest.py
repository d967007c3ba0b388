"""Shared fixtures: every test starts from a clean SPARK_NIGHTLY_* environment; and the parallel phase's scheduling
(its units of work, longest first)."""

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
        return unit_of_work(nodeid)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadFileScheduling | None:
    """The suite's `--dist loadfile` keeps shared-server folders together and hands out its units in the order the
    collection puts them (longest first: pytest_collection_modifyitems), not pytest-xdist's own order by the number
    of tests, which would leave the few-test files that run for minutes to the end; any other mode is
    pytest-xdist's own."""
    if config.getoption("dist") != "loadfile":
        return None
    config.option.loadscopereorder = False
    return FileAndSharedFolderScheduling(config, log)


def unit_of_work(nodeid: str) -> str:
    """The unit a worker takes whole: a shared-server folder, else the test's file."""
    folder = next((f for f in SHARED_SERVER_FOLDERS if nodeid.startswith(f)), None)
    return folder or nodeid.split("::", 1)[0]


# The kinds of work, longest first by their markers: a built night's module runs for 20 minutes and more (nights of
# real vLLM, builds and bisections), the offline night and the calibration's broken engines for minutes each, other
# integration tests for seconds to minutes, a unit test for milliseconds.
LONGEST_FIRST = ("built_night", "offline_night", "calibration", "integration")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In the parallel phase, the units of work longest first (each unit ranked by its longest kind of test, the order
    within a kind and within a unit kept): a worker that takes the built nights first ends with the others, where
    taking them last left the other worker idle for their length; the unit tests fill the end."""
    if config.getoption("dist", "no") != "loadfile":
        return

    def kind(item: pytest.Item) -> int:
        return next((i for i, name in enumerate(LONGEST_FIRST) if item.get_closest_marker(name)), len(LONGEST_FIRST))

    rank: dict[str, int] = {}
    for item in items:
        unit = unit_of_work(item.nodeid)
        rank[unit] = min(rank.get(unit, len(LONGEST_FIRST)), kind(item))
    items.sort(key=lambda item: rank[unit_of_work(item.nodeid)])


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
