"""Statuses of matrix entries and checks, their order of severity, and the exit code of the worst one."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from pipeline.errors import ExitCode


class Status(StrEnum):
    """PASS < XFAIL < SKIPPED < INCONCLUSIVE < ABORTED < FAIL: a run's exit code is its worst status's."""

    PASS = "PASS"
    XFAIL = "XFAIL"  # known and accepted
    SKIPPED = "SKIPPED"
    INCONCLUSIVE = "INCONCLUSIVE"  # unhealthy host or too much noise: never blamed on the wheels
    ABORTED = "ABORTED"  # a prerequisite failed
    FAIL = "FAIL"

    @property
    def exit_code(self) -> int:
        return _EXIT_CODES[self]


# How every page (report.html, the site) colours a status
STATUS_COLOURS = {
    "PASS": "#1a7f37",
    "XFAIL": "#6e7781",
    "SKIPPED": "#6e7781",
    "INCONCLUSIVE": "#9a6700",
    "ABORTED": "#bc4c00",
    "FAIL": "#cf222e",
}
_ORDER = list(Status)
_EXIT_CODES = {
    Status.PASS: ExitCode.PASS,
    Status.XFAIL: ExitCode.PASS,
    Status.SKIPPED: ExitCode.PASS,
    Status.INCONCLUSIVE: ExitCode.INCONCLUSIVE,
    Status.ABORTED: ExitCode.ABORTED,
    Status.FAIL: ExitCode.FAIL,
}


def worst(statuses: Iterable[Status]) -> Status:
    """The most severe status (PASS when there is none)."""
    return max(statuses, key=_ORDER.index, default=Status.PASS)
