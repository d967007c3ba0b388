"""Judge an entry's performance: health, measurement, reference and history, rerun, paired confirmation, record.

A tripped cell is rerun; if it still trips, the cell's last confirmed good build (A) is served beside
the candidate (B) and the two are measured interleaved (A B, B A, ...) on the same host the same
night: the paired ratio decides, its error counting the hardware's boot-to-boot spread. A moves to
tonight's build only when the pairs accept it (or, on a cell's very first night, a clean screen),
and only accepted nights make the history's baseline, so a regression never becomes its own
reference; while a cell's last night FAILed, only pairs can pass it. An unhealthy host makes every
cell INCONCLUSIVE and keeps its numbers out of the history: a sick
night is never blamed on the wheels and never becomes the new normal.

A host's first accepted night is its yardstick: from then on the cell's reference is the median of this host's
accepted nights (with the file's levels), and the file's reference is only a floor for gross breakage, so a host
twice as fast (or half as fast) as the one the file was measured on is judged against itself.
"""

from __future__ import annotations

import itertools
import math
import socket
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from pipeline.config.thresholds import CI_LEVEL, PairRules, Reference, Thresholds
from pipeline.detect.boots import PooledSpread, pooled_spread
from pipeline.detect.evidence import SpreadSoFar
from pipeline.detect.sequential import CLOSE_AT, llr_sum
from pipeline.detect.step_test import STEP_BOUND, boot_log, two_builds
from pipeline.detect.steps import (
    BASELINE_NIGHTS,
    FAIL_ALPHA,
    SCREEN_FLOOR,
    STEP_RUN_NIGHTS,
    Screen,
    decide,
    detect_step,
    screen,
)
from pipeline.errors import HostUnhealthy
from pipeline.infra.confirmed import BuildRef, ConfirmedBook, LastConfirmed, series_key
from pipeline.infra.history import ACCEPTED, History, Night, Sample
from pipeline.places import StateDir
from pipeline.progress import plural
from pipeline.stages.prove.health import HealthReport, health_facts_for_history
from pipeline.stages.prove.perf.gate import CellVerdict, judge_cell
from pipeline.stages.prove.perf.measure import CaseResult
from pipeline.stages.prove.perf.pair_book import ABoot, PairBook
from pipeline.stages.prove.perf.paired import (
    CellOutcome,
    Evidence,
    InTurn,
    PairedMeasure,
    a_text,
    paired_verdict,
)
from pipeline.status import Status

# Pairs that PASS move A only when their own interval rules out tonight being this much slower than A (the CI's
# lower bound on B/A >= 1 - this): the slack is the pairs' error, never a constant under it, so a build that may be
# 1 % slower never becomes A and a creep accumulates against a fixed A until its pairs FAIL it. Boot pairs in turns,
# whose error is the boot spread, move A rarely; that costs nothing but A's age.
A_MOVE_MAX_LOSS = 0.01
# Boot pairs in turns move A only where their interval rules out any loss (the slack 0): their error is the boot
# spread, wide enough that a 1 % slack let a slower build through. In benchmarks/detector_simulation.py --mode
# one-resident (200 series, boot SD 2 % / 3 %) a 1 % slack moved A to a build at least 1 % slower in 1.5 / 4.5 % of
# creeping months and 4.0 / 6.0 % of months after a -3 % step, 0 in 0 / 2.0 % and 1.5 / 1.0 %, and a creep was caught
# by its 15th night as often or more (94 / 85 % against 92.5 / 84.5 %). Side by side the pairs' error is a run's,
# tight enough that with 0 an unchanged build could almost never hand A on.
A_MOVE_MAX_LOSS_IN_TURN = 0.0
# With no last confirmed build to pair with, an open regression is taken as fixed only after this many nights in a
# row back within the baseline: one good night of a regressed build is what a lucky night looks like.
RECOVERY_NIGHTS = 3
# While a regression is open and tonight still trips, it stays FAILed without pairs (they cost boots where one server
# fits), except on every this-many-th night open, when pairs judge it again: a fixed build on a host that became
# slower since trips every night, and only pairs can clear it.
REPAIR_EVERY_NIGHTS = 7
# How far back an open regression is looked for: over a year of undecided nights (the blind gate alerts long before)
OPEN_LOOKBACK_NIGHTS = 400
# How a reason names the thresholds file's reference (a host's own accepted nights name themselves)
FILE_ORIGIN = "the file's reference"
Remeasure = Callable[[CaseResult], CaseResult]
# The case as measured on the n-th fresh boot of tonight's build (1: the first), booted when a cell first asks for it;
# None where that boot is not made yet and the night's boot budget holds no more
BootAgain = Callable[[CaseResult, int], CaseResult | None]


@dataclass(frozen=True)
class PerfContext:
    """Where the numbers come from and go to."""

    history: History
    hardware: str
    host: str
    entry: str
    run_id: str
    night: str
    commits: dict[str, str]
    record: bool = True  # keep healthy samples in the history (a one-off `bench` does not, unless asked)
    build: BuildRef | None = None  # tonight's build (None: a server of unknown build, which is never accepted)
    book: ConfirmedBook | None = None  # where each cell's A is kept and moved
    pair_with: BuildRef | None = None  # pair with this build instead of each cell's A
    pair_always: bool = False  # pairs judge every cell, tripped or not (`bench --pair-with`)
    pair_book: PairBook | None = None  # boot pairs in turns: the host's boot spread and carried evidence
    # a culprit trial or bisection step: each cell that FAILed the night, with the B/A its pairs FAILed it at (the
    # question its own pairs ask, PairRules.against_tonight), or None where no pair measured one
    slowdowns: Mapping[str, float | None] = field(default_factory=dict)
    # a trial: the most boots of its build a cell asked about may make, where one server fits (culprit.step_boots),
    # and the fewest it is decided on (a bisection's boundary step tried again: bisect.CONFIRM_BOOTS)
    step_boots: int = 1
    least_step_boots: int = 1
    # a boundary step tried again: each asked cell's boots of its first look (their log figures), weighed with its own
    earlier_step_logs: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    def series(self, cell: str, metric: str) -> str:
        return series_key(self.hardware, self.entry, cell, metric)

    @classmethod
    def on_host(cls, state: StateDir, *, hardware: str, entry: str, run_id: str, night: str) -> PerfContext:
        """A measurement on this host with its books in the state folder, as the nightly and bench make it (each
        sets what else it knows with dataclasses.replace)."""
        book, pair_book = ConfirmedBook(state.confirmed), PairBook(state.pairs)
        history = History(state.history)
        return cls(history, hardware, socket.gethostname(), entry, run_id, night, {}, book=book, pair_book=pair_book)


def _nights(ctx: PerfContext, cell: str, metric: str, *, accepted_only: bool, limit: int = 60) -> list[Night]:
    """This host's nights of the cell before tonight's run: all of them, or the accepted ones (the baseline)."""
    return ctx.history.nights(
        hardware=ctx.hardware,
        entry=ctx.entry,
        cell=cell,
        metric=metric,
        host=ctx.host,
        before=ctx.night,
        before_run=ctx.run_id,
        accepted_only=accepted_only,
        limit=limit,
    )


def _last_good(ctx: PerfContext, cell: str, metric: str) -> LastConfirmed | None:
    if ctx.pair_with is not None:
        return LastConfirmed(ctx.pair_with)
    if ctx.book is None:
        return None
    return ctx.book.last_good(ctx.series(cell, metric))


def _cells(result: CaseResult) -> list[tuple[str, str]]:
    return [(result.pp_cell.name, "pp_tps"), (result.tg_cell.name, "tg_tps")]


def judge_results(
    results: Sequence[CaseResult],
    thresholds: Thresholds,
    ctx: PerfContext,
    *,
    health_before: HealthReport,
    health_after: HealthReport,
    remeasure: Remeasure,
    paired: PairedMeasure | InTurn,
    boot_again: BootAgain | None = None,
) -> list[CellOutcome]:
    """Every judged cell's outcome; records healthy samples with their verdicts and moves A where accepted.

    health_after judges the whole measurement window (foreign CPU time over it, the GPU under load). `boot_again`:
    fresh boots of tonight's build, None where its server is not ours to boot again (given by URL).
    """
    if not (health_before.healthy and health_after.healthy):
        reasons = "; ".join(health_before.reasons + health_after.reasons)
        return [
            CellOutcome(
                cell,
                metric,
                Status.INCONCLUSIVE,
                f"host unhealthy, numbers not kept: {reasons}",
                judge_cell(thresholds.cells[cell], result.values(metric)),
            )
            for result in results
            for cell, metric in _cells(result)
            if cell in thresholds.cells
        ]
    outcomes: list[CellOutcome] = []
    finals = {result.pp_cell.name: result for result in results}  # each case as last measured (a rerun replaces it)
    for result, cell, metric in _in_judging_order(results, thresholds, ctx, paired):
        case = result.pp_cell.name
        try:
            found = _cell_case(
                finals[case], cell, metric, thresholds=thresholds, ctx=ctx, remeasure=remeasure, paired=paired
            )
            outcome, finals[case] = _judge_cell(replace(found, failed=_failed_by_pairs(outcomes), again=boot_again))
        except HostUnhealthy as exc:
            gate = judge_cell(thresholds.cells[cell], finals[case].values(metric))
            reason = f"the host became unhealthy during its rerun or pairs, numbers not judged: {exc}"
            outcome = CellOutcome(cell, metric, Status.INCONCLUSIVE, reason, gate)
        outcomes.append(outcome)
    kept = list(finals.values())
    order = [cell for result in results for cell, _ in _cells(result)]
    outcomes.sort(key=lambda outcome: order.index(outcome.cell))  # reported in the cases' order
    if ctx.record:
        _record(kept, ctx, health_after, {o.cell: o.status for o in outcomes})
        _record_pairs(outcomes, ctx)
        _move_last_good(outcomes, ctx)
    return outcomes


def _failed_by_pairs(outcomes: Sequence[CellOutcome]) -> tuple[str, ...]:
    """The cells whose pairs FAILed the entry already tonight: no boot is made for another cell's undecided pairs."""
    return tuple(o.cell for o in outcomes if o.status == Status.FAIL and o.confirmation is not None)


def _in_judging_order(
    results: Sequence[CaseResult], thresholds: Thresholds, ctx: PerfContext, paired: PairedMeasure | InTurn
) -> list[tuple[CaseResult, str, str]]:
    """Every judged cell once, the cell that measured slowest first. The cell that dropped most decides soonest:
    once it FAILs the entry, no boot is spent on a cell whose small drop the pairs would need many boots to tell from
    none (in turns no boot pair, side by side no pairs past the first; docs/verdict.md)."""
    first: dict[str, tuple[CaseResult, str, str]] = {}  # a cell named by two cases is judged once, with the first
    for result in results:
        for cell, metric in _cells(result):
            if cell in thresholds.cells:
                first.setdefault(cell, (result, cell, metric))
    cells = list(first.values())

    def drop(item: tuple[CaseResult, str, str]) -> float:
        result, cell, metric = item
        nights = [n.values for n in _nights(ctx, cell, metric, accepted_only=True)]
        gate = _gate(host_reference(thresholds, cell, nights), _floor(thresholds, cell, nights), result.values(metric))
        return gate.change if gate.change is not None else 0.0

    return sorted(cells, key=drop)


def _record_pairs(outcomes: Sequence[CellOutcome], ctx: PerfContext) -> None:
    """Tonight's boot pairs join the host's boot spread; an undecided night's evidence is carried, a decided one
    clears it; tonight's boots of A are kept with the ones before (a night serving A itself is judged by them)."""
    if ctx.pair_book is None:
        return
    for outcome in outcomes:
        if outcome.in_turn:
            a_boots = [ABoot(ctx.night, ctx.run_id, values) for values in outcome.a_boots]
            ctx.pair_book.record(
                ctx.host,
                ctx.series(outcome.cell, outcome.metric),
                outcome.differences,
                outcome.carry,
                a=outcome.last_good.id if outcome.last_good is not None else None,
                a_boots=a_boots,
                keep=BASELINE_NIGHTS,
            )


Judged = tuple[CellOutcome, CaseResult]  # the cell's outcome, and the measurement that decided it


@dataclass(frozen=True)
class CellCase:
    """One cell tonight, as every rule of its decision reads it: what was measured, the yardstick and screen it was
    held to, the last confirmed build (A) it may be paired with, and how the night can measure it again."""

    result: CaseResult
    cell: str
    metric: str
    thresholds: Thresholds
    ctx: PerfContext
    remeasure: Remeasure
    paired: PairedMeasure | InTurn
    a: LastConfirmed | None
    same_build: bool  # tonight's build is A itself
    nights: list[tuple[float, ...]]  # the accepted nights the reference and screen are made of
    reference: Reference
    floor: Reference | None
    gate: CellVerdict
    screened: Screen
    evidence: Evidence | None  # carried boot pairs and the boot spread, in turns
    failed: tuple[str, ...] = ()  # cells whose pairs FAILed the entry tonight: no boot is made for this one's pairs
    again: BootAgain | None = None  # fresh boots of tonight's build, where its server is ours to boot again

    @property
    def in_turn(self) -> bool:
        return isinstance(self.paired, InTurn)

    @property
    def least(self) -> float:
        """The screen's floor: in turns each night is one boot, so the history's noise never narrows it."""
        return SCREEN_FLOOR if self.in_turn else 0.0

    @property
    def tripped(self) -> bool:
        return self.gate.tripped or _history_trips(self.screened)

    def judge(self, values: Sequence[float]) -> CellVerdict:
        return _gate(self.reference, self.floor, values)

    def base(self, status: Status, reason: str) -> CellOutcome:
        return CellOutcome(self.cell, self.metric, status, reason, self.gate, self.screened)

    def pairs_decide(self, base: CellOutcome, measured: CaseResult, *, clearable: bool = True) -> CellOutcome:
        known = replace(self.evidence, clearable=clearable) if self.evidence is not None else None
        if known is not None and self.tonight is not None:  # a trial's question is its own, not the nights'
            known = replace(known, carried=None)
        decided = paired_verdict(
            base, self.a, measured, self.paired, rules=self.rules, evidence=known, night=self.ctx.night,
            failed=self.failed,
        )  # fmt: skip
        if self.tonight is None or decided.confirmation is None:
            return decided
        asked = f"asked whether it carries tonight's slowdown (B/A {self.tonight:.2f})"
        return replace(decided, reason=f"{decided.reason}; {asked}")

    @property
    def tonight(self) -> float | None:
        """In a culprit trial or bisection step, the B/A at which tonight's pairs FAILed this cell; else None."""
        return self.ctx.slowdowns.get(self.cell)

    @property
    def pooled_prior(self) -> PooledSpread:
        """The variance of one boot pair's difference before tonight's pairs: the file's prior pooled with this
        host's past pairs (pooled_spread), which a trial's one-boot rules count their evidence at."""
        learned = self.evidence.spread if self.evidence is not None else SpreadSoFar()
        return pooled_spread(self.rules.boot_sd, learned, [])

    @property
    def tonights_a_boots(self) -> list[ABoot]:
        """The boots of A tonight's pairs made for this cell (none outside turns, or once A has moved)."""
        book = self.ctx.pair_book
        if book is None or self.a is None or not self.in_turn:
            return []
        kept = book.a_boots(self.ctx.host, self.ctx.series(self.cell, self.metric), self.a.build.id)
        return [boot for boot in kept if boot.night == self.ctx.night]

    @property
    def rules(self) -> PairRules:
        """The hardware's pair rules; in a trial, for a cell tonight's pairs FAILed, asking about tonight's slowdown."""
        return self.thresholds.pairs if self.tonight is None else self.thresholds.pairs.against_tonight(self.tonight)


def _cell_case(
    result: CaseResult,
    cell: str,
    metric: str,
    *,
    thresholds: Thresholds,
    ctx: PerfContext,
    remeasure: Remeasure,
    paired: PairedMeasure | InTurn,
) -> CellCase:
    a = _last_good(ctx, cell, metric)
    same_build = a is not None and ctx.build is not None and a.build.id == ctx.build.id
    nights, boots_of_a = _yardstick(ctx, cell, metric, a.build.id if a is not None and same_build else None)
    reference = host_reference(thresholds, cell, nights, boots_of_a=boots_of_a)
    floor = _floor(thresholds, cell, nights)
    in_turn = isinstance(paired, InTurn)
    values = result.values(metric)
    gate = _gate(reference, floor, values)
    screened = screen(nights, values, floor=SCREEN_FLOOR if in_turn else 0.0)
    evidence = _evidence(ctx, cell, metric) if in_turn else None
    return CellCase(
        result, cell, metric, thresholds, ctx, remeasure, paired, a, same_build, nights, reference, floor, gate,
        screened, evidence,
    )  # fmt: skip


def _pairs_asked(case: CellCase) -> Judged | None:
    """`bench --pair-with`: pairs decide, whatever the screen says."""
    if not case.ctx.pair_always:
        return None
    return case.pairs_decide(case.base(Status.INCONCLUSIVE, "asked for pairs"), case.result), case.result


def _not_tonights_failure(case: CellCase) -> Judged | None:
    """A culprit trial or bisection step after a perf failure asks about the cells that FAILed tonight; another cell
    is measured and shown, not judged: its pairs would spend boots on a question the trial does not ask (on a host
    that has drifted since its accepted nights every cell trips, a good step's as much as the night's)."""
    asked = case.ctx.slowdowns
    if not asked or case.cell in asked:
        return None
    reason = f"not asked: a trial asks only about the cells that FAILed tonight ({', '.join(sorted(asked))}); "
    return case.base(Status.PASS, f"{reason}measured {case.gate.reason}; {case.screened.reason}"), case.result


def _against_tonights_a(case: CellCase) -> Judged | None:
    """A trial's cell that tonight's boot pairs FAILed, where the pair book keeps tonight's boots of A: is this build
    like A or like tonight's build? Tonight measured both within the hour, so the step asks two hypotheses
    (detect/step_test.py): its boots' mean against A's boots, weighed between "like A" and "slower by tonight's
    slowdown". One boot decides whenever the gap is several boot SDs; between the bounds another boot of this build
    is measured (one boot, where a boot pair costs two), up to `culprit.step_boots`; still between, the cell is
    INCONCLUSIVE (a bisection skips such a step rather than guess). A host that drifted since its accepted nights
    measures A tonight as it measures this build, so the comparison is the same hour's."""
    a_boots = case.tonights_a_boots
    if case.tonight is None or case.a is None or case.same_build or not a_boots:
        return None
    builds = two_builds([boot.values for boot in a_boots], case.tonight, case.pooled_prior.variance)
    # a second look starts from the first look's boots; then the bench boot, whatever an earlier cell of the case
    # measured on the later ones
    earlier = list(case.ctx.earlier_step_logs.get(case.cell, ()))
    step, stopped = [*earlier, boot_log(case.result.values(case.metric))], ""
    most = max(1, case.ctx.step_boots) if case.again is not None else 1
    while (answer := builds.answer(step, max_boots=most, least_boots=case.ctx.least_step_boots)) == "more":
        again = case.again(case.result, len(step) - len(earlier)) if case.again is not None else None
        if again is None:
            answer, stopped = "between", "; no boot left tonight"
            break
        step.append(boot_log(again.values(case.metric)))
    weight, variance = builds.weigh(step), builds.variance(len(step))
    difference = statistics.fmean(step) - builds.a_mean
    these = "one boot" if len(step) == 1 else f"{len(step)} boots"
    these += f", {len(earlier)} of its first look" if earlier else ""
    weighed = (
        f"B/A {math.exp(difference):.4f} ({these}) against tonight's {plural(len(a_boots), 'boot')} of "
        f"the last confirmed build {a_text(case.a)}: log-likelihood ratio of tonight's slowdown (B/A "
        f"{case.tonight:.2f}) {weight:+.2f} (FAIL at {STEP_BOUND:+.2f}, PASS at {-STEP_BOUND:+.2f}; SD "
        f"{math.sqrt(variance):.1%})"
    )
    measured_text = f"{case.gate.reason}; {case.screened.reason}"
    if answer == "between":
        why = f"{measured_text}; {weighed}: neither like it nor like tonight's build after {these}{stopped}"
        return case.base(Status.INCONCLUSIVE, why), case.result
    status = Status.FAIL if answer == "B" else Status.PASS
    said = "it carries tonight's slowdown" if status == Status.FAIL else "it does not carry tonight's slowdown"
    pooled = case.pooled_prior
    unit = f"{these} against tonight's {len(a_boots)} of A"
    confirmation = decide(
        difference, math.sqrt(variance), pooled.df, n=1, unit=unit, sd=math.sqrt(variance),
        min_effect=case.rules.min_effect, fail_alpha=FAIL_ALPHA, ci_level=CI_LEVEL, boot_sd=pooled.spread,
    )  # fmt: skip
    outcome = replace(
        case.base(status, f"{measured_text}; {weighed}: {said}, no boot pair needed"),
        confirmation=replace(confirmation, decision="FAIL" if answer == "B" else "PASS", reason=weighed),
        last_good=case.a.build,
        in_turn=True,
        against_boots_of_a=len(a_boots),
        step_boots=len(step),
        step_logs=tuple(step),
    )
    return outcome, case.result


def _screen_against_tonight(case: CellCase) -> Judged | None:
    """A trial's cell that tonight's pairs FAILed, screened clean: its boot against the accepted nights is weighed as
    a boot pair would be against tonight's slowdown (PairRules.against_tonight's sequential sum, at the bound that
    closes a regression), its change counted at twice the variance the boot pairs would use (pooled_spread: the
    file's prior and this host's pairs) or at the host's own night-to-night noise, whichever is wider. Where that
    alone rules tonight's slowdown out, no boot pair is made: a pair is two boots, minutes on a GPU and half an hour
    for a Spark's large model. Else the cell goes on to its pairs."""
    change = case.screened.relative_change
    if case.tonight is None or case.tripped or not -1.0 < change < math.inf:
        return None
    rules = case.rules
    variance = 2.0 * case.pooled_prior.variance
    if not math.isnan(case.screened.noise_of_change):
        variance = max(variance, case.screened.noise_of_change**2)
    weight = llr_sum([math.log1p(change)], shift=rules.shift(), variance=variance)
    if weight > CLOSE_AT:
        return None
    reason = (
        f"{case.screened.reason}; against tonight's slowdown (B/A {case.tonight:.2f}) that change weighs "
        f"{weight:+.2f} (PASS at {CLOSE_AT:+.2f}; SD of one night's change {math.sqrt(variance):.1%}): it does not "
        "carry tonight's slowdown, no boot pair needed"
    )
    return case.base(Status.PASS, reason), case.result


def _trial_to_pairs(case: CellCase) -> Judged | None:
    """A trial's cell that neither tonight's boots of A nor its screen answered goes to boot pairs asking tonight's
    question: a screen within its band passes a build on less evidence than that question needs, and an open
    regression's "still regressed" (a trip against the accepted nights) is what every step of a host that drifted
    since them shows, good or not."""
    if case.tonight is None:
        return None
    found = f"{case.gate.reason}; {case.screened.reason}"
    why = f"tripped ({found})" if case.tripped else f"not answered by its screen ({found})"
    return _decide_trip(case, case.base(Status.INCONCLUSIVE, why), case.result)


def _open_regression_rule(case: CellCase) -> Judged | None:
    """A clean screen cannot close a regression: a good night of the regressed build would pass it and make that
    build the new A. Only pairs against A, or with none, a recovery that persists in the history, can say it is
    fixed; a night that still trips needs no pairs to stay open (pairs cost boots where one server fits)."""
    found = None if case.same_build else _open_regression(case.ctx, case.cell, case.metric)
    if found is None:
        return None
    base = case.base(Status.INCONCLUSIVE, f"a regression is open since {found.since}")
    if case.tripped and found.nights_open % REPAIR_EVERY_NIGHTS:
        # still regressed: every REPAIR_EVERY_NIGHTS-th night pairs anyway, so a fixed build on a host that has
        # since become slower can still be cleared
        why = case.gate.reason if case.gate.tripped else case.screened.reason
        return replace(base, status=Status.FAIL, reason=f"{base.reason}; still regressed: {why}"), case.result
    outcome = case.pairs_decide(base, case.result, clearable=False)  # only a real PASS closes an open regression
    if outcome.confirmation is not None:
        return outcome, case.result
    opened = f"a regression is open since {found.since} and {outcome.reason}"
    values = case.result.values(case.metric)
    return _recovery(replace(outcome, reason=opened), case.judge, found.undecided, case.nights, values), case.result


def _within_the_screen(case: CellCase) -> Judged | None:
    """Neither the screen nor the history trips, and no evidence against A is carried: PASS (XFAIL where known)."""
    # evidence carried against A is another build's: A itself adds nothing to it (pairs of a build with itself)
    held = case.evidence.carried if case.evidence is not None else None
    carried = held is not None and case.a is not None and held.a == case.a.build.id and not case.same_build
    if case.tripped or carried:
        return None
    status = Status.XFAIL if case.gate.status == "XFAIL" else Status.PASS
    reason = f"{case.gate.reason}; {case.screened.reason}{_first_note(case.a, case.ctx)}"
    return case.base(status, reason), case.result


def _first_night_gap(case: CellCase) -> Judged | None:
    """The host's first night: the file's reference is another build's or another host's, and only its fail level
    (gross breakage) can blame tonight's build."""
    if case.nights or not (case.thresholds.another_build or case.gate.status == "WARN"):
        return None
    first = _first_note(case.a, case.ctx)
    gap = _gap(case.cell, case.metric, case.gate, case.screened, build=case.thresholds.another_build, first=first)
    return gap, case.result


def _tripped_in_turns(case: CellCase) -> Judged | None:
    """In turns a night is one boot: a rerun would measure tonight's boot again, so a trip goes straight to boot
    pairs (all of them new boots: tonight's, chosen for measuring slow, would carry that into the pairs)."""
    if not case.in_turn or case.same_build:
        return None
    found = f"{case.gate.reason}; {case.screened.reason}"
    why = f"tripped ({found})" if case.tripped else f"not tripped ({found}), but undecided boot pairs are carried"
    return _decide_trip(case, case.base(Status.INCONCLUSIVE, why), case.result)


def _no_boot_left(case: CellCase) -> Judged | None:
    """Tonight's build is A itself in turns, and the night has no boot left to measure it again."""
    if not (isinstance(case.paired, InTurn) and case.paired.boots_left() < 1):
        return None
    why = f"tripped ({case.gate.reason}; {case.screened.reason}), and no boot left tonight for a rerun on a fresh boot"
    return _decide_trip(case, case.base(Status.INCONCLUSIVE, why), case.result)


def _measured_again(case: CellCase) -> Judged:
    """A rerun: PASS if it no longer trips, else decided as a trip. Tonight's build being A itself (in turns only that
    case comes here), its rerun is the first fresh boot of it (one boot where a pair costs two), side by side too:
    pairs of a build with itself decide nothing, and a rerun on the same boot would measure that boot's own offset
    again (2-core hosts' boots of one build spread by 10 % and more), so a slow boot would make an unchanged build's
    night INCONCLUSIVE however often it was asked. Without a boot to make, the rerun is on tonight's boot."""
    fresh = case.again(case.result, 1) if case.same_build and case.again is not None else None
    measured = fresh if fresh is not None else case.remeasure(case.result)
    again = "on a fresh boot" if case.in_turn or fresh is not None else "on rerun"
    values = measured.values(case.metric)
    rerun_gate, rescreened = case.judge(values), screen(case.nights, values, floor=case.least)
    first = f"{case.gate.reason}; {case.screened.reason}"
    if not (rerun_gate.tripped or _history_trips(rescreened)):
        reason = f"tripped ({first}), passed {again}: {rerun_gate.reason}; {rescreened.reason}"
        if case.same_build and case.a is not None:
            reason += f"; tonight's build is the last confirmed build itself ({case.a.build.describe()})"
        outcome = CellOutcome(case.cell, case.metric, Status.PASS, reason, case.gate, rescreened, rerun_gate)
        return outcome, measured
    why = f"tripped twice, the second time {again} ({rerun_gate.reason}; {rescreened.reason})"
    base = CellOutcome(case.cell, case.metric, Status.INCONCLUSIVE, why, case.gate, rescreened, rerun_gate)
    return _decide_trip(case, base, measured)


def _decide_trip(case: CellCase, base: CellOutcome, measured: CaseResult) -> Judged:
    """A trip that stands: never blamed on tonight's build where it is A itself, else decided by pairs against A,
    or by the history's step where no pair could be measured."""
    if case.a is not None and case.same_build:
        reason = (
            f"{base.reason}, but tonight's build is the last confirmed build itself ({case.a.build.describe()}): "
            "an unchanged build that measures slower points at the host or the night, not the build"
        )
        return replace(base, reason=reason, last_good=case.a.build), measured
    outcome = case.pairs_decide(base, measured)
    if outcome.confirmation is None:  # no pairs could be measured
        series = _step_series(case.ctx, case.cell, case.metric, measured.values(case.metric))
        return _without_pairs(base, outcome.reason, series), measured
    return outcome, measured


# How a cell is decided, in order: the first rule that answers decides (the last always does). docs/verdict.md says
# why each stands where it does.
CELL_RULES: tuple[Callable[[CellCase], Judged | None], ...] = (
    _pairs_asked,
    _not_tonights_failure,
    _against_tonights_a,
    _screen_against_tonight,
    _trial_to_pairs,
    _open_regression_rule,
    _within_the_screen,
    _first_night_gap,
    _tripped_in_turns,
    _no_boot_left,
    _measured_again,
)


def _judge_cell(case: CellCase) -> Judged:
    """The first rule of CELL_RULES that answers decides the cell."""
    for rule in CELL_RULES:
        if (judged := rule(case)) is not None:
            return judged
    raise AssertionError("the last rule decides every cell")


def _evidence(ctx: PerfContext, cell: str, metric: str) -> Evidence:
    """The cell's carried boot pairs and this host's boot spread, from the pair book (none without one)."""
    if ctx.pair_book is None:
        return Evidence()
    key = ctx.series(cell, metric)
    return Evidence(ctx.pair_book.carried(ctx.host, key), ctx.pair_book.spread(ctx.host, key))


def _yardstick(ctx: PerfContext, cell: str, metric: str, a_itself: str | None) -> tuple[list[tuple[float, ...]], int]:
    """What tonight is judged against, oldest first: this host's accepted nights, and where tonight's build is A
    itself (`a_itself`, its id), each boot of it as A in boot pairs too (then the latest BASELINE_NIGHTS of both
    together), with how many of those boots are among them.

    A night in turns is one boot, and boots of one build spread (on an H200 a 135M model's by over 20 %): an unchanged
    build judged against one fast accepted night trips however often it is booted again, while the boots it made as
    A since measured what it measures here. A changed build is never judged against them: its screen only decides
    whether boot pairs are spent, and those compare it with A's boots directly."""
    accepted = _nights(ctx, cell, metric, accepted_only=True)
    as_a = ctx.pair_book.a_boots(ctx.host, ctx.series(cell, metric), a_itself) if a_itself and ctx.pair_book else []
    if not as_a:
        return [n.values for n in accepted], 0
    dated = [((n.night, n.run_id, 0), n.values) for n in accepted] + [((b.night, b.run_id, 1), b.values) for b in as_a]
    latest = sorted(dated, key=lambda item: item[0])[-BASELINE_NIGHTS:]
    return [values for _, values in latest], sum(1 for (_, _, is_boot), _ in latest if is_boot)


@dataclass(frozen=True)
class OpenRegression:
    """A cell whose last decided night FAILed: the night it first failed, the undecided nights since its last FAIL
    (oldest first), and how many nights it has been open."""

    since: str
    undecided: list[Night]
    nights_open: int


def _open_regression(ctx: PerfContext, cell: str, metric: str) -> OpenRegression | None:
    """When this cell's last decided night (PASS, XFAIL or FAIL) FAILed, its alert is open: the night it first
    failed, the undecided nights since the last FAIL (pairs that could not decide, an A that could not be served),
    oldest first, and how many nights it has been open. A run of INCONCLUSIVE nights never closes a regression,
    however long."""
    nights = _nights(ctx, cell, metric, accepted_only=False, limit=OPEN_LOOKBACK_NIGHTS)
    streak: list[Night] = []
    for night in reversed(nights):
        if night.verdict in ACCEPTED:
            break
        streak.append(night)
    failed = [i for i, night in enumerate(streak) if night.verdict == Status.FAIL]
    if not failed:
        return None
    return OpenRegression(streak[failed[-1]].night, streak[: failed[0]][::-1], len(streak))


def _recovery(
    base: CellOutcome,
    judge: Callable[[Sequence[float]], CellVerdict],
    since: Sequence[Night],
    baseline: Sequence[Sequence[float]],
    tonight: Sequence[float],
) -> CellOutcome:
    """An open regression with no pairs to decide it. Tonight still below the baseline of accepted nights (which
    holds no night of the regression) or past the fixed reference: it persists, FAIL. Recovered only when the last
    RECOVERY_NIGHTS nights, tonight included, are each back: within the fixed reference and, once the baseline is
    long enough to screen, within it too. Between the two it stays open, INCONCLUSIVE, and out of the baseline."""

    def back(values: Sequence[float]) -> bool:
        return not (judge(values).tripped or _history_trips(screen(baseline, values)))

    tonight_screen = screen(baseline, tonight)
    if base.gate.tripped or _history_trips(tonight_screen):
        why = base.gate.reason if base.gate.tripped else tonight_screen.reason
        return replace(base, status=Status.FAIL, reason=f"{base.reason}; still regressed: {why}")
    recent = [*[night.values for night in since][-(RECOVERY_NIGHTS - 1) :], tuple(tonight)]
    count = sum(1 for _ in itertools.takewhile(back, reversed(recent)))
    if count >= RECOVERY_NIGHTS:
        recovered = f"{base.reason}; recovered: {count} nights in a row back within the baseline"
        return replace(base, status=Status.PASS, reason=recovered)
    still = f"{base.reason}; still open: {count} of {RECOVERY_NIGHTS} nights in a row back within the baseline"
    return replace(base, status=Status.INCONCLUSIVE, reason=still)


def host_reference(
    thresholds: Thresholds, cell: str, nights: Sequence[Sequence[float]], *, boots_of_a: int = 0
) -> Reference:
    """The cell's yardstick tonight. From its first accepted night on this host it is the host's own: the median of
    its accepted nights (the last BASELINE_NIGHTS), with the file's warn and fail levels, whatever the file says
    (hosts of one class differ up to 2x, and a file may have been measured on another build). Before that night,
    the file's reference, named as such. Where tonight's build is A itself, `boots_of_a` of `nights` are boots of it
    as A in boot pairs (see _yardstick), and the yardstick says so."""
    reference = thresholds.cells[cell]
    recent = [statistics.median(values) for values in nights[-BASELINE_NIGHTS:] if values]
    if not recent:
        return replace(reference, origin=reference.origin or FILE_ORIGIN)
    own = statistics.median(recent)
    boots = min(boots_of_a, len(recent))
    origin = plural(len(recent) - boots, "accepted night")
    if boots:
        origin += f" and {plural(boots, 'boot')} of this build as A in boot pairs"
    origin = f"this host's {origin}: {own:.4g} {reference.unit}"
    if reference.ref is not None and thresholds.another_build:
        origin += f"; the file's {reference.ref:g} was measured on another build"
    elif reference.ref is not None:
        origin += f", {own / reference.ref - 1:+.0%} from the file's {reference.ref:g}"
    return replace(reference, ref=own, pending=None, origin=origin)


def _floor(thresholds: Thresholds, cell: str, nights: Sequence[Sequence[float]]) -> Reference | None:
    """The file's reference as a floor for gross breakage on every host, once the host's own nights judge the cell:
    a night below its fail level FAILs whatever this host measured before. None where the file is still the
    yardstick, has no reference, or was measured on another build (no floor for this pipeline's builds)."""
    reference = thresholds.cells[cell]
    if not nights or thresholds.another_build or reference.ref is None:
        return None
    return replace(reference, origin=f"{reference.origin or FILE_ORIGIN}, a floor on every host")


def _gate(reference: Reference, floor: Reference | None, values: Sequence[float]) -> CellVerdict:
    """Tonight against the cell's reference, or against the floor where it falls below the floor's fail level."""
    gate = judge_cell(reference, values)
    if floor is None or gate.status in ("FAIL", "XFAIL"):
        return gate
    below = judge_cell(floor, values)
    if below.status not in ("FAIL", "XFAIL"):
        return gate
    return replace(below, reason=f"{below.reason}; against this host's own: {gate.reason}")


def _first_note(a: LastConfirmed | None, ctx: PerfContext) -> str:
    """The very first nights have no A: the verdict says so, and tonight's accepted build becomes the first."""
    if a is not None or not ctx.record or ctx.build is None:
        return ""
    return "; no confirmed build yet, tonight's becomes the first"


def _step_series(ctx: PerfContext, cell: str, metric: str, tonight: Sequence[float]) -> list[float]:
    """Nightly medians for the step test: a baseline of accepted nights, then the recent healthy nights whatever
    their verdict (a persistent step is made of nights that were not accepted), then tonight."""
    recent = _nights(ctx, cell, metric, accepted_only=False, limit=STEP_RUN_NIGHTS - 1)
    first = min((n.night, n.run_id) for n in recent) if recent else None
    baseline = [
        n for n in _nights(ctx, cell, metric, accepted_only=True) if first is None or (n.night, n.run_id) < first
    ]
    return [statistics.median(n.values) for n in baseline + recent] + [statistics.median(tonight)]


def _gap(cell: str, metric: str, gate: CellVerdict, screened: Screen, *, build: str | None, first: str) -> CellOutcome:
    """A host's first night of a cell, tripped against a reference it did not measure: off a file measured on
    another build, two builds differ; off this pipeline's file, past its warn level but above its fail level, this
    host is slower than the one the file was measured on (a slow host is not a slow build). Nothing says tonight's
    build regressed: the gap is reported with where the reference came from, tonight's build (having passed
    everything else) becomes the cell's first A, and this host's own nights judge the next ones."""
    assert gate.change is not None  # a tripped gate has a reference
    if build is not None:
        gap = f"{gate.change:+.1%} against a reference measured on another build ({build})"
    else:
        gap = (
            f"{gate.change:+.1%} against the file's reference, above its fail level {gate.fail_bound:.4g}: the first "
            "night on this host, which is slower than the file's (a slow host is not a slow build)"
        )
    reason = f"gap, not a regression: {gate.value:.4g} {gate.unit} vs {gate.ref:g}, {gap}; {screened.reason}{first}"
    return CellOutcome(cell, metric, Status.PASS, reason, gate, screened, gap=gap)


def _without_pairs(base: CellOutcome, missing: str, medians: Sequence[float]) -> CellOutcome:
    """No A to measure against: a fixed fail level or a persistent step in the history may still blame the build."""
    last_gate = base.rerun_gate or base.gate  # in turns there is no rerun: the night's one boot was measured once
    if last_gate.status == "FAIL":  # far past a fixed reference (missing kernels): no comparison needed
        again = "rerun too" if base.rerun_gate is not None else "one boot measured"
        return replace(base, status=Status.FAIL, reason=f"{last_gate.reason} ({again}; {missing})")
    step = detect_step(medians)
    if step.fired:
        reason = f"tripped twice and the history shows a step ({missing}): {step.reason}"
        return replace(base, status=Status.FAIL, reason=reason)
    return replace(base, reason=f"{base.reason}; {missing}, so nothing confirms it")


def _move_last_good(outcomes: Sequence[CellOutcome], ctx: PerfContext) -> None:
    """A moves to tonight's build where the pairs accepted it, or where a cell has no A yet and tonight passed.

    A clean screen alone never moves an existing A: a regressed build on a lucky night would pass it and become
    its own reference (a -5 % step escapes the screen on its first night one time in eight), and builds that
    each lose 0.3 % would hand A on night after night so that no pair ever spans the whole creep.
    """
    if ctx.book is None or ctx.build is None:
        return
    for outcome in outcomes:
        key = ctx.series(outcome.cell, outcome.metric)
        if not outcome.accepted:
            continue
        if outcome.confirmation is not None:
            slack = A_MOVE_MAX_LOSS_IN_TURN if outcome.in_turn else A_MOVE_MAX_LOSS
            if outcome.confirmation.ci_low < 1.0 - slack:
                continue
            how = f"pairs (B/A {outcome.confirmation.mean_ratio:.4f}, {outcome.confirmation.ci_level:.0%} CI from "
            how += f"{outcome.confirmation.ci_low:.4f})"
        elif ctx.book.last_good(key) is None:
            how = "the first accepted night"
        else:
            continue
        ctx.book.accept(key, ctx.build, night=ctx.night, run_id=ctx.run_id, how=how)


def _history_trips(screened: Screen) -> bool:
    """With no accepted night on this host there is no history to speak: the file's reference judges alone."""
    return screened.tripped and screened.nights_used >= 1


def _record(results: Sequence[CaseResult], ctx: PerfContext, health: HealthReport, verdicts: dict[str, Status]) -> None:
    facts = health_facts_for_history(health)
    samples = [
        Sample(
            ctx.run_id,
            ctx.night,
            ctx.hardware,
            ctx.host,
            ctx.entry,
            cell,
            metric,
            value,
            build="candidate",
            commits=ctx.commits,
            health=facts,
            verdict=verdicts.get(cell, Status.SKIPPED),
        )
        for result in results
        for cell, metric in _charted(result)
        for value in result.values(metric)
        if math.isfinite(value)
    ]
    ctx.history.record(samples)


def _charted(result: CaseResult) -> list[tuple[str, str]]:
    """The judged metrics, plus the prefill cell's time to first token: kept for the trend charts, never judged."""
    return [*_cells(result), (result.pp_cell.name, "e2e_ttft")]
