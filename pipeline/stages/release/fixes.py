"""What a passing night fixed: the open regression alerts of the entries that pass tonight (they close with this
night), each with what it was blamed on and the change between the night that opened it and tonight ("fixed by"),
for the release notes. The alert keeps the sources of the night that opened it (`sources`: each source's main and
grafted PRs), so the difference needs no earlier run's files."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

SHORT = 12


def night_sources(plan: Mapping[str, Any] | None) -> dict[str, Any]:
    """A night's sources (from its plan.json, or a manifest's `plan`) as an alert keeps them: each source's main and
    the PRs grafted onto it."""
    return {
        source["name"]: {
            "main": source.get("main_commit", source["commit"]),
            "prs": [pr["number"] for pr in source.get("pull_requests", []) if pr.get("status") == "grafted"],
        }
        for source in (plan or {}).get("sources", [])
    }


def fixed_tonight(alerts_path: Path, passing: Sequence[str], sources: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The open regression alerts of the entries passing tonight, each with what it was blamed on and what changed
    since the night that opened it."""
    try:
        alerts: Mapping[str, Any] = json.loads(alerts_path.read_text())["alerts"]
    except (OSError, ValueError, KeyError):
        return []
    fixed = []
    for key, alert in sorted(alerts.items()):
        entry = key.split(":", 1)[0]
        if not alert.get("open") or key.startswith("pipeline") or entry not in passing:
            continue
        found = {
            "alert": alert["title"],
            "opened": alert["opened"],
            "fixed_by": fixed_by(alert.get("sources"), sources),
        }
        fixed.append(found | ({"blamed": alert["suspects"]} if alert.get("suspects") else {}))
    return fixed


def fixed_by(then: Mapping[str, Any] | None, now: Mapping[str, Any]) -> list[str]:
    """What differs between the night that opened an alert and tonight: main's moves, PRs no longer (or newly)
    grafted; said plainly where nothing differs or the earlier night's sources are unknown."""
    if not now:
        return ["the same pinned candidate (this profile builds nothing): the host, the model or the configuration"]
    if not then:
        return ["unknown: the alert predates the record of its night's sources"]
    changes = []
    for name, source in sorted(now.items()):
        before = then.get(name)
        if before is None:
            continue
        if before["main"] != source["main"]:
            changes.append(f"{name} main {before['main'][:SHORT]}..{source['main'][:SHORT]}")
        changes += [f"{name}#{n} no longer grafted" for n in before["prs"] if n not in source["prs"]]
        changes += [f"{name}#{n} newly grafted" for n in source["prs"] if n not in before["prs"]]
    return changes or ["no change to the sources: the failure was not the wheels' (the host, the data, or noise)"]
