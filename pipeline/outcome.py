"""How one matrix entry ended (Outcome) and what failed in it (Failure): what every later stage reads."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from pipeline.status import Status

OUTCOME_VERSION = 1


def perf_alert_key(entry_id: str) -> str:
    """The one alert that every failing perf cell of an entry is tracked by."""
    return f"{entry_id}:perf"


def golden_alert_key(entry_id: str) -> str:
    """The one alert that every failing golden check of an entry is tracked by (a broken build fails a dozen)."""
    return f"{entry_id}:golden"


def deciding_value(cell: Mapping[str, Any]) -> float | None:
    """The value a perf cell's verdict stands on, from the numbers an outcome carries for it: measured again where it
    tripped first (`rerun_value`), else as first measured (`value`); the history keeps the same."""
    value = cell.get("rerun_value", cell.get("value"))
    return float(value) if isinstance(value, int | float) else None


@dataclass(frozen=True)
class Failure:
    """One failing check or cell: the alert key it is tracked by, what failed, why, and the evidence.

    Failures of one key on one night are one alert: the perf cells of an entry share `<entry>:perf`, each named by
    its `subject` (the cell), so one regression that moves several cells raises one alert listing them all; its
    golden checks share `<entry>:golden`, each named by its check and prompt ("drift capital-of-france").
    """

    key: str
    what: str
    reason: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    subject: str = ""

    def to_json(self) -> dict[str, Any]:
        data = {"key": self.key, "what": self.what, "reason": self.reason, "evidence": dict(self.evidence)}
        return data | ({"subject": self.subject} if self.subject else {})

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> Failure:
        evidence = dict(data.get("evidence", {}))
        return Failure(data["key"], data["what"], data["reason"], evidence, data.get("subject", ""))


@dataclass(frozen=True)
class Outcome:
    """How one entry ended: its status, the stage that decided it, why, its numbers, and how long it took."""

    entry: str
    status: Status
    stage: str
    reason: str
    required: bool
    duration_s: float
    numbers: dict[str, Any] = field(default_factory=dict)
    failures: tuple[Failure, ...] = ()  # one per failing check or cell: the alert keys and evidence

    def failing(self) -> tuple[Failure, ...]:
        """What a FAIL raises alerts for: its own failures, or else one for the stage that ended it."""
        return self.failures or (Failure(f"{self.entry}:{self.stage}", self.stage, self.reason),)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        failures = [f.to_json() for f in self.failures]
        return {"version": OUTCOME_VERSION, **data, "status": self.status.value, "failures": failures}

    @staticmethod
    def from_json(data: dict[str, Any]) -> Outcome:
        fields = {k: v for k, v in data.items() if k != "version"}
        failures = tuple(Failure.from_json(f) for f in data["failures"])
        return Outcome(**(fields | {"status": Status(data["status"]), "failures": failures}))
