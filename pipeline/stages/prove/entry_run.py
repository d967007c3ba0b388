"""One matrix entry through health, smoke, boot, golden and perf, ending with one Outcome whatever happens."""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pipeline.checks.isa_refusal import host_lacks_for_refusal
from pipeline.checks.natives import HostIsa
from pipeline.config.bundle import Config
from pipeline.config.matrix import ModelEntry, Profile
from pipeline.errors import BootError, ClusterError, EngineError, HostUnhealthy, ProcessError, SparkNightlyError
from pipeline.infra.confirmed import BuildRef, ConfirmedBook
from pipeline.infra.cpu_class import cpu_class, cpu_flags
from pipeline.infra.files import write_atomically
from pipeline.infra.references import ReferenceStore
from pipeline.infra.supply import Supply
from pipeline.infra.weights import model_reference
from pipeline.infra.workshop import Workshop
from pipeline.outcome import Failure, Outcome, golden_alert_key
from pipeline.places import CacheDir, RunDir, StateDir
from pipeline.progress import Say, quiet
from pipeline.stages.prove.boot import Candidate, Restartable, restartable
from pipeline.stages.prove.canary import CanaryVerdict, canary_argv, judge_canary, run_canary
from pipeline.stages.prove.canary import wanted as canary_wanted
from pipeline.stages.prove.golden_run import GoldenResult, ServerLog, run_golden
from pipeline.stages.prove.health import HealthReport, judge_health, read_host_facts
from pipeline.stages.prove.judge import Judge, last_confirmed_judge, transformers_judge
from pipeline.stages.prove.memory import make_room
from pipeline.stages.prove.perf import PerfContext, PerfVerdict, Turns, measure_and_judge, perf_verdict
from pipeline.stages.prove.smoke import SmokeReport, smoke
from pipeline.stages.prove.weights_stage import served_folder
from pipeline.status import Status


@dataclass(frozen=True)
class EntryContext:
    """What an entry needs from the night around it."""

    config: Config
    candidate: Candidate
    cache_dir: Path
    state: StateDir
    run: RunDir  # the night's run folder (a culprit trial's own); the entry's logs are `run.logs(entry.id)`
    night: str
    commits: dict[str, str]
    say: Say = quiet
    record: bool = True  # a culprit trial reads the history and references but never writes them
    on_stage: Say = quiet  # told each stage as it begins (the live status line)
    build: BuildRef | None = None  # tonight's build, which the perf stage may accept as the cells' new A
    boots_spent: int = 0  # boots in turns the night's earlier entries made (against the profile's night budget)
    supply: Supply = field(kw_only=True)  # where the judge's runtime comes from (a wheelhouse, over a base): given
    # a culprit trial or bisection step: the stage the entry failed at tonight; once it passes, the entry has shown
    # what the trial asks (a golden failure needs no perf, whose boot pairs cost minutes a trial on a GPU)
    stop_after: str | None = None
    # a trial: each of the entry's cells that FAILed the night, with the B/A its pairs FAILed it at (None: none
    # measured), which the trial asks about and no other cell
    slowdowns: Mapping[str, float | None] = field(default_factory=dict)
    step_boots: int = 1  # a trial: the most boots of its build a cell it asks about may make (culprit.step_boots)
    least_step_boots: int = 1  # and the fewest it is decided on (a bisection's boundary step tried again)
    earlier_step_logs: Mapping[str, tuple[float, ...]] = field(default_factory=dict)  # and its first look's boots

    @property
    def shop(self) -> Workshop:
        """The night's workshop, for what an entry makes (a package's weights, the judge's runtime)."""
        return Workshop(CacheDir(self.cache_dir), self.supply, self.say)


def save_outcome(path: Path, outcome: Outcome) -> None:
    """An entry's outcome as JSON, whole or not at all: what a resumed run takes over and a reader reads."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(outcome.to_json(), indent=2, sort_keys=True, default=str) + "\n")


def run_entry(entry: ModelEntry, ctx: EntryContext) -> Outcome:
    """Never raises for the candidate's failures: they become the outcome. Ctrl-C and our own bugs propagate.

    The entry is its list of stages, each through EntryRun.stage (entered, timed, recorded alike): the checks before
    a boot, then the boot and what needs the server."""
    run = EntryRun(entry, ctx)
    if (skipped := _without_cluster(run)) is not None:
        return run.outcome(skipped)
    for name, step in _before_boot(run):
        if (ended := run.stage(name, step)) is not None:
            return run.outcome(ended)
    try:
        with ExitStack() as serving:
            run.stack = serving
            for name, step in (("boot", _boot), ("golden", _golden), ("perf", _perf_stage)):
                if (ended := run.stage(name, step)) is not None:
                    return run.outcome(ended)
    except ClusterError as exc:  # a host lost or unreachable says nothing of the build; Ray failing on it does
        status = Status.INCONCLUSIVE if exc.host_lost else Status.FAIL
        return run.outcome(Ended(status, "cluster" if run.now == "boot" else run.now, f"node {exc}"))
    except BootError as exc:
        return run.outcome(boot_failure_ended(exc, HostIsa(platform.machine(), cpu_flags())))
    except (EngineError, ProcessError) as exc:
        return run.outcome(Ended(Status.FAIL, run.now, f"the engine failed during {run.now}: {exc}"))
    except HostUnhealthy as exc:  # no room to boot tonight's build again after another build's turn
        return run.outcome(Ended(Status.INCONCLUSIVE, run.now, f"host unhealthy: {exc}"))
    except SparkNightlyError as exc:
        return run.outcome(Ended(Status.ABORTED, run.now, f"{type(exc).__name__}: {exc}"))
    raise AssertionError("the perf stage always ends the entry")


@dataclass(frozen=True)
class Ended:
    """How a stage ended the entry: its status, the stage that decided it, why, and its alerts."""

    status: Status
    stage: str
    reason: str
    failures: tuple[Failure, ...] = ()


@dataclass
class EntryRun:
    """One entry's run so far: what its stages found, each stage's time, and the stage running now."""

    entry: ModelEntry
    ctx: EntryContext
    started: float = field(default_factory=time.monotonic)
    now: str = "health"
    times: dict[str, float] = field(default_factory=dict)
    numbers: dict[str, Any] = field(default_factory=dict)
    health: HealthReport | None = None
    stack: ExitStack | None = None
    serving: Restartable | None = None
    turns: Turns | None = None
    golden: GoldenResult | None = None

    @property
    def profile(self) -> Profile:
        return self.ctx.config.matrix.profiles[self.entry.profile]

    @property
    def logs(self) -> Path:
        """The entry's log folder in the run's."""
        return self.ctx.run.logs(self.entry.id)

    def stage(self, name: str, step: Step) -> Ended | None:
        """Enter a stage (the live status line says it), run it, keep its time; what ended the entry, or None."""
        self.now = name
        self.ctx.on_stage(name)
        began = time.monotonic()
        try:
            ended = step(self)
        finally:
            self.times[name] = round(time.monotonic() - began, 1)
        if ended is None and name == self.ctx.stop_after:
            return Ended(Status.PASS, name, f"{name} passes, where it failed tonight (later stages not run in a trial)")
        return ended

    def outcome(self, ended: Ended) -> Outcome:
        numbers = dict(self.numbers)
        if self.turns is not None:
            numbers |= _turns(self.turns)
        if self.times:
            numbers["stage_s"] = dict(self.times)
        took = round(time.monotonic() - self.started, 1)
        return Outcome(
            self.entry.id, ended.status, ended.stage, ended.reason, self.entry.required, took,
            numbers=numbers, failures=ended.failures,
        )  # fmt: skip


Step = Callable[[EntryRun], Ended | None]
RUNBOOK_CLUSTER = "docs/runbook.md, 'Adding a second Spark'"


def _without_cluster(run: EntryRun) -> Ended | None:
    if run.profile.lacks_hosts_for(run.entry):
        reason = f"spans {run.entry.nodes} hosts; this runner has no cluster file (paths.cluster): " + RUNBOOK_CLUSTER
        return Ended(Status.SKIPPED, "cluster", reason)
    return None


def _before_boot(run: EntryRun) -> list[tuple[str, Step]]:
    """Health, the canary (where the profile runs one), smoke (a runtime of our own) and memory, in that order: the
    first that fails ends the entry before any boot."""
    stages: list[tuple[str, Step]] = [("health", _health)]
    if canary_wanted(run.profile):
        stages.append(("canary", _canary_stage))
    if run.ctx.candidate.runtime is not None:
        stages.append(("smoke", _smoke))
    return [*stages, ("memory", _memory)]


def _health(run: EntryRun) -> Ended | None:
    before = judge_health(run.profile, read_host_facts())
    for note in before.notes:  # a GB10 reports no memory of its own: said, never a failure
        run.ctx.say(f"{run.entry.id}: health: {note}")
    run.health = before
    if not before.healthy:
        return Ended(Status.INCONCLUSIVE, "health", "host unhealthy: " + "; ".join(before.reasons))
    return None


def _canary_stage(run: EntryRun) -> Ended | None:
    verdict, numbers = _canary(run.entry, run.ctx)
    if numbers:
        run.numbers["canary"] = numbers
    if verdict.host:
        return Ended(Status.INCONCLUSIVE, "health", "host unhealthy: " + "; ".join(verdict.host))
    if verdict.candidate:
        return Ended(Status.FAIL, "canary", "; ".join(verdict.candidate))
    return None


def _smoke(run: EntryRun) -> Ended | None:
    runtime = run.ctx.candidate.runtime
    assert runtime is not None  # the stage is listed only for a runtime of our own
    needed = run.entry.launch.entrypoint == "cli"
    kept = CacheDir(run.ctx.cache_dir).natives_checked
    return smoke_ended(smoke(runtime, run.profile, run.logs, entry_point_needed=needed, kept=kept))


def smoke_ended(report: SmokeReport) -> Ended | None:
    """A failing check is the build's, even on a host that lacks more; a host that cannot run the candidate (an
    instruction set no variant does without) is named, INCONCLUSIVE, and blamed on nobody: no alert, no culprit
    search, and a culprit trial or bisection step that meets it is not bad."""
    if report.reason:
        return Ended(Status.FAIL, "smoke", report.reason)
    if report.host_lack:
        return Ended(Status.INCONCLUSIVE, "smoke", "this host cannot run the candidate: " + report.host_lack)
    return None


def boot_failure_ended(exc: BootError, isa: HostIsa) -> Ended:
    """A boot that failed is the build's, unless the engine refused for instruction sets this host has none of: then,
    as at the smoke, the host is named, INCONCLUSIVE, and nobody is blamed (checks/isa_refusal.py)."""
    lack = host_lacks_for_refusal(exc.detail, isa)
    if lack is not None:
        return Ended(Status.INCONCLUSIVE, "boot", f"this host cannot run the entry: {exc.cause}: {exc.detail} ({lack})")
    return Ended(Status.FAIL, "boot", f"{exc.cause}: {exc.detail}")


def _memory(run: EntryRun) -> Ended | None:
    room = make_room(run.entry, run.profile, run.logs, say=run.ctx.say)
    if room is None:
        return None
    run.numbers["memory"] = {"need_gib": round(room.need.gib, 1), "page_cache": room.dropped}
    return None if room.ok else Ended(Status.INCONCLUSIVE, "memory", "the host cannot make room: " + room.reason)


def _boot(run: EntryRun) -> Ended | None:
    """Tonight's server, restartable, and the turns other builds take in its place where one server fits."""
    ctx, entry = run.ctx, run.entry
    assert run.stack is not None
    serving = run.stack.enter_context(
        restartable(
            entry,
            ctx.candidate,
            cache_dir=ctx.cache_dir,
            log_dir=run.logs,
            say=ctx.say,
            on_cluster_ready=_cluster_numbers(run),
        )
    )
    run.serving = serving
    run.turns = Turns(entry, run.profile, serving, ctx.cache_dir, run.logs, ctx.say, budget=_boot_budget(entry, ctx))
    run.numbers["boot_s"] = round(serving.server.boot_s, 1)
    return None


def _cluster_numbers(run: EntryRun) -> Callable[[float], None] | None:
    """A cluster entry's split and hosts in its numbers before it boots (the summary says them also when the server
    then fails), and what adds how long its hosts took to come up; None for a solo entry."""
    entry, cluster = run.entry, run.profile.cluster
    if entry.topology != "cluster" or cluster is None:
        return None
    hosts = [node.on_link for node in cluster.nodes[: entry.nodes]]
    shape: dict[str, Any] = {"split": entry.split, "hosts": hosts}
    run.numbers["cluster"] = shape

    def ready(seconds: float) -> None:
        shape.setdefault("ready_s", round(seconds, 1))  # tonight's first boot: later ones are turns in its place

    return ready


def _golden(run: EntryRun) -> Ended | None:
    """The golden set against the reference night, or a judge where there is none; a passing night's outputs become
    the reference after perf."""
    ctx, entry, profile = run.ctx, run.entry, run.profile
    assert run.serving is not None and run.turns is not None
    server = run.serving.server
    references = ReferenceStore(ctx.state.golden).load(profile.hardware, entry.id)
    model_ref = model_reference(entry, ctx.shop.saying(quiet), ctx.run.logs(entry.id))  # made by the weights stage
    with ExitStack() as judge_serving:  # a judge served beside tonight's is stopped before perf
        judge = None if references is not None else _judge(entry, model_ref, ctx, judge_serving, run.turns)
        golden = run_golden(
            server.client,
            entry,
            ctx.config.golden[entry.golden],
            model_ref=model_ref,
            references=references,
            judge=judge,
            restart=run.serving.restart,
            files_at=served_folder(entry, ctx.cache_dir),
            server_log=ServerLog(server.log_path, profile.accelerator),
            say=ctx.say,
        )
    run.numbers["golden_s"] = round(golden.duration_s, 1)
    # what drift measured on every prompt, passed or not: the figures a profile's tolerances are calibrated on
    run.numbers["drift_evidence"] = {v.subject: dict(v.evidence) for v in golden.verdicts if v.check == "drift"}
    if golden.unjudged:  # no reference and no judge: the outputs are not recorded as tomorrow's reference
        run.numbers["drift"] = f"INCONCLUSIVE: {len(golden.unjudged)} answers not judged, nothing recorded"
        ctx.say(f"{entry.id}: drift INCONCLUSIVE (no reference night, no judge); the outputs are not recorded")
    if not golden.passed:
        reason, failures = _golden_failures(entry, golden)
        return Ended(Status.FAIL, "golden", reason, failures)
    run.golden = golden
    return None


def _perf_stage(run: EntryRun) -> Ended:
    """The cells measured and judged; the entry's verdict. A passing night with recordable answers is the next
    drift reference."""
    ctx, entry = run.ctx, run.entry
    assert run.turns is not None and run.health is not None and run.golden is not None
    began = time.monotonic()
    perf = _perf(entry, run.turns, ctx, profile_hardware=run.profile.hardware, before=run.health)
    run.numbers |= {
        "perf_s": round(time.monotonic() - began, 1),
        "cells": dict(perf.cells),
        "health": dict(perf.health),
    }
    if run.turns.boots:
        ctx.say(f"{entry.id}: {run.turns.cost()}")
    status, golden = perf.status, run.golden
    if status == Status.PASS and ctx.record and golden.recordable:  # tonight is the new reference
        store = ReferenceStore(ctx.state.golden)
        store.save(run.profile.hardware, entry.id, ctx.night, golden.generations, golden.identity_files)
    return Ended(status, "perf", perf.reason, perf.failures)


def _canary(entry: ModelEntry, ctx: EntryContext) -> tuple[CanaryVerdict, dict[str, Any]]:
    """The accelerator canary in the candidate, where the profile runs one: its verdict and its numbers. A canary
    that cannot run is said and left to smoke and boot, which judge the candidate itself."""
    profile = ctx.config.matrix.profiles[entry.profile]
    argv = canary_argv(ctx.candidate, ctx.cache_dir, f"spark-nightly-canary-{ctx.run.id}-{entry.id}")
    if not canary_wanted(profile) or argv is None:
        return CanaryVerdict(), {}
    ctx.on_stage("canary")
    try:
        result = run_canary(argv, ctx.run.logs(entry.id) / f"{entry.id}-canary.log")
    except ProcessError as exc:
        first = str(exc).splitlines()[0]
        ctx.say(f"{entry.id}: the canary could not run ({first}); smoke and boot judge the candidate")
        return CanaryVerdict(), {"error": first}
    ctx.say(f"{entry.id}: canary {result.describe()}")
    verdict = judge_canary(profile, result)
    for note in verdict.notes:
        ctx.say(f"{entry.id}: canary: {note}")
    numbers = {"tflops": round(result.tflops, 4), "sm_mhz": result.sm_mhz, "reasons": result.reasons}
    return verdict, numbers | ({"notes": list(verdict.notes)} if verdict.notes else {})


def _judge(entry: ModelEntry, model_ref: str, ctx: EntryContext, stack: ExitStack, turns: Turns) -> Judge | None:
    """A night with no drift reference: transformers on the CPU profile (unless it asks for the last confirmed
    build), the last confirmed build elsewhere: beside tonight's, or in a boot of its own where one server fits."""
    profile = ctx.config.matrix.profiles[entry.profile]
    if profile.golden_judge == "transformers":
        judge = transformers_judge(entry, profile, model_ref, ctx.shop, ctx.run.logs(entry.id))
        if judge is not None:
            return judge
    book = ConfirmedBook(ctx.state.confirmed)
    return last_confirmed_judge(
        entry,
        profile,
        book=book,
        tonight=ctx.build,
        stack=stack,
        cache_dir=ctx.cache_dir,
        log_dir=ctx.run.logs(entry.id) / "judge",
        turns=turns,
        say=ctx.say,
    )


def _boot_budget(entry: ModelEntry, ctx: EntryContext) -> int:
    """The boots in turns this entry may make tonight at most: the profile's budget for pairs that lean to a slowdown,
    or what the night's budget has left after the entries before it, if less."""
    budget = ctx.config.matrix.profiles[entry.profile].boot_budget
    return min(budget.suspected, max(0, budget.night - ctx.boots_spent))


def _turns(turns: Turns) -> dict[str, Any]:
    """The cost of serving another build in turns with tonight's (the judge, boot pairs), where there was one."""
    if not turns.boots:
        return {}
    return {"turns": {"boots": len(turns.boots), "boot_s": round(sum(b.boot_s for b in turns.boots), 1)}}


def _golden_failures(entry: ModelEntry, golden: GoldenResult) -> tuple[str, tuple[Failure, ...]]:
    """The reason line and one failure per failing check, all under the entry's one golden alert."""
    failures = tuple(
        Failure(
            golden_alert_key(entry.id),
            f"golden {v.check} {v.subject}",
            v.reason,
            {k: str(x)[:300] for k, x in v.evidence.items()},
            subject=f"{v.check} {v.subject}",
        )
        for v in golden.failures
    )
    first = golden.failures[0]
    return f"{len(failures)} golden check(s) failed; first: {first.check} {first.subject}: {first.reason}", failures


def _perf(entry: ModelEntry, turns: Turns, ctx: EntryContext, *, profile_hardware: str, before: Any) -> PerfVerdict:
    here = PerfContext.on_host(ctx.state, hardware=profile_hardware, entry=entry.id, run_id=ctx.run.id, night=ctx.night)
    perf_ctx = replace(
        here, commits=ctx.commits, record=ctx.record, build=ctx.build, slowdowns=ctx.slowdowns,
        step_boots=ctx.step_boots, least_step_boots=ctx.least_step_boots, earlier_step_logs=ctx.earlier_step_logs,
    )  # fmt: skip
    judged = measure_and_judge(
        turns,
        entry,
        perf_ctx,
        profile=ctx.config.matrix.profiles[entry.profile],
        spec=entry.bench,
        thresholds=ctx.config.thresholds_for(entry.id, cpu_class()),
        before=before,
        cache_dir=ctx.cache_dir,
        log_dir=ctx.run.logs(entry.id),
        say=ctx.say,
    )
    return perf_verdict(entry.id, judged, before)
