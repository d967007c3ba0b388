"""A tripped cell's pairs against its last confirmed build (A): how they are measured (the callables' shapes) and
what they decide. Side by side, 8 pairs of runs, then 8 more at a time while undecided up to the hardware's
max_pairs (16 unless it says more); in turns (a host that holds one server), boot pairs
one at a time, decided sequentially with the evidence of undecided nights carried (detect/sequential.py), until
they decide or the night's boot budget is spent.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from pipeline.config import thresholds as pair_limits  # read at each call: the simulation varies them
from pipeline.config.thresholds import CI_LEVEL, PairRules
from pipeline.detect.boots import BootPair, PooledSpread, pooled_spread
from pipeline.detect.evidence import Carried, SpreadSoFar
from pipeline.detect.sequential import FAIL_AT, PASS_AT, SequentialResult, decide_sequential
from pipeline.detect.steps import CONFIRM_PAIRS, FAIL_ALPHA, Confirmation, Screen, confirm, decide
from pipeline.infra.confirmed import BuildRef, LastConfirmed
from pipeline.infra.history import ACCEPTED
from pipeline.stages.prove.perf.gate import CellVerdict
from pipeline.stages.prove.perf.measure import CaseResult
from pipeline.status import Status


@dataclass(frozen=True)
class PairsOverBoots:
    """Side-by-side pairs that span several boots (a server booted again between blocks): each pair's (A, B)
    values and the boots it measured, numbered per side, which the decision's boot term counts."""

    values: list[tuple[float, float]]
    boots: list[tuple[int, int]]


# (A, B) values of a metric for the case, as many pairs as asked for, A being the build given (a plain list: all of
# one boot pair); None when that build cannot be served. May raise HostUnhealthy when foreign load spoiled the
# pairs' window.
PairedMeasure = Callable[[CaseResult, str, int, BuildRef], list[tuple[float, float]] | PairsOverBoots | None]
# Boot pairs on a host that holds one server (A and B booted in turns, a boot of each per pair): the first `n` boot
# pairs of a metric for the case; None when A cannot be served. May raise HostUnhealthy like PairedMeasure.
BootPairsMeasure = Callable[[CaseResult, str, int, BuildRef], list[BootPair] | None]


def _unlimited() -> int:
    return pair_limits.MAX_BOOT_PAIRS * 2


def _none_yet(build_id: str) -> int:
    return 0


@dataclass(frozen=True)
class InTurn:
    """Pairs measured as boots in turns (`servers_at_once: 1`): boot pairs, asked one more at a time while the boot
    budget (`boots_left`, boots still allowed tonight) holds another pair."""

    measure: BootPairsMeasure
    boots_left: Callable[[], int] = _unlimited
    # Boots a cell's pairs stop at when they lean to no slowdown (cleared); while they lean to one they go on as long
    # as boots_left pays for another pair.
    usual: int = 2 * pair_limits.MAX_BOOT_PAIRS
    # Boot pairs measured tonight against a build, for any cell (one boot pair measures every case): free to reuse
    measured: Callable[[str], int] = _none_yet


@dataclass(frozen=True)
class Evidence:
    """What a cell's boot pairs knew before tonight: the evidence carried from undecided nights, the host's spread."""

    carried: Carried | None = None
    spread: SpreadSoFar = field(default_factory=SpreadSoFar)
    clearable: bool = True  # False while a regression is open: only a real PASS closes it


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
    against_boots_of_a: int = 0  # a trial's boots, weighed against this many of tonight's boots of A (no pair)
    step_boots: int = 0  # how many boots of the trial's build were weighed so (1 where one decided)
    step_logs: tuple[float, ...] = ()  # and each one's log figure (a boundary step's second look starts from them)
    gap: str | None = None  # a difference to a reference measured on another build: reported, never blamed
    differences: tuple[float, ...] = ()  # tonight's boot pair differences (log B/A), for the host's boot spread
    a_boots: tuple[tuple[float, ...], ...] = ()  # what each of tonight's boots of A measured (its runs), for the book
    carry: Carried | None = None  # undecided evidence for the next night against the same A

    @property
    def accepted(self) -> bool:
        """Tonight's build is good for this cell: it becomes the cell's A and its night joins the baseline."""
        return self.status in ACCEPTED


def paired_verdict(
    base: CellOutcome,
    a: LastConfirmed | None,
    result: CaseResult,
    paired: PairedMeasure | InTurn,
    *,
    rules: PairRules,
    evidence: Evidence | None = None,
    night: str = "",
    failed: Sequence[str] = (),
) -> CellOutcome:
    """The pairs' decision against A, with one extension when the first set cannot decide; without pairs, why not.
    An extension narrows the pairs' own error, never the boot spread: A and B are the same two processes. In turns,
    boot pairs are added one at a time until they decide, each a new boot of both."""
    if isinstance(paired, InTurn):
        return boot_pairs_verdict(base, a, result, paired, rules=rules, evidence=evidence, night=night, failed=failed)
    most = CONFIRM_PAIRS if failed else rules.max_pairs  # another cell FAILs the entry: no pairs past the first
    found = (
        side_by_side(paired, result, base.metric, a.build, replace(rules, max_pairs=most)) if a is not None else None
    )
    if a is None or found is None:
        return unpaired(base, a)
    decision, pairs = found
    status = Status(decision.decision)  # FAIL, PASS or INCONCLUSIVE: the statuses of the same names
    reason = f"{base.reason}; paired with the last confirmed build {a_text(a)}: {decision.reason}"
    if failed and status == Status.INCONCLUSIVE and rules.max_pairs > most:
        reason += f"; no pairs more for it: {', '.join(failed)} already FAILs the entry"
    return replace(
        base, status=status, reason=reason, confirmation=decision, last_good=a.build, pairs_measured=len(pairs.values)
    )


def side_by_side(
    paired: PairedMeasure, result: CaseResult, metric: str, a: BuildRef, rules: PairRules
) -> tuple[Confirmation, PairsOverBoots] | None:
    """The pairs' decision on one metric of a case against A, side by side: CONFIRM_PAIRS, then as many more while
    undecided, up to rules.max_pairs (each block booting one server again, so more boots are averaged); None when A
    cannot be served."""
    measured = paired(result, metric, CONFIRM_PAIRS, a)
    if measured is None:
        return None
    pairs = _over_boots(measured)
    decision = confirm(pairs.values, min_effect=rules.min_effect, boot_sd=rules.boot_sd, boots=pairs.boots)
    while decision.decision == "INCONCLUSIVE" and len(pairs.values) < rules.max_pairs:
        more = paired(result, metric, min(rules.max_pairs, len(pairs.values) + CONFIRM_PAIRS), a)
        grown = _over_boots(more) if more is not None else pairs
        if len(grown.values) <= len(pairs.values):  # A stopped serving, or the measure has no more to give
            break
        pairs = grown
        decision = confirm(pairs.values, min_effect=rules.min_effect, boot_sd=rules.boot_sd, boots=pairs.boots)
    return decision, pairs


def _over_boots(measured: list[tuple[float, float]] | PairsOverBoots) -> PairsOverBoots:
    """Pairs with their boots; a plain list is one boot pair."""
    if isinstance(measured, PairsOverBoots):
        return measured
    return PairsOverBoots(list(measured), [(0, 0)] * len(measured))


def unpaired(base: CellOutcome, a: LastConfirmed | None) -> CellOutcome:
    missing = (
        "no confirmed build to pair with yet"
        if a is None
        else f"the last confirmed build ({a.build.describe()}) could not be served"
    )
    return replace(base, status=Status.INCONCLUSIVE, reason=missing, last_good=a.build if a else None)


def boot_pairs_verdict(
    base: CellOutcome,
    a: LastConfirmed | None,
    result: CaseResult,
    paired: InTurn,
    *,
    rules: PairRules,
    evidence: Evidence | None = None,
    night: str = "",
    failed: Sequence[str] = (),
) -> CellOutcome:
    """Boot pairs against A one at a time, each followed by the sequential decision (with the undecided evidence of
    earlier nights against the same A), until it decides, MAX_BOOT_PAIRS are measured, or the boot budget cannot pay
    for another pair; the boot spread is pooled from the file's prior, the host's past pairs and tonight's."""
    if a is None:
        return unpaired(base, a)
    evidence = evidence or Evidence()
    shift = rules.shift()
    boots: list[BootPair] = []
    decision = None
    pooled = None
    last_good = a.build

    def can_grow() -> bool:
        """Whether another boot pair may be asked for: one measured already for another cell (it costs no boot), or
        a new one the budget pays for while no other cell has FAILed the entry."""
        if len(boots) >= pair_limits.MAX_BOOT_PAIRS:
            return False
        if len(boots) < paired.measured(last_good.id):
            return True
        return paired.boots_left() >= 2 and not failed

    while can_grow():
        measured = paired.measure(result, base.metric, len(boots) + 1, last_good)
        if measured is None:
            break
        boots = measured
        pooled = pooled_spread(rules.boot_sd, evidence.spread, boots)
        more = can_grow()
        if more and len(boots) < pair_limits.MIN_BOOT_PAIRS:
            continue
        differences = [pair.difference() for pair in boots]
        decision = _decide(differences, evidence, a.build.id, night=night, shift=shift, pooled=pooled, more=more)
        if decision.decision == "INCONCLUSIVE" and more and 2 * len(boots) >= paired.usual and decision.llr <= 0:
            # the usual night's boots, leaning to no slowdown: no more are spent
            decision = _decide(differences, evidence, a.build.id, night=night, shift=shift, pooled=pooled, more=False)
        if decision.decision != "INCONCLUSIVE":
            break
    if not boots or decision is None or pooled is None:
        return _no_boot_pairs(base, a, paired, failed)
    reason = f"{base.reason}; booted in turns with the last confirmed build {a_text(a)}: {decision.reason}, pooled "
    reason += f"from {pooled.source}{_why_it_stopped(decision, len(boots), failed)}"
    confirmation = _confirmation(boots, decision, pooled, rules)
    return replace(
        base,
        status=Status(decision.decision),  # FAIL, PASS or INCONCLUSIVE: the statuses of the same names
        reason=reason,
        confirmation=confirmation,
        last_good=a.build,
        pairs_measured=len(boots),
        in_turn=True,
        differences=tuple(pair.difference() for pair in boots),
        a_boots=tuple(pair.a for pair in boots),
        carry=decision.carry,
    )


def _no_boot_pairs(base: CellOutcome, a: LastConfirmed, paired: InTurn, failed: Sequence[str]) -> CellOutcome:
    """A cell judged with no boot pair: another cell FAILed the entry first, the budget was spent, or A did not
    serve."""
    if failed:
        stopped = f"no boot pair is made for it: {', '.join(failed)} already FAILs the entry"
        return replace(base, status=Status.INCONCLUSIVE, reason=f"{base.reason}; {stopped}", last_good=a.build)
    if paired.boots_left() < 2:
        spent = "the night's boot budget is spent before the first boot pair (two boots)"
        return replace(base, status=Status.INCONCLUSIVE, reason=f"{base.reason}; {spent}", last_good=a.build)
    return unpaired(base, a)


def _why_it_stopped(decision: SequentialResult, pairs: int, failed: Sequence[str]) -> str:
    """Why a cell's boot pairs ended before their limit without a FAIL: another cell FAILed the entry, or the budget
    ran out (with what deciding would have cost); nothing where they decided on their own."""
    if decision.decision == "FAIL" or pairs >= pair_limits.MAX_BOOT_PAIRS:
        return ""
    stop = f"no boot more for it: {', '.join(failed)} already FAILs the entry" if failed else ""
    if decision.decision == "INCONCLUSIVE" and decision.carry:
        return f"; {stop or 'the boot budget is spent'} ({_to_decide(decision)})"
    return f"; {stop}" if stop else ""


def _decide(
    differences: Sequence[float],
    evidence: Evidence,
    a: str,
    *,
    night: str,
    shift: float,
    pooled: PooledSpread,
    more: bool,
) -> SequentialResult:
    return decide_sequential(
        differences, evidence.carried, a=a, night=night, shift=shift, variance=pooled.variance, spread=pooled.spread,
        more=more, clearable=evidence.clearable,
    )  # fmt: skip


def _to_decide(decision: SequentialResult) -> str:
    """What deciding would have cost: the boot pairs the sum's distance to the nearer bound takes at its rate."""
    per_pair = abs(decision.llr) / max(1, decision.pairs + decision.carried_pairs)
    bound = FAIL_AT if decision.llr > 0 else PASS_AT
    more = math.ceil(abs(bound - decision.llr) / per_pair) if per_pair > 0 else pair_limits.MAX_BOOT_PAIRS
    return f"deciding would take about {more} more boot pair{'s' if more != 1 else ''}, {2 * more} boots"


def _confirmation(
    boots: Sequence[BootPair], decision: SequentialResult, pooled: PooledSpread, rules: PairRules
) -> Confirmation:
    """Tonight's boot pairs as a Confirmation: their B/A and its interval from the pooled spread (what A's move
    reads), with the sequential decision and its reason."""
    differences = [pair.difference() for pair in boots]
    mean = math.fsum(differences) / len(differences)
    stats = decide(
        mean, math.sqrt(pooled.variance / len(differences)), pooled.df, n=len(differences),
        unit=f"{len(differences)} boot pairs", sd=math.sqrt(pooled.variance), min_effect=rules.min_effect,
        fail_alpha=FAIL_ALPHA, ci_level=CI_LEVEL, boot_sd=pooled.spread,
    )  # fmt: skip
    return replace(stats, decision=decision.decision, reason=decision.reason)


def a_text(a: LastConfirmed) -> str:
    return f"({a.describe()})"
