"""A tripped cell's pairs against its last confirmed build (A): how they are measured (the callables' shapes) and
what they decide. Side by side, 8 pairs of runs and once 16; in turns (a host that holds one server), boot pairs,
three and then one more at a time until they decide.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from pipeline.config import thresholds as pair_limits  # read at each call: the simulation varies them
from pipeline.config.thresholds import PairRules
from pipeline.detect.boots import BootPair, confirm_boots
from pipeline.detect.steps import CONFIRM_PAIRS, Confirmation, Screen, confirm
from pipeline.infra.confirmed import Acceptance, BuildRef
from pipeline.infra.history import ACCEPTED_VERDICTS
from pipeline.stages.prove.gate import CellVerdict
from pipeline.stages.prove.perf import CaseResult
from pipeline.status import Status

# (A, B) values of a metric for the case, as many pairs as asked for, A being the build given; None when that
# build cannot be served. May raise HostUnhealthy when foreign load spoiled the pairs' window.
PairedMeasure = Callable[[CaseResult, str, int, BuildRef], list[tuple[float, float]] | None]
# Boot pairs on a host that holds one server (A and B booted in turns, a boot of each per pair): the first `n` boot
# pairs of a metric for the case; None when A cannot be served. May raise HostUnhealthy like PairedMeasure.
BootPairsMeasure = Callable[[CaseResult, str, int, BuildRef], list[BootPair] | None]


@dataclass(frozen=True)
class InTurn:
    """Pairs measured as boots in turns (`servers_at_once: 1`): boot pairs, asked one more at a time."""

    measure: BootPairsMeasure


@dataclass(frozen=True)
class CellOutcome:
    """How one cell ended, and every judgement on the way."""

    cell: str
    metric: str
    status: Status
    reason: str
    gate: CellVerdict
    screen: Screen | None = None
    rerun_gate: CellVerdict | None = None
    confirmation: Confirmation | None = None
    last_good: BuildRef | None = None  # the A it was (or would have been) paired with
    pairs_measured: int = 0  # pairs of runs; in turns, boot pairs
    in_turn: bool = False  # the pairs were boots in turn
    gap: str | None = None  # a difference to a reference measured on another build: reported, never blamed

    @property
    def accepted(self) -> bool:
        """Tonight's build is good for this cell: it becomes the cell's A and its night joins the baseline."""
        return self.status.value in ACCEPTED_VERDICTS


def paired_verdict(
    base: CellOutcome,
    a: tuple[BuildRef, Acceptance | None] | None,
    result: CaseResult,
    paired: PairedMeasure | InTurn,
    *,
    rules: PairRules,
) -> CellOutcome:
    """The pairs' decision against A, with one extension when the first set cannot decide; without pairs, why not.
    An extension narrows the pairs' own error, never the boot spread: A and B are the same two processes. In turns,
    boot pairs are added one at a time until they decide, each a new boot of both."""
    if isinstance(paired, InTurn):
        return boot_pairs_verdict(base, a, result, paired, rules=rules)
    pairs = paired(result, base.metric, CONFIRM_PAIRS, a[0]) if a is not None else None
    if a is None or pairs is None:
        return unpaired(base, a)
    decision = confirm(pairs, min_effect=rules.min_effect, boot_sd=rules.boot_sd)
    if decision.decision == "INCONCLUSIVE":  # once more as many pairs: a noisy night gets a second look
        pairs = paired(result, base.metric, 2 * CONFIRM_PAIRS, a[0]) or pairs
        decision = confirm(pairs, min_effect=rules.min_effect, boot_sd=rules.boot_sd)
    status = Status(decision.decision)  # FAIL, PASS or INCONCLUSIVE: the statuses of the same names
    reason = f"{base.reason}; paired with the last confirmed build {a_text(a)}: {decision.reason}"
    return replace(base, status=status, reason=reason, confirmation=decision, last_good=a[0], pairs_measured=len(pairs))


def unpaired(base: CellOutcome, a: tuple[BuildRef, Acceptance | None] | None) -> CellOutcome:
    missing = (
        "no confirmed build to pair with yet"
        if a is None
        else f"the last confirmed build ({a[0].describe()}) could not be served"
    )
    return replace(base, status=Status.INCONCLUSIVE, reason=missing, last_good=a[0] if a else None)


def boot_pairs_verdict(
    base: CellOutcome,
    a: tuple[BuildRef, Acceptance | None] | None,
    result: CaseResult,
    paired: InTurn,
    *,
    rules: PairRules,
) -> CellOutcome:
    """Boot pairs against A, FIRST_BOOT_PAIRS then one more at a time up to MAX_BOOT_PAIRS, stopping as soon as
    they decide; the night's own boots estimate the boot spread, the hardware's pairs.boot_sd is their prior."""
    boots = None
    decision = None
    for wanted in range(pair_limits.FIRST_BOOT_PAIRS, pair_limits.MAX_BOOT_PAIRS + 1):
        measured = paired.measure(result, base.metric, wanted, a[0]) if a is not None else None
        if measured is None:
            break
        boots = measured
        decision = confirm_boots(boots, min_effect=rules.min_effect, prior_boot_sd=rules.boot_sd)
        if decision.decision != "INCONCLUSIVE":
            break
    if a is None or boots is None or decision is None:
        return unpaired(base, a)
    status = Status(decision.decision)  # FAIL, PASS or INCONCLUSIVE: the statuses of the same names
    reason = f"{base.reason}; booted in turns with the last confirmed build {a_text(a)}: {decision.reason}"
    return replace(
        base,
        status=status,
        reason=reason,
        confirmation=decision,
        last_good=a[0],
        pairs_measured=len(boots),
        in_turn=True,
    )


def a_text(a: tuple[BuildRef, Acceptance | None]) -> str:
    build, acceptance = a
    why = f", accepted {acceptance.night} by {acceptance.how}" if acceptance is not None else ""
    return f"({build.describe()}{why})"
