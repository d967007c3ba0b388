"""A gate that measures nothing says so: an entry INCONCLUSIVE for the same reason two nights running, or a night on
which no entry was measured, raises the pipeline's own alert (a GB10 read as "no GPU" would otherwise stay green).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pipeline.outcome import Outcome
from pipeline.stages.aftermath.alert_records import BLIND_KEY, AlertEvent
from pipeline.status import Status

MEASURED = frozenset({Status.PASS, Status.FAIL, Status.XFAIL})
BLIND_NIGHTS = 2  # the same INCONCLUSIVE reason this many nights in a row is the gate's fault, not the host's mood
_TITLE = "spark-nightly measures nothing"


def blind_reasons(outcomes: Sequence[Outcome], streaks: dict[str, Any], night: str) -> list[str]:
    """Tonight's reasons the gate is blind, updating each entry's streak of INCONCLUSIVE nights in `streaks`."""
    reasons = []
    for outcome in outcomes:
        if outcome.status in MEASURED:
            streaks.pop(outcome.entry, None)
            continue
        if outcome.status != Status.INCONCLUSIVE:
            continue
        same = _reason_class(outcome)
        known = streaks.get(outcome.entry)
        if known and known["reason"] == same and known["last"] != night:
            known["nights"] += 1
        elif not known or known["reason"] != same:
            known = streaks[outcome.entry] = {"reason": same, "nights": 1}
        known["last"] = night
        if known["nights"] >= BLIND_NIGHTS:
            reasons.append(
                f"{outcome.entry}: INCONCLUSIVE {known['nights']} nights running at {outcome.stage}: {outcome.reason}"
            )
    if outcomes and not any(o.status in MEASURED for o in outcomes):
        reasons.append(f"no entry was measured tonight ({len(outcomes)} entries, none PASS, FAIL or XFAIL)")
    return reasons


def blind_alert(alerts: dict[str, Any], reasons: Sequence[str], night: str, run_id: str) -> list[AlertEvent]:
    """Open the blind-gate alert, comment on it while it stays blind, close it on a night that measured again."""
    known = alerts.get(BLIND_KEY)
    if reasons:
        body = (
            f"On {night} (run `{run_id}`) the gate measured nothing it can judge; no wheel is blamed, and nothing "
            "is published while it lasts:\n\n" + "\n".join(f"- {r}" for r in reasons) + "\n\n"
            "Run `spark-nightly doctor` on the runner, fix what it names, and the next measured night closes this.\n"
        )
        if known and known["open"]:
            known["nights"].append(night)
            return [AlertEvent(BLIND_KEY, "updated", known["title"], body, night, run_id)]
        alerts[BLIND_KEY] = {"open": True, "title": _TITLE, "opened": night, "nights": [night]}
        return [AlertEvent(BLIND_KEY, "opened", _TITLE, body, night, run_id)]
    if known and known["open"]:
        known["open"] = False
        return [
            AlertEvent(BLIND_KEY, "closed", known["title"], f"Measured again on {night}: closing.\n", night, run_id)
        ]
    return []


def _reason_class(outcome: Outcome) -> str:
    """The reason without its numbers: "runs at 702 MHz" and "runs at 698 MHz" are the same reason."""
    return f"{outcome.stage}: " + re.sub(r"\d+(?:\.\d+)?", "N", outcome.reason)
