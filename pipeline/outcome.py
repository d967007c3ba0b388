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


@dataclass(frozen=True)
class CellNumbers:
    """A perf cell's numbers as an outcome carries them, and every reader after it (the entry's JSON, release.json,
    the report, the alerts, the release notes, the site) reads them through: one type with its JSON form. A cell of an
    older release reads back the same, what it lacks left empty; what a reader cannot use as a number is None."""

    status: Status | None = None
    value: float | None = None  # as first measured tonight
    ref: float | None = None
    reason: str = ""  # what it was judged against and how it ended, for every cell, PASS included
    rerun_value: float | None = None  # measured again (a rerun, or in turns a fresh boot): the value that decided
    gap: str | None = None  # off a reference measured elsewhere (another build or host)
    b_over_a: float | None = None  # paired with the last confirmed build: the pairs' mean ratio
    pairs: int | None = None
    last_good: str | None = None  # the build that was A
    a_night: str | None = None  # the night whose build was A (the site marks it)
    in_turn: bool = False  # the pairs were boot pairs, A and B booted in turns
    step_boots: int = 0  # a trial's cell decided by its own boots against tonight's boots of A: how many (no pair)
    step_logs: tuple[float, ...] = ()  # and each boot's log figure (a bisection's second look starts from them)

    @property
    def deciding(self) -> float | None:
        """The value the verdict stands on: measured again where it tripped first, else as first measured (the
        history keeps the same)."""
        return self.rerun_value if self.rerun_value is not None else self.value

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "status": self.status.value if self.status else None,
            "value": self.value,
            "ref": self.ref,
            "reason": self.reason,
        }
        if self.rerun_value is not None:
            data["rerun_value"] = self.rerun_value
        if self.gap:
            data["gap"] = self.gap
        if self.b_over_a is not None:  # paired: what A was, even when unknown
            data |= {"b_over_a": self.b_over_a, "pairs": self.pairs, "last_good": self.last_good}
            data |= {"a_night": self.a_night} if self.a_night else {}
            data |= {"in_turn": True} if self.in_turn else {}
            data |= {"step_boots": self.step_boots} if self.step_boots else {}
            data |= {"step_logs": [round(x, 6) for x in self.step_logs]} if self.step_logs else {}
        return data

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> CellNumbers:
        status = data.get("status")
        pairs, step_boots, step_logs = data.get("pairs"), data.get("step_boots"), data.get("step_logs")
        return CellNumbers(
            Status(status) if isinstance(status, str) and status in Status.__members__ else None,
            _number(data.get("value")),
            _number(data.get("ref")),
            str(data.get("reason") or ""),
            _number(data.get("rerun_value")),
            str(data["gap"]) if data.get("gap") else None,
            _number(data.get("b_over_a")),
            pairs if isinstance(pairs, int) and not isinstance(pairs, bool) else None,
            str(data["last_good"]) if data.get("last_good") else None,
            str(data["a_night"]) if data.get("a_night") else None,
            data.get("in_turn") is True,
            step_boots if isinstance(step_boots, int) and not isinstance(step_boots, bool) else 0,
            tuple(x for x in step_logs if _number(x) is not None) if isinstance(step_logs, list) else (),
        )


def cells_of(numbers: Mapping[str, Any]) -> dict[str, CellNumbers]:
    """The perf cells of an entry's numbers (none where it measured none, or in a shape no release wrote)."""
    found = numbers.get("cells")
    if not isinstance(found, Mapping):
        return {}
    return {str(name): CellNumbers.from_json(cell) for name, cell in found.items() if isinstance(cell, Mapping)}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


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
