"""How one matrix entry ended (Outcome) and what failed in it (Failure): what every later stage reads."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from pipeline.status import Status

OUTCOME_VERSION = 1


@dataclass(frozen=True)
class Failure:
    """One failing check or cell: the alert key it is tracked by, what failed, why, and the evidence."""

    key: str
    what: str
    reason: str
    evidence: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "what": self.what, "reason": self.reason, "evidence": dict(self.evidence)}

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> Failure:
        return Failure(data["key"], data["what"], data["reason"], dict(data.get("evidence", {})))


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
