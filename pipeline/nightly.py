"""The nightly: candidate, weights, entries, decide, publish, alert, report, as one short visible list of stages."""

from __future__ import annotations

import functools
import json
import os
import socket
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from pipeline.config.bundle import Config
from pipeline.config.matrix import ModelEntry, Profile
from pipeline.errors import PipelineCrash, SparkNightlyError, UsageError
from pipeline.infra.cache_lock import exclusive
from pipeline.infra.confirmed import ConfirmedBook
from pipeline.infra.disk_space import is_disk_full, out_of_space
from pipeline.infra.files import write_atomically
from pipeline.infra.git import commits_between
from pipeline.infra.history import History
from pipeline.infra.runtime_cache import prune_runtimes
from pipeline.infra.supply import Supply
from pipeline.infra.wheel_cache_budget import prune_wheels
from pipeline.infra.workshop import Workshop
from pipeline.outcome import Failure, Outcome
from pipeline.places import CacheDir, RunDir
from pipeline.progress import Progress, Say, clock_text
from pipeline.settings import Settings
from pipeline.stages.aftermath.alert import BLIND_KEY, AlertEvent, raise_alerts
from pipeline.stages.aftermath.alert_backends import deliver_alerts
from pipeline.stages.aftermath.culprit_run import WHEELS_ENTRY, CulpritFindings, NightRef, find_culprit
from pipeline.stages.aftermath.durations import Durations
from pipeline.stages.aftermath.report import write_reports
from pipeline.stages.aftermath.report_html import Series, collect_series, render_html
from pipeline.stages.aftermath.suspects import describe_main_suspects, record_last_good
from pipeline.stages.build.build_plan import BuildPlan
from pipeline.stages.build.native_base import NativeBuilds
from pipeline.stages.build.night_build import build_tonight
from pipeline.stages.prove.boot import Candidate
from pipeline.stages.prove.candidate import NightCandidate, prepare_night_candidate
from pipeline.stages.prove.entry_run import EntryContext, run_entry, save_outcome
from pipeline.stages.prove.supplies import night_supply, require_supplies
from pipeline.stages.prove.weights_stage import EntryWeights, prepare_weights
from pipeline.stages.release.fixes import fixed_tonight, night_sources
from pipeline.stages.release.notes import release_notes
from pipeline.stages.release.publish import Night, build_manifest, inspection_summary, publish_night
from pipeline.stages.release.stores import open_store
from pipeline.status import Status, worst

UNFINISHED_SHARD = "not run: no shard handed over its result (see this run's test jobs)"


@dataclass(frozen=True)
class NightPlan:
    """Who runs tonight and where everything goes."""

    run_id: str
    night: str
    run: RunDir
    profile: Profile
    entries: tuple[ModelEntry, ...]
    # a run this command started under a name of its own: a built profile builds its candidate in the night (a named
    # run is the workflow's, whose build job ran `spark-nightly build --run-id` first)
    unnamed: bool = False


def plan_night(
    settings: Settings, config: Config, *, only: Sequence[str], resume: str | None, run_id: str | None = None
) -> NightPlan:
    """Start a run, or continue one (its night and, unless `only` says otherwise, the entries it was started with)."""
    profile = config.matrix.profiles[settings.profile]
    places = settings.places
    if run_id and places.run(run_id).night.exists():
        resume = run_id  # a shard of a night another shard started, or a named run started again
    if resume:
        resumed = places.run(resume)
        if not resumed.night.exists():
            raise UsageError(f"--resume {resume}: no run {resumed.root} to continue")
        started = json.loads(resumed.night.read_text())
        entries = config.matrix.select(profile.name, only or started.get("entries", ()))
        return NightPlan(resume, started["night"], resumed, profile, entries)
    entries = config.matrix.select(profile.name, only)
    named = run_id is not None
    run_id = run_id or time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    night = time.strftime("%Y-%m-%d", time.gmtime())
    run = places.run(run_id)
    run.root.mkdir(parents=True, exist_ok=True)
    started = {"run_id": run_id, "night": night, "profile": profile.name, "entries": [e.id for e in entries]}
    write_atomically(run.night, json.dumps(started))
    return NightPlan(run_id, night, run, profile, entries, unnamed=not named)


@dataclass
class NightRun:
    """Tonight as the stages fill it in, one after the other."""

    settings: Settings
    config: Config
    plan: NightPlan
    progress: Progress
    publish: bool  # False for a shard: publishing and alerts are left to the merge
    durations: Durations
    night: NightCandidate | None = None
    weights: dict[str, EntryWeights] = field(default_factory=dict)  # by entry id: verified files, or the problem
    outcomes: list[Outcome] = field(default_factory=list)
    verdict: Status = Status.SKIPPED  # the worst required entry's; CRASH is said apart (crash)
    findings: CulpritFindings | None = None
    publish_note: str = ""
    crash: str | None = None
    events: list[AlertEvent] = field(default_factory=list)
    alert_problems: list[str] = field(default_factory=list)
    report: Path | None = None
    merge: bool = False  # the merge of shards: an entry no shard handed over is ABORTED, never run here

    @property
    def built(self) -> bool:
        """A night built from source (its commits are what alerts and culprits name), not a pinned runtime."""
        return self.night is not None and self.night.plan is not None

    @functools.cached_property
    def supply(self) -> Supply:
        """Where tonight's runtimes and packages come from (pip, a wheelhouse, over a base), read once."""
        return night_supply(self.settings, self.plan.profile)

    @functools.cached_property
    def shop(self) -> Workshop:
        """Tonight's workshop: the cache, the supply and the night's voice, for every stage that makes something."""
        return Workshop(CacheDir(self.settings.places.cache), self.supply, self.progress.say)

    @functools.cached_property
    def build_plan(self) -> BuildPlan:
        """A built night's plan (its commits and PRs), read once from the run's folder."""
        return BuildPlan.load(self.plan.run.plan)

    @property
    def verdict_text(self) -> str:
        """The verdict as run.json and the console say it: a status, or CRASH when the pipeline itself broke."""
        return "CRASH" if self.crash is not None else self.verdict.value


@dataclass(frozen=True)
class Stage:
    """One stage of the night: its name, what it does (for --dry-run), and whether it runs after a crash."""

    name: str
    does: str
    run: Callable[[NightRun], None]
    after_crash: bool = False  # alerts and reports still run when an earlier stage crashed


def run_nightly(
    settings: Settings,
    config: Config,
    plan: NightPlan,
    *,
    progress: Progress,
    publish: bool = True,
    merge: bool = False,
) -> int:
    """Every stage in order; one entry's failure never stops the others; our own crash is reported as such."""
    durations = Durations(settings.places.state.durations)
    state = NightRun(settings, config, plan, progress, publish, durations, merge=merge)
    progress.say(f"nightly {plan.night}, run {plan.run_id}, profile {plan.profile.name}: {len(plan.entries)} entries")
    for stage in STAGES:
        if state.crash is not None and not stage.after_crash:
            continue
        try:
            stage.run(state)
        except (KeyboardInterrupt, SparkNightlyError):
            raise
        except Exception as exc:  # our bug: reported as the pipeline's failure, never as a regression
            if is_disk_full(exc):  # the host's: no later stage could write its verdict either
                raise out_of_space(exc, settings.places.written()) from exc
            if stage.after_crash:
                raise
            state.crash = "".join(traceback.format_exception(exc))[-4000:]
    where = f"report {state.report} (summary.md, junit.xml, run.json beside it)"
    print(f"nightly {plan.night}: {state.verdict_text}; {where}")
    print(f"release: {state.publish_note or 'nothing published'}")
    if state.crash is not None:
        raise PipelineCrash(f"the pipeline crashed (see {plan.run.alerts}); no wheel is blamed")
    return worst(o.status for o in state.outcomes if o.required).exit_code


def _stage_candidate(state: NightRun) -> None:
    with state.progress.step("candidate", state.durations.expected("candidate")):
        started = time.monotonic()
        require_supplies(state.supply, state.plan.profile, state.plan.entries, state.settings.places.cache)
        run = state.plan.run
        built = None
        if state.plan.profile.candidate_from == "build" and not run.build_record.exists() and state.plan.unnamed:
            # a plain `spark-nightly nightly` of a built profile: the night builds its own candidate
            built = build_tonight(state.settings, state.plan.profile, run, state.shop)
        state.night = prepare_night_candidate(
            state.plan.profile,
            state.shop,
            run=state.plan.run,
            wheels_dir=state.settings.places.wheels,
            built=built.runtime if built is not None else None,
        )
        state.durations.record("candidate", time.monotonic() - started)


def _stage_weights(state: NightRun) -> None:
    assert state.night is not None  # the candidate stage ran
    if state.merge or state.night.refused is not None:
        return  # the merge runs no entry, and refused wheels boot none
    plan = state.plan
    with state.progress.step("weights", state.durations.expected("weights")):
        started = time.monotonic()
        state.weights = prepare_weights(weights_wanted(plan), state.shop, plan.run.logs("weights"))
        state.durations.record("weights", time.monotonic() - started)


def weights_wanted(plan: NightPlan) -> list[ModelEntry]:
    """The entries whose weights tonight needs: not one already run (a resumed night), nor one this runner lacks the
    hosts for (it is skipped at cluster, and a cluster entry's model is the matrix's largest download)."""
    return [e for e in plan.entries if not plan.run.entry(e.id).exists() and not plan.profile.lacks_hosts_for(e)]


def _stage_entries(state: NightRun) -> None:
    assert state.night is not None  # the candidate stage ran
    if state.night.refused is not None:
        state.outcomes = refused_outcomes(state.plan.entries, state.night.refused)
    else:
        state.outcomes = run_entries(state, state.night.candidate)


def _stage_decide(state: NightRun) -> None:
    state.verdict = decide(state.outcomes)


def _stage_culprits(state: NightRun) -> None:
    # INCONCLUSIVE or ABORTED blames nobody; a shard leaves it to the merge; a pinned runtime has no commits to try
    if state.built and state.publish and state.verdict == Status.FAIL:
        with state.progress.step("culprits"):
            plan = state.plan
            ref = NightRef(plan.run_id, plan.night, plan.run)
            state.findings = find_culprit(
                state.settings,
                state.config,
                plan.profile,
                ref,
                state.outcomes,
                supply=state.supply,
                say=state.progress.say,
            )


def decide(outcomes: Sequence[Outcome]) -> Status:
    """PASS when every required entry passed (or failed as expected); optional entries only raise alerts."""
    required = [o.status for o in outcomes if o.required]
    return worst(required) if required else Status.SKIPPED


def run_entries(state: NightRun, candidate: Candidate) -> list[Outcome]:
    """Each entry in turn, saved as it ends; an entry a resumed run finished before is taken over, not rerun."""
    settings, plan, progress, durations = state.settings, state.plan, state.progress, state.durations
    outcomes = []
    say = progress.say
    commits = _commits(plan.profile, state.build_plan if state.built else None)
    build = state.night.build_ref(night=plan.night, commits=commits) if state.night is not None else None
    for number, entry in enumerate(plan.entries, 1):
        saved = plan.run.entry(entry.id)
        if saved.exists():  # --resume: a finished entry is not run again
            outcome = Outcome.from_json(json.loads(saved.read_text()))
            say(f"{entry.id}: {outcome.status.value} (finished before the interruption, or by a shard)")
            outcomes.append(outcome)
            continue
        if state.merge:
            say(f"{entry.id}: ABORTED: no shard handed over its result")
            outcomes.append(Outcome(entry.id, Status.ABORTED, "shard", UNFINISHED_SHARD, entry.required, 0.0))
            continue
        weights = state.weights.get(entry.id)
        if weights is not None and weights.problem:  # never served from a cache that failed its check
            outcome = Outcome(
                entry.id, Status.ABORTED, "weights", f"not run: {weights.problem}", entry.required, weights.duration_s
            )
        else:
            left = durations.expected_total(e.id for e in plan.entries[number - 1 :])
            night_left = f"; the night's entries took {clock_text(left)} last time" if left else ""
            say(f"entry {number}/{len(plan.entries)}: {entry.id}{night_left}")
            with progress.step(f"[{number}/{len(plan.entries)}] {entry.id}", durations.expected(entry.id)):
                ctx = EntryContext(
                    state.config,
                    candidate,
                    settings.places.cache,
                    settings.places.state,
                    plan.run,
                    plan.night,
                    commits,
                    say,
                    on_stage=progress.stage,
                    build=build,
                    boots_spent=sum(o.numbers.get("turns", {}).get("boots", 0) for o in outcomes),
                    supply=state.supply,
                )
                outcome = run_entry(entry, ctx)
            if weights is not None:  # the files it was served from, carried with its outcome to the merge
                outcome = replace(outcome, numbers={**outcome.numbers, "weights": weights.to_json()})
        save_outcome(saved, outcome)
        _save_series(state, entry.id)
        if outcome.status in {Status.PASS, Status.XFAIL}:  # a failed entry ends early: no guide for tomorrow
            durations.record(entry.id, outcome.duration_s)
        say(f"{entry.id}: {outcome.status.value} at {outcome.stage}: {outcome.reason} ({outcome.duration_s:.0f} s)")
        outcomes.append(outcome)
    return outcomes


def refused_outcomes(entries: Sequence[ModelEntry], problems: str) -> list[Outcome]:
    """Inspection refused tonight's wheels: that is the night's failure, and no entry is booted on them."""
    wheels = Outcome(
        WHEELS_ENTRY, Status.FAIL, "inspect", f"inspection refused the wheels: {problems}", True, 0.0,
        failures=(Failure("wheels:inspect", "wheel inspection", problems),),
    )  # fmt: skip
    return [wheels] + [
        Outcome(e.id, Status.ABORTED, "inspect", "not run: inspection refused tonight's wheels", e.required, 0.0)
        for e in entries
    ]


def _stage_publish(state: NightRun) -> None:
    if not state.publish:
        state.publish_note = "a shard: publishing is left to the merge"
        return
    assert state.night is not None  # the candidate stage ran
    with state.progress.step("publish"):
        state.publish_note = _publish(
            state.settings,
            state.plan,
            state.outcomes,
            verdict=state.verdict,
            night=state.night,
            findings=state.findings,
            say=state.progress.say,
        )
    if state.built and state.verdict in {Status.PASS, Status.XFAIL}:  # the range the next failure blames
        last_good = state.settings.places.state.last_good
        record_last_good(last_good, state.build_plan, state.plan.night)


def _publish(
    settings: Settings,
    plan: NightPlan,
    outcomes: Sequence[Outcome],
    *,
    verdict: Status,
    night: NightCandidate,
    findings: CulpritFindings | None,
    say: Say,
) -> str:
    culprits: dict[str, Any] | None = None
    dropped: list[dict[str, str]] = []
    weights = {o.entry: o.numbers["weights"] for o in outcomes if "weights" in o.numbers}  # trials don't record them
    if verdict not in {Status.PASS, Status.XFAIL}:
        if findings is None or findings.replacement is None or findings.search is None:
            say(f"publish: skipped, the night is {verdict.value}")
            return ""
        dropped = [{"pr": str(pr), "why": why} for pr, why in findings.search.culprits]
        outcomes = _verified(outcomes, findings.replacement_outcomes)
        if unverified := [o.entry for o in outcomes if o.status not in {Status.PASS, Status.XFAIL}]:
            say(f"publish: skipped; without {_names(dropped)} the entries {', '.join(unverified)} were never run")
            return ""
        without = _names(dropped)
        say(f"publish: the night is {verdict.value}; publishing main plus the PRs that passed, without {without}")
        night = findings.replacement
        culprits = {"dropped": dropped, "search": findings.search.to_json()}
    manifest = build_manifest(
        night=plan.night,
        run_id=plan.run_id,
        profile=plan.profile.name,
        wheels=night.wheels,
        lock=night.lock,
        plan=night.plan,
        host={"hostname": socket.gethostname()},
        health={o.entry: o.numbers["health"] for o in outcomes if "health" in o.numbers} or None,
        entries=[_manifest_entry(o, weights.get(o.entry)) for o in outcomes],
        report=str(plan.run.summary),
        culprits=culprits,
        inspection=inspection_summary(plan.run),
        fixes=fixed_tonight(
            settings.places.state.alerts,
            [o.entry for o in outcomes if o.status in {Status.PASS, Status.XFAIL}],
            night_sources(night.plan),
        ),
    )
    files = [*night.wheels, night.lock]
    cache_dir = settings.places.cache

    def notes(tag: str, previous: tuple[str, Mapping[str, Any]] | None) -> str:
        return release_notes(tag, manifest, previous, count=partial(commits_between, cache_dir))

    night_of = Night(plan.night, plan.run_id, True, manifest)
    release = publish_night(open_store(settings), night_of, files, say=say, notes=notes)
    without = f" without {_names(dropped)}" if dropped else ""
    return f"published {release.tag} to the {settings.publish_target} store{without}"


def _names(dropped: Sequence[dict[str, str]]) -> str:
    return ", ".join(d["pr"] for d in dropped)


def _verified(night_outcomes: Sequence[Outcome], trial_outcomes: Sequence[Outcome]) -> list[Outcome]:
    """The published build's entries: the failing ones as its trial ran them, the others as the full night did."""
    rerun = {o.entry: o for o in trial_outcomes}
    return [
        rerun.get(o.entry)
        or replace(o, reason=f"{o.reason} (measured on tonight's full build, before the culprits were dropped)")
        for o in night_outcomes
        if o.entry != WHEELS_ENTRY
    ]


def _stage_alerts(state: NightRun) -> None:
    if not state.publish and state.crash is None:  # a shard leaves the alerts of its entries to the merge
        return
    plan, findings = state.plan, state.findings
    alerts_json = state.settings.places.state.alerts
    with exclusive(alerts_json):  # one writer of the alerts at a time: the night, or a pipeline-failed job
        state.events = raise_alerts(
            state.outcomes,
            night=plan.night,
            run_id=plan.run_id,
            state_path=alerts_json,
            suspects=findings.suspects if findings is not None else _suspects(state),
            crash=state.crash,
            report=_report_link(plan),
            sources=night_sources(json.loads(plan.run.plan.read_text())) if state.built else None,
        )
        state.alert_problems = deliver_alerts(
            state.events, settings=state.settings, state_path=alerts_json, run=plan.run, say=state.progress.say
        )


def _stage_reports(state: NightRun) -> None:
    """run.json, summary.md, junit.xml, then report.html with every entry's history."""
    plan, findings = state.plan, state.findings
    run = {
        "run_id": plan.run_id,
        "night": plan.night,
        "profile": plan.profile.name,
        "verdict": state.verdict_text,
        "publish": state.publish_note,
        "host": socket.gethostname(),
        "alerts": [{"key": e.key, "action": e.action, "title": e.title} for e in state.events],
        # the gate saw nothing it can judge (see stages/aftermath/blind.py): the run is not green
        "blind": [e.body for e in state.events if e.key == BLIND_KEY and e.action != "closed"],
        "alert_problems": state.alert_problems,
        "suspects": findings.suspects if findings is not None else None,
        "culprits": findings.search.to_json() if findings is not None and findings.search is not None else None,
        "bisection": findings.bisection.to_json() if findings is not None and findings.bisection is not None else None,
        "inspection": inspection_summary(plan.run),  # how tonight's build was made and what inspection noted
    }
    write_reports(plan.run, run, state.outcomes)
    series = [s for e in plan.entries for s in _series_of(state, e.id)]
    state.report = plan.run.report
    write_atomically(state.report, render_html(run, state.outcomes, series))


def _stage_cache(state: NightRun) -> None:
    places = state.settings.places
    runtimes = CacheDir(places.cache).runtimes
    confirmed = ConfirmedBook(places.state.confirmed).builds()  # every cell's A: pairs may boot it any later night
    keep = frozenset(Path(b.ref).name for b in confirmed if b.kind == "runtime" and Path(b.ref).parent == runtimes)
    try:
        prune_runtimes(places.cache, state.settings.cache_runtimes_max_gib, keep=keep, say=state.progress.say)
    except OSError as exc:  # a full or read-only disk: the night's verdict stands, the next night tries again
        state.progress.say(f"cache: runtimes not pruned: {exc}")
    bases = NativeBuilds(CacheDir(places.cache).native_builds).wheels()  # a later night's overlay bases
    try:
        prune_wheels(places.cache, state.settings.cache_wheels_max_gib, keep_wheels=bases, say=state.progress.say)
    except OSError as exc:
        state.progress.say(f"cache: wheels not pruned: {exc}")


def _save_series(state: NightRun, entry_id: str) -> None:
    """The entry's charts as its shard's history draws them, handed over with its outcome to the merge."""
    path = state.plan.run.series(entry_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps([s.to_json() for s in _series_of(state, entry_id, saved=False)]) + "\n")


def _series_of(state: NightRun, entry_id: str, *, saved: bool = True) -> list[Series]:
    """An entry's charts: as handed over by the shard that ran it, else from this host's history."""
    path = state.plan.run.series(entry_id)
    if saved and path.exists():
        return [Series.from_json(s) for s in json.loads(path.read_text())]
    history = History(state.settings.places.state.history)
    return collect_series(history, state.config, state.plan.profile.hardware, [entry_id])


def _manifest_entry(outcome: Outcome, weights: Mapping[str, Any] | None) -> dict[str, Any]:
    entry = {
        "id": outcome.entry,
        "status": outcome.status.value,
        "stage": outcome.stage,
        "reason": outcome.reason,
        "numbers": {k: v for k, v in outcome.numbers.items() if k != "weights"},
        "duration_s": outcome.duration_s,
    }
    return entry | ({"weights": dict(weights)} if weights is not None else {})


def _report_link(plan: NightPlan) -> str:
    """The Actions run when on Actions (its summary and artifacts hold the report), else the report's path."""
    server, repo, run = (os.environ.get(f"GITHUB_{name}") for name in ("SERVER_URL", "REPOSITORY", "RUN_ID"))
    if server and repo and run:
        return f"{server}/{repo}/actions/runs/{run}"
    return str(plan.run.report)


def _commits(profile: Profile, build_plan: BuildPlan | None) -> dict[str, str]:
    """What tonight's build is made of, for the history: each source's commit and main, or the pinned runtime."""
    if build_plan is None:
        return {"candidate": " ".join(profile.candidate_requirements)}
    commits = {}
    for source in build_plan.sources:
        commits[source.name] = source.commit
        commits[f"{source.name} main"] = source.main_commit
        if source.grafted:
            commits[f"{source.name} PRs"] = " ".join(str(number) for number in source.grafted)
    return commits


def _suspects(state: NightRun) -> str:
    """Who to look at when no culprit search ran: main's ranges since the last good night, or the host."""
    plan = state.plan
    if state.built:
        last_good = state.settings.places.state.last_good
        return describe_main_suspects(last_good, state.build_plan, state.settings.places.cache)
    pinned = " ".join(plan.profile.candidate_requirements)
    return (
        f"none upstream: profile {plan.profile.name} runs the pinned {pinned} (look at the host, the model, the data)"
    )


STAGES = (
    Stage("candidate", "build and inspect tonight's wheels, or install the profile's pinned runtime", _stage_candidate),
    Stage(
        "weights",
        "each entry's weights in the cache (Hub repositories at their pinned commit, downloaded once), every file "
        "hashed and checked; an entry whose weights fail is ABORTED, never served",
        _stage_weights,
    ),
    Stage(
        "entries",
        "for each entry: health, smoke, boot, golden, perf (pairs against the last confirmed build where a cell "
        "trips), one outcome each",
        _stage_entries,
    ),
    Stage("decide", "the night's verdict: the worst status of the required entries", _stage_decide),
    Stage("culprits", "a failing built night: main alone, then halves of its grafted PRs", _stage_culprits),
    Stage("publish", "only a passing night, as a new dated release", _stage_publish),
    Stage("alert", "open, update or close one alert per regression key", _stage_alerts, after_crash=True),
    Stage("report", "run.json, summary.md, junit.xml and report.html", _stage_reports, after_crash=True),
    Stage(
        "cache",
        "the cached runtimes and wheels past cache.runtimes_max_gib and cache.wheels_max_gib removed, least recently "
        "used first, none used within a day",
        _stage_cache,
        after_crash=True,
    ),
)
