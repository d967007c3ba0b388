"""The parallel phase's units of work, longest first (tests/conftest.py): what a worker takes whole, and the order the
collection hands the units to pytest-xdist in."""

from __future__ import annotations

from typing import Any, cast

import pytest

from tests.conftest import pytest_collection_modifyitems, unit_of_work


class _Item:
    """What the ordering reads of a collected test: its node id and its markers."""

    def __init__(self, nodeid: str, *markers: str) -> None:
        self.nodeid, self.markers = nodeid, markers

    def get_closest_marker(self, name: str) -> str | None:
        return name if name in self.markers else None


class _Config:
    def __init__(self, dist: str) -> None:
        self.dist = dist

    def getoption(self, name: str, default: Any = None) -> Any:
        return self.dist if name == "dist" else default


def _ordered(items: list[_Item], dist: str = "loadfile") -> list[str]:
    collected = cast(list[pytest.Item], items)
    pytest_collection_modifyitems(cast(pytest.Config, _Config(dist)), collected)
    return [item.nodeid for item in collected]


# In collection order: unit tests first (a directory sorts before another), a built night's module late
COLLECTED = [
    _Item("tests/unit/test_a.py::test_1"),
    _Item("tests/unit/test_a.py::test_2"),
    _Item("tests/integration/served/test_x.py::test_1", "integration"),
    _Item("tests/integration/served/test_y.py::test_1", "integration"),
    _Item("tests/integration/test_b.py::test_1", "integration"),
    _Item("tests/integration/test_built.py::test_good", "integration", "built_night"),
    _Item("tests/integration/test_built.py::test_day", "integration", "built_night"),
    _Item("tests/integration/variants/test_v.py::test_1", "integration", "calibration"),
    _Item("tests/integration/test_offline.py::test_1", "integration", "offline_night"),
    _Item("tests/integration/test_c.py::test_quick", "integration"),
    _Item("tests/integration/test_c.py::test_night", "integration", "built_night"),
]


def test_a_shared_server_folder_is_one_unit_and_any_other_test_its_file() -> None:
    assert unit_of_work("tests/integration/served/test_x.py::test_1") == "tests/integration/served/"
    assert unit_of_work("tests/integration/test_b.py::TestK::test_1") == "tests/integration/test_b.py"


def test_the_units_go_longest_first_each_whole_and_in_its_own_order() -> None:
    assert _ordered(list(COLLECTED)) == [
        "tests/integration/test_built.py::test_good",
        "tests/integration/test_built.py::test_day",
        # a unit is ranked by its longest kind of test, its own order kept
        "tests/integration/test_c.py::test_quick",
        "tests/integration/test_c.py::test_night",
        "tests/integration/test_offline.py::test_1",
        "tests/integration/variants/test_v.py::test_1",
        "tests/integration/served/test_x.py::test_1",
        "tests/integration/served/test_y.py::test_1",
        "tests/integration/test_b.py::test_1",
        "tests/unit/test_a.py::test_1",
        "tests/unit/test_a.py::test_2",
    ]


def test_a_run_that_is_not_the_parallel_phase_keeps_the_collections_order() -> None:
    assert _ordered(list(COLLECTED), dist="no") == [item.nodeid for item in COLLECTED]
