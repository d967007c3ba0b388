"""Output checks: pure functions from recorded engine outputs to a Verdict that shows every number it used."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

VerdictStatus = Literal["PASS", "FAIL", "SKIPPED", "INCONCLUSIVE"]


@dataclass(frozen=True)
class Verdict:
    """One check's result: status, the subject it judged, a reason, and the evidence (numbers, text)."""

    check: str
    subject: str
    status: VerdictStatus
    reason: str
    evidence: Mapping[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.status != "FAIL"  # INCONCLUSIVE: not judged, so not failed (and never recorded as good)


def passed(check: str, subject: str, reason: str, **evidence: Any) -> Verdict:
    return Verdict(check, subject, "PASS", reason, evidence)


def failed(check: str, subject: str, reason: str, **evidence: Any) -> Verdict:
    return Verdict(check, subject, "FAIL", reason, evidence)


def skipped(check: str, subject: str, reason: str) -> Verdict:
    return Verdict(check, subject, "SKIPPED", reason)
