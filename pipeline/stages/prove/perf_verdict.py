"""The perf stage's verdict for an entry: the worst cell, the reason, an alert per failing cell, each cell's numbers."""

from __future__ import annotations

from typing import Any

from pipeline.outcome import Failure, perf_alert_key
from pipeline.stages.prove.health import HealthReport, health_facts_for_history
from pipeline.stages.prove.paired_verdict import CellOutcome
from pipeline.stages.prove.perf_run import JudgedPerf
from pipeline.status import Status, worst


def perf_verdict(entry_id: str, judged: JudgedPerf, before: HealthReport) -> dict[str, Any]:
    """status, reason, cells, failures and health, as the entry's outcome carries them."""
    outcomes = judged.outcomes
    cells = {o.cell: cell_numbers(o) for o in outcomes}
    status = worst(o.status for o in outcomes)
    bad = [o for o in outcomes if o.status in {Status.FAIL, Status.INCONCLUSIVE}]
    failures = tuple(
        Failure(perf_alert_key(entry_id), f"{o.cell} {o.metric}", o.reason, _evidence(o), subject=o.cell)
        for o in bad
        if o.status == Status.FAIL
    )
    reason = "; ".join(f"{o.cell}: {o.reason}" for o in bad)
    if not bad:
        gaps = [f"{o.cell} {o.gap}" for o in outcomes if o.gap]
        # a cell that tripped and passed measured again (a rerun, or in turns a fresh boot) is said in the summary: on a
        # host whose boots spread, how often that happens is the morning's news, not only the cell's own reason
        again = [o.cell for o in outcomes if o.status == Status.PASS and o.rerun_gate is not None]
        reason = f"{len(outcomes) - len(gaps)} cells within their references"
        if again:
            reason += f" ({', '.join(again)} tripped, and passed measured again)"
        if gaps:
            reason += f"; gaps, not regressions: {'; '.join(gaps)}"
    health = {"before": health_facts_for_history(before), "measurement": health_facts_for_history(judged.health)}
    return {"status": status, "reason": reason, "cells": cells, "failures": failures, "health": health}


def cell_numbers(outcome: CellOutcome) -> dict[str, Any]:
    numbers: dict[str, Any] = {
        "status": outcome.status.value,
        "value": round(outcome.gate.value, 3),  # as first measured tonight
        "ref": outcome.gate.ref,
        "reason": outcome.reason,  # what it was judged against and how it ended, for every cell, PASS included
    }
    if outcome.rerun_gate is not None:  # measured again (a rerun, or in turns a fresh boot): the value that decided
        numbers["rerun_value"] = round(outcome.rerun_gate.value, 3)
    if outcome.gap:
        numbers["gap"] = outcome.gap
    if outcome.confirmation is not None:
        numbers |= {
            "b_over_a": round(outcome.confirmation.mean_ratio, 4),
            "pairs": outcome.pairs_measured,
            "last_good": outcome.last_good.id if outcome.last_good else None,
        }
        if outcome.last_good is not None and outcome.last_good.night:
            numbers["a_night"] = outcome.last_good.night  # the night whose build was A (the site marks it)
        if outcome.in_turn:  # the pairs were boot pairs, A and B booted in turns
            numbers["in_turn"] = True
    return numbers


def _evidence(outcome: CellOutcome) -> dict[str, Any]:
    evidence: dict[str, Any] = {"value": outcome.gate.value, "ref": outcome.gate.ref}
    if outcome.confirmation is not None and outcome.last_good is not None:
        evidence |= {
            "B/A": round(outcome.confirmation.mean_ratio, 4),
            "boot pairs in turn" if outcome.in_turn else "pairs": outcome.pairs_measured,
            "last confirmed build": outcome.last_good.describe(),
        }
    return evidence
