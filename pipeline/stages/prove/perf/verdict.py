"""The perf stage's verdict for an entry: the worst cell, the reason, an alert per failing cell, each cell's numbers.

The entry's reason and each alert lead with one line per failing cell, read at a glance ("tg32 (c1): 0.45x the last
confirmed build over 2 boot pairs, FAIL"; the alert adds what tonight measured against which reference); each cell's
whole derivation (screen, yardstick, pairs, bounds, carried evidence) stays in its numbers, which the report and the
entry's JSON show."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.outcome import CellNumbers, Failure, perf_alert_key
from pipeline.progress import plural
from pipeline.stages.prove.health import HealthReport, health_facts_for_history
from pipeline.stages.prove.perf.paired import CellOutcome
from pipeline.stages.prove.perf.run import JudgedPerf
from pipeline.status import Status, worst


@dataclass(frozen=True)
class PerfVerdict:
    """The perf stage's verdict for an entry: its status and reason, an alert's failure per failing cell, and what
    the entry's numbers carry (each cell's numbers in their JSON form, the host's health before and while measuring).
    """

    status: Status
    reason: str
    cells: Mapping[str, Mapping[str, Any]]
    failures: tuple[Failure, ...]
    health: Mapping[str, Any]


def perf_verdict(entry_id: str, judged: JudgedPerf, before: HealthReport) -> PerfVerdict:
    """The entry's perf verdict from its judged cells and the host's health before measuring."""
    outcomes = judged.outcomes
    cells = {o.cell: cell_numbers(o) for o in outcomes}
    status = worst(o.status for o in outcomes)
    bad = [o for o in outcomes if o.status in {Status.FAIL, Status.INCONCLUSIVE}]
    failing = [o for o in bad if o.status == Status.FAIL]
    failures = tuple(
        Failure(perf_alert_key(entry_id), f"{o.cell} {o.metric}", _alert_reason(o), _evidence(o), subject=o.cell)
        for o in failing
    )
    reason = "; ".join(f"{o.cell}: {o.reason}" for o in bad)  # undecided: why it could not decide, in full
    if failing:
        undecided = [o.cell for o in bad if o.status != Status.FAIL]
        reason = "; ".join(headline(o) for o in failing)
        reason += f"; undecided: {', '.join(undecided)}" if undecided else ""
        reason = _shortened(reason, f"{len(failing)} failing cells")
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
        # a cell that passed against the last confirmed build (its pairs, or a trial's one boot against tonight's
        # boots of it) says by how much: the figure a bisection's table shows for a passing step, as for a failing one
        decided = [o for o in outcomes if _decided_against_a(o)]
        if decided:
            reason += "".join(f"; {headline(o)}" for o in decided)
            reason = _shortened(reason, f"{len(decided)} cells decided against the last confirmed build")
    health = {"before": health_facts_for_history(before), "measurement": health_facts_for_history(judged.health)}
    return PerfVerdict(status, reason, cells, failures, health)


HEADLINE_CHARS = 200  # an entry's reason when cells fail: what the summary's table and the alert's title show


def _decided_against_a(outcome: CellOutcome) -> bool:
    """Decided against the last confirmed build: by pairs, or a trial's one boot against tonight's boots of it."""
    return (
        outcome.confirmation is not None
        and outcome.last_good is not None
        and bool(outcome.pairs_measured or outcome.against_boots_of_a)
    )


def headline(outcome: CellOutcome) -> str:
    """The cell in one line: against the last confirmed build where pairs (or, in a trial, its one boot against
    tonight's boots of that build) decided it, else against its reference."""
    status, confirmation = outcome.status.value, outcome.confirmation
    if confirmation is not None and _decided_against_a(outcome):
        against = f"{outcome.cell}: {confirmation.mean_ratio:.2f}x the last confirmed build"
        if outcome.pairs_measured:
            pairs = plural(outcome.pairs_measured, "boot pair" if outcome.in_turn else "pair")
            return f"{against} over {pairs}, {status}"
        # not the accepted night's figure: the host may have drifted from it, as tonight's boots of A show
        these = "one boot" if outcome.step_boots <= 1 else f"{outcome.step_boots} boots"
        return f"{against}, {these} against tonight's {plural(outcome.against_boots_of_a, 'boot')} of it, {status}"
    gate = outcome.rerun_gate or outcome.gate
    if gate.ref:
        change = gate.value / gate.ref - 1
        return f"{outcome.cell}: {gate.value:.4g} {gate.unit} against {gate.ref:.4g} ({change:+.1%}), {status}"
    return f"{outcome.cell}: {status}"


def _alert_reason(outcome: CellOutcome) -> str:
    """A failing cell's row in its alert: the headline, then what tonight measured against which reference."""
    gate = outcome.rerun_gate or outcome.gate
    return f"{headline(outcome)}; measured {gate.reason}"


def _shortened(reason: str, cut: str) -> str:
    """The reason within HEADLINE_CHARS, saying what was cut ("3 failing cells") and where it is whole."""
    if len(reason) <= HEADLINE_CHARS:
        return reason
    tail = f" ... ({cut}; each in the report)"
    return reason[: HEADLINE_CHARS - len(tail)].rstrip("; ,") + tail


def cell_numbers(outcome: CellOutcome) -> dict[str, Any]:
    """The cell's numbers as its entry carries them (outcome.CellNumbers' JSON form)."""
    confirmation, last_good = outcome.confirmation, outcome.last_good
    return CellNumbers(
        status=outcome.status,
        value=round(outcome.gate.value, 3),
        ref=outcome.gate.ref,
        reason=outcome.reason,
        rerun_value=round(outcome.rerun_gate.value, 3) if outcome.rerun_gate is not None else None,
        gap=outcome.gap or None,
        b_over_a=round(confirmation.mean_ratio, 4) if confirmation is not None else None,
        pairs=outcome.pairs_measured,
        last_good=last_good.id if last_good else None,
        a_night=last_good.night if last_good and last_good.night else None,
        in_turn=outcome.in_turn,
        step_boots=outcome.step_boots,
        step_logs=outcome.step_logs,
    ).to_json()


def _evidence(outcome: CellOutcome) -> dict[str, Any]:
    evidence: dict[str, Any] = {"value": outcome.gate.value, "ref": outcome.gate.ref}
    if outcome.confirmation is not None and outcome.last_good is not None:
        evidence |= {
            "B/A": round(outcome.confirmation.mean_ratio, 4),
            "boot pairs in turn" if outcome.in_turn else "pairs": outcome.pairs_measured,
            "last confirmed build": outcome.last_good.describe(),
        }
    return evidence
