"""The night in small, for other sources than tonight's: resolve, build (an overlay where it can be), inspect, lock,
make the candidate, and run some entries with the history read but never written. What a culprit trial (main plus
some PRs) and a bisection step (one commit of main) both do; each keeps its files in its own RunDir."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from pipeline.config.bundle import Config
from pipeline.config.matrix import ModelEntry, Profile
from pipeline.infra.git import mirror_dir
from pipeline.infra.supply import Supply
from pipeline.infra.workshop import Workshop
from pipeline.outcome import CellNumbers, Outcome, cells_of, perf_alert_key
from pipeline.places import CacheDir, RunDir
from pipeline.progress import Say
from pipeline.settings import Settings
from pipeline.stages.build.builders import BUILD_ORDER
from pipeline.stages.build.builders.base import BuildSource
from pipeline.stages.build.night_build import build_inspect_lock, toolchain_for
from pipeline.stages.build.resolve import Source, resolve_sources
from pipeline.stages.prove.candidate import NightCandidate, prepare_night_candidate
from pipeline.stages.prove.entry_run import EntryContext, run_entry, save_outcome
from pipeline.status import Status


@dataclass(frozen=True)
class TrialBuild:
    """A trial's candidate, or why it has none, and its builds in a few words ("vllm: overlay (21 s)")."""

    candidate: NightCandidate | None
    how: str
    refused: str = ""


@dataclass(frozen=True)
class TrialBench:
    """What every trial of one night shares: its settings, configuration, profile, supply and night."""

    settings: Settings
    config: Config
    profile: Profile
    supply: Supply
    night: str
    created: str  # the night's plan's time, so a trial resolves as the night did
    say: Say

    @property
    def shop(self) -> Workshop:
        """The night's workshop, in which every trial builds."""
        return Workshop(CacheDir(self.settings.places.cache), self.supply, self.say)

    def build(self, trial: RunDir, sources: Sequence[Source]) -> TrialBuild:
        """The trial's sources resolved, built, inspected, locked and made a candidate in `trial`. Raises what the
        night would (NativeBuildNeeded where a commit's natives cannot be built here, any SparkNightlyError)."""
        cache_dir = self.shop.cache_dir
        plan = resolve_sources(sources, cache_dir=cache_dir, work_dir=trial.root, created=self.created)
        plan.save(trial.plan)
        ordered = sorted(plan.sources, key=lambda source: BUILD_ORDER.index(source.name))
        built = build_inspect_lock(
            [BuildSource.from_plan(source, mirror_dir(cache_dir, source.repo)) for source in ordered],
            self.profile,
            toolchain_for(self.profile, self.settings),
            run=trial,
            out_dir=self.settings.places.wheels / trial.id,
            shop=self.shop,
            min_free_gib=self.settings.build_min_free_gib,
        )
        how = "; ".join(r.short() for r in built.results)
        if built.report.status == Status.FAIL:
            return TrialBuild(None, how, f"inspection refused the wheels (see {trial.inspection})")
        candidate = prepare_night_candidate(
            self.profile, self.shop, run=trial, wheels_dir=self.settings.places.wheels, built=built.runtime
        )
        return TrialBuild(candidate, how)

    def run(
        self,
        failed: Sequence[Failing],
        candidate: NightCandidate,
        trial: RunDir,
        *,
        least_boots: int = 1,
        earlier: Mapping[str, Mapping[str, tuple[float, ...]]] | None = None,
    ) -> list[Outcome]:
        """Each entry that failed tonight on the trial's candidate, as the night runs it up to the stage it failed at
        (a golden failure is tried by golden alone; a perf one by its cells and pairs, asking whether this build
        carries tonight's slowdown, on `least_boots` boots of it at least, counting the boots `earlier` gives by
        entry and cell: a bisection step's first look), the history read and never written."""
        ctx = EntryContext(
            self.config,
            candidate.candidate,
            self.settings.places.cache,
            self.settings.places.state,
            trial,
            self.night,
            {},
            self.say,
            record=False,
            supply=self.supply,
            step_boots=max(self.settings.culprit_step_boots, least_boots),
            least_step_boots=least_boots,
        )
        looked = earlier or {}
        outcomes = [
            run_entry(
                f.entry,
                replace(ctx, stop_after=f.stage, slowdowns=f.slowdowns, earlier_step_logs=looked.get(f.entry.id, {})),
            )
            for f in failed
        ]
        for outcome in outcomes:  # each entry's evidence, where the night keeps its own
            save_outcome(trial.entry(outcome.entry), outcome)
        return outcomes


def trial_verdict(outcomes: Sequence[Outcome]) -> tuple[Status, str]:
    """A trial's answer from its entries: FAIL where one failed again, PASS where all passed, else INCONCLUSIVE."""
    failed = [o for o in outcomes if o.status == Status.FAIL]
    if failed:
        return Status.FAIL, "; ".join(f"{o.entry}: {o.reason}" for o in failed)[:500]
    if all(o.status in {Status.PASS, Status.XFAIL} for o in outcomes):
        # a perf trial's entry says its cells' figures (golden's reason only repeats that its checks passed)
        passed = ", ".join(f"{o.entry} ({o.reason})" if o.stage == "perf" else o.entry for o in outcomes)
        passed = passed[:500] or "the wheels' inspection"
        return Status.PASS, f"what failed tonight passes: {passed}"
    return Status.INCONCLUSIVE, "; ".join(f"{o.entry}: {o.status.value}: {o.reason}" for o in outcomes)[:500]


@dataclass(frozen=True)
class Failing:
    """An entry that failed tonight, as a trial runs it again: up to the stage it failed at, and the cells that
    FAILed it, each with tonight's B/A where its pairs measured one, which the trial asks about (PairRules.
    against_tonight) and no other cell; `failures` names each failing check or cell, which a bisection step must
    fail again to be bad."""

    entry: ModelEntry
    stage: str
    slowdowns: Mapping[str, float | None] = field(default_factory=dict)
    failures: frozenset[str] = frozenset()


def failed_at(entries: Sequence[ModelEntry], outcomes: Sequence[Outcome]) -> list[Failing]:
    """The entries that failed tonight, each with the stage it failed at, its cells' slowdowns and its failures."""
    failed = {o.entry: o for o in outcomes if o.status == Status.FAIL}
    return [
        Failing(e, failed[e.id].stage, slowdowns(failed[e.id]), failure_names(failed[e.id]))
        for e in entries
        if e.id in failed
    ]


def failure_names(outcome: Outcome) -> frozenset[str]:
    """Each failing check or cell of an outcome by its alert key and subject ('m:golden drift capital-of-france')."""
    return frozenset(f"{f.key} {f.subject or f.what}" for f in outcome.failures)


def step_verdict(failing: Sequence[Failing], outcomes: Sequence[Outcome]) -> tuple[Status, str]:
    """A bisection step's answer as `git bisect` reads one: FAIL (bad) where an entry fails as it failed tonight (the
    same stage, the same checks or cells or more; a cell of tonight's that the step's pairs left undecided stands
    with them, while the step FAILs another of tonight's), PASS (good) where every entry passes what failed tonight
    (a cell of tonight's left undecided standing with the others likewise, while the step PASSes another and FAILs
    none), else SKIPPED with why: it failed otherwise (another stage, other checks, one of tonight's passing), or
    could not be judged (the host, a prerequisite). A skipped step is neither good nor bad: the search goes on
    around it."""
    tonight = {f.entry.id: f for f in failing}
    bad, other, judged = [], [], []
    for outcome in outcomes:
        was = tonight.get(outcome.entry)
        passed = _passes_part_of_tonight(outcome, was) if was is not None and outcome.stage == was.stage else ""
        judged.append(replace(outcome, status=Status.PASS, reason=f"{outcome.reason}; {passed}") if passed else outcome)
        if outcome.status in {Status.PASS, Status.XFAIL} or passed:
            continue
        if was is not None and outcome.status == Status.FAIL and outcome.stage == was.stage:
            if _fails_as_tonight(outcome, was.failures):
                bad.append(f"{outcome.entry}: {outcome.reason}")
                continue
            how = (
                "its boots answered tonight's cells both ways"
                if _split(outcome, was.failures)
                else "fails other checks"
            )
            other.append(f"{outcome.entry}: {how} at {outcome.stage}: {outcome.reason}")
        else:
            other.append(f"{outcome.entry}: {outcome.status.value} at {outcome.stage}: {outcome.reason}")
    if bad:
        return Status.FAIL, "; ".join(bad)[:500]
    if other:
        return Status.SKIPPED, "not tonight's failure: " + "; ".join(other)[:480]
    return trial_verdict(judged)


def cells_disagree(failing: Sequence[Failing], outcomes: Sequence[Outcome]) -> bool:
    """Whether a step's own boots answered tonight's cells both ways in some entry: one like the last confirmed build
    (PASS), another like tonight's build (FAIL). One slowdown slows every cell it touches, and a slow boot slows every
    cell too, most visibly the one whose gap is narrowest: another boot of the step, every cell weighed again, usually
    settles it (a bisection looks again at once, bisect.bisect_main)."""
    tonight = {f.entry.id: f.failures for f in failing}
    return any(_split(outcome, tonight.get(outcome.entry, frozenset())) for outcome in outcomes)


def _split(outcome: Outcome, tonight: frozenset[str]) -> bool:
    """Whether the outcome's own boots (not pairs) PASSed one of tonight's cells and FAILed another."""
    ended = {cell.status for cell in _tonights_cells(outcome, tonight).values() if cell.step_boots}
    return {Status.PASS, Status.FAIL} <= ended


def _fails_as_tonight(outcome: Outcome, tonight: frozenset[str]) -> bool:
    """Whether a step's FAIL at tonight's stage is tonight's failure: it fails each of tonight's checks and cells, or
    leaves some cells undecided while it fails the others. A step slowed as tonight was, whose pairs settle tg32 at
    0.52x but not pp128 (0.81x tonight, within a step's spread), carries tonight's slowdown; one that passes a cell
    of tonight's carries another failure than tonight's, or only part of it (two regressions on one day), and is
    skipped as before."""
    if not tonight:  # a failure named by its stage alone (a boot, a smoke): failing there again is failing as tonight
        return True
    failed = failure_names(outcome)
    return bool(failed & tonight) and tonight <= failed | _undecided_cells(outcome)


def _passes_part_of_tonight(outcome: Outcome, was: Failing) -> str:
    """The mirror of a step that fails some of tonight's cells and leaves the rest undecided: one that passes some of
    them, fails none and leaves the rest undecided (INCONCLUSIVE) does not carry tonight's slowdown, and is good. Its
    cells in a few words, or "" where it is not such a step (another cell or check failed, none passed, or tonight's
    failure was not its perf cells). Both wrong answers cost the same (detect/step_test.py): were only the FAIL side
    allowed its undecided cells, a good step whose narrow cell (pp128 at 0.75x beside tg32 at 0.49x) a boot left
    between the builds would be skipped where a bad one in its place is named."""
    if outcome.status != Status.INCONCLUSIVE or not was.failures:
        return ""
    cells = _tonights_cells(outcome, was.failures)
    if len(cells) != len(was.failures):  # tonight failed more than perf cells, or this step did not measure them
        return ""
    passed = sorted(name for name, cell in cells.items() if cell.status == Status.PASS)
    undecided = sorted(name for name, cell in cells.items() if cell.status == Status.INCONCLUSIVE)
    if not passed or len(passed) + len(undecided) != len(cells):
        return ""
    return f"passes {', '.join(passed)} of tonight's cells, leaves {', '.join(undecided)} undecided"


def _tonights_cells(outcome: Outcome, tonight: frozenset[str]) -> dict[str, CellNumbers]:
    """The outcome's perf cells that failed tonight (`tonight` names each as its failure did: "m:perf tg32")."""
    key = perf_alert_key(outcome.entry)
    return {name: cell for name, cell in cells_of(outcome.numbers).items() if f"{key} {name}" in tonight}


def _undecided_cells(outcome: Outcome) -> frozenset[str]:
    """The perf cells an outcome's pairs left undecided (INCONCLUSIVE), named as `failure_names` names a cell."""
    key = perf_alert_key(outcome.entry)
    cells = cells_of(outcome.numbers)
    return frozenset(f"{key} {name}" for name, cell in cells.items() if cell.status == Status.INCONCLUSIVE)


def slowdowns(outcome: Outcome) -> dict[str, float | None]:
    """Each cell that FAILed tonight, with the B/A its pairs FAILed it at (None for a cell FAILed without pairs
    measuring a slowdown)."""
    cells = cells_of(outcome.numbers)
    return {
        name: cell.b_over_a if cell.b_over_a is not None and 0 < cell.b_over_a < 1 else None
        for name, cell in cells.items()
        if cell.status == Status.FAIL
    }
