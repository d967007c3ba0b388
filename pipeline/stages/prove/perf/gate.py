"""Gate: a cell's measured values against its reference (warn, fail, xfail); pure, showing every number it used."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pipeline.config.thresholds import Reference

CellStatus = Literal["PASS", "WARN", "FAIL", "XFAIL", "PENDING"]


@dataclass(frozen=True)
class CellVerdict:
    """The judgement of one cell: the median judged, the bounds, the relative change, and why."""

    cell: str
    metric: str
    unit: str
    status: CellStatus
    value: float
    ref: float | None
    warn_bound: float | None
    fail_bound: float | None
    change: float | None
    reason: str

    @property
    def tripped(self) -> bool:
        """Worse than the warn level: worth a rerun and, if it holds, a paired confirmation."""
        return self.status in ("WARN", "FAIL")


def judge_cell(reference: Reference, values: Sequence[float]) -> CellVerdict:
    """Judge the median of a cell's runs against its reference's warn and fail bounds."""
    value = statistics.median(values)
    if reference.ref is None:
        return CellVerdict(
            reference.cell,
            reference.metric,
            reference.unit,
            "PENDING",
            value,
            None,
            None,
            None,
            None,
            f"no reference yet ({reference.pending}); judged by its history",
        )
    warn, fail = reference.warn.bound(reference.ref), reference.fail.bound(reference.ref)
    change = value / reference.ref - 1

    def worse(bound: float) -> bool:
        return value < bound if reference.higher_is_better else value > bound

    origin = f" ({reference.origin})" if reference.origin else ""
    shown = f"{value:.4g} {reference.unit} vs {reference.ref:.4g}{origin} ({change:+.1%})"
    if worse(fail):
        status: CellStatus = "XFAIL" if reference.xfail else "FAIL"
        reason = f"{shown} is past the fail level {reference.fail} ({fail:.4g})"
        if reference.xfail:
            reason += f"; expected: {reference.xfail}"
    elif worse(warn):
        status, reason = "WARN", f"{shown} is past the warn level {reference.warn} ({warn:.4g})"
    else:
        status, reason = "PASS", f"{shown}, within the warn level {reference.warn}"
    return CellVerdict(
        reference.cell, reference.metric, reference.unit, status, value, reference.ref, warn, fail, change, reason
    )
