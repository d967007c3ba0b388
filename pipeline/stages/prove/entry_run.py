"""One matrix entry through health, smoke, boot, golden and perf, ending with one Outcome whatever happens."""

from __future__ import annotations

import socket
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.config.bundle import Config
from pipeline.config.matrix import ModelEntry
from pipeline.errors import BootError, ClusterError, EngineError, HostUnhealthy, ProcessError, SparkNightlyError
from pipeline.infra.confirmed import BuildRef, ConfirmedBook
from pipeline.infra.cpu_class import cpu_class
from pipeline.infra.history import History
from pipeline.infra.pair_book import PairBook
from pipeline.infra.references import ReferenceStore
from pipeline.infra.weights import model_reference
from pipeline.outcome import Failure, Outcome, perf_alert_key
from pipeline.places import StateDir
from pipeline.progress import Say, quiet
from pipeline.stages.prove.boot import Candidate, restartable
from pipeline.stages.prove.canary import CanaryVerdict, canary_argv, judge_canary, run_canary
from pipeline.stages.prove.canary import wanted as canary_wanted
from pipeline.stages.prove.golden_run import GoldenResult, ServerLog, run_golden
from pipeline.stages.prove.health import HealthReport, health_facts_for_history, judge_health, read_host_facts
from pipeline.stages.prove.judge import Judge, last_confirmed_judge, transformers_judge
from pipeline.stages.prove.memory import Room, make_room
from pipeline.stages.prove.paired_verdict import CellOutcome
from pipeline.stages.prove.perf_judge import PerfContext
from pipeline.stages.prove.perf_run import measure_and_judge
from pipeline.stages.prove.smoke import smoke
from pipeline.stages.prove.turns import Turns
from pipeline.stages.prove.weights_stage import served_folder
from pipeline.status import Status, worst


@dataclass(frozen=True)
class EntryContext:
    """What an entry needs from the night around it."""

    config: Config
    candidate: Candidate
    cache_dir: Path
    state: StateDir
    log_dir: Path
    run_id: str
    night: str
    commits: dict[str, str]
    say: Say = quiet
    record: bool = True  # a culprit trial reads the history and references but never writes them
    on_stage: Say = quiet  # told each stage as it begins (the live status line)
    build: BuildRef | None = None  # tonight's build, which the perf stage may accept as the cells' new A
    boots_spent: int = 0  # boots in turns the night's earlier entries made (against the profile's night budget)


def run_entry(entry: ModelEntry, ctx: EntryContext) -> Outcome:
    """Never raises for the candidate's failures: they become the outcome. Ctrl-C and our own bugs propagate."""
    started = time.monotonic()

    def outcome(status: Status, stage: str, reason: str, **extra: Any) -> Outcome:
        return Outcome(entry.id, status, stage, reason, entry.required, round(time.monotonic() - started, 1), **extra)

    profile = ctx.config.matrix.profiles[entry.profile]
    ready = _before_boot(entry, ctx)
    if isinstance(ready, Stop):
        return outcome(ready.status, ready.stage, ready.reason, numbers=ready.numbers)
    before, room, canary_numbers = ready.health, ready.room, ready.canary
    stage = "boot"
    ctx.on_stage(stage)
    try:
        with restartable(entry, ctx.candidate, cache_dir=ctx.cache_dir, log_dir=ctx.log_dir, say=ctx.say) as serving:
            turns = Turns(entry, profile, serving, ctx.cache_dir, ctx.log_dir, ctx.say, budget=_boot_budget(entry, ctx))
            server = serving.server
            boot_s = server.boot_s
            stage = "golden"
            ctx.on_stage(stage)
            store = ReferenceStore(ctx.state.golden)
            references = store.load(profile.hardware, entry.id)
            model_ref = model_reference(entry, ctx.cache_dir, ctx.log_dir)
            with ExitStack() as judge_serving:  # a judge served beside tonight's is stopped before perf
                judge = None if references is not None else _judge(entry, model_ref, ctx, judge_serving, turns)
                golden = run_golden(
                    server.client,
                    entry,
                    ctx.config.golden[entry.golden],
                    model_ref=model_ref,
                    references=references,
                    judge=judge,
                    restart=serving.restart,
                    files_at=served_folder(entry, ctx.cache_dir),
                    server_log=ServerLog(server.log_path, profile.accelerator),
                    say=ctx.say,
                )
            numbers: dict[str, Any] = {"boot_s": round(boot_s, 1), "golden_s": round(golden.duration_s, 1)}
            if canary_numbers:
                numbers["canary"] = canary_numbers
            if room is not None:
                numbers["memory"] = {"need_gib": round(room.need.gib, 1), "page_cache": room.dropped}
            if golden.unjudged:  # no reference and no judge: the outputs are not recorded as tomorrow's reference
                numbers["drift"] = f"INCONCLUSIVE: {len(golden.unjudged)} answers not judged, nothing recorded"
                ctx.say(f"{entry.id}: drift INCONCLUSIVE (no reference night, no judge); the outputs are not recorded")
            if not golden.passed:
                reason, failures = _golden_failures(entry, golden)
                return outcome(Status.FAIL, "golden", reason, numbers=numbers | _turns(turns), failures=failures)
            stage = "perf"
            ctx.on_stage(stage)
            perf_started = time.monotonic()
            perf = _perf(entry, turns, ctx, profile_hardware=profile.hardware, before=before)
            numbers |= {
                "perf_s": round(time.monotonic() - perf_started, 1),
                "cells": perf["cells"],
                "health": perf["health"],
            }
            numbers |= _turns(turns)
            if turns.boots:
                ctx.say(f"{entry.id}: {turns.cost()}")
            status = perf["status"]
            if status == Status.PASS and ctx.record and golden.recordable:  # tonight is the new reference
                store.save(profile.hardware, entry.id, ctx.night, golden.generations, golden.identity_files)
            return outcome(status, "perf", perf["reason"], numbers=numbers, failures=perf["failures"])
    except ClusterError as exc:  # a host lost or unreachable says nothing of the build; Ray failing on it does
        status = Status.INCONCLUSIVE if exc.host_lost else Status.FAIL
        return outcome(status, "cluster" if stage == "boot" else stage, f"node {exc}")
    except BootError as exc:
        return outcome(Status.FAIL, "boot", f"{exc.cause}: {exc.detail}")
    except (EngineError, ProcessError) as exc:
        return outcome(Status.FAIL, stage, f"the engine failed during {stage}: {exc}")
    except HostUnhealthy as exc:  # no room to boot tonight's build again after another build's turn
        return outcome(Status.INCONCLUSIVE, stage, f"host unhealthy: {exc}")
    except SparkNightlyError as exc:
        return outcome(Status.ABORTED, stage, f"{type(exc).__name__}: {exc}")


@dataclass(frozen=True)
class Ready:
    """What the checks before a boot found: the host's health, the room made, the canary's numbers."""

    health: HealthReport
    room: Room | None
    canary: dict[str, Any]


@dataclass(frozen=True)
class Stop:
    """A check before the boot that ends the entry."""

    status: Status
    stage: str
    reason: str
    numbers: dict[str, Any] = field(default_factory=dict)


RUNBOOK_CLUSTER = "docs/runbook.md, 'Adding a second Spark'"


def _before_boot(entry: ModelEntry, ctx: EntryContext) -> Ready | Stop:
    """Health, the canary, smoke and memory, in that order: the first that fails ends the entry before any boot."""
    profile = ctx.config.matrix.profiles[entry.profile]
    if entry.topology == "cluster" and profile.cluster is None:
        reason = f"spans {entry.nodes} hosts; this runner has no cluster file (paths.cluster): " + RUNBOOK_CLUSTER
        return Stop(Status.SKIPPED, "cluster", reason)
    ctx.on_stage("health")
    before = judge_health(profile, read_host_facts())
    for note in before.notes:  # a GB10 reports no memory of its own: said, never a failure
        ctx.say(f"{entry.id}: health: {note}")
    if not before.healthy:
        return Stop(Status.INCONCLUSIVE, "health", "host unhealthy: " + "; ".join(before.reasons))
    verdict, canary_numbers = _canary(entry, ctx)
    if verdict.host:
        reason = "host unhealthy: " + "; ".join(verdict.host)
        return Stop(Status.INCONCLUSIVE, "health", reason, {"canary": canary_numbers})
    if verdict.candidate:
        return Stop(Status.FAIL, "canary", "; ".join(verdict.candidate), {"canary": canary_numbers})
    if ctx.candidate.runtime is not None:
        ctx.on_stage("smoke")
        report = smoke(ctx.candidate.runtime, profile, ctx.log_dir, entry_point_needed=entry.launch.entrypoint == "cli")
        if not report.passed:
            return Stop(Status.FAIL, "smoke", report.reason)
    ctx.on_stage("memory")
    room = make_room(entry, profile, ctx.log_dir, say=ctx.say)
    if room is not None and not room.ok:
        return Stop(Status.INCONCLUSIVE, "memory", "the host cannot make room: " + room.reason)
    return Ready(before, room, canary_numbers)


def _canary(entry: ModelEntry, ctx: EntryContext) -> tuple[CanaryVerdict, dict[str, Any]]:
    """The accelerator canary in the candidate, where the profile runs one: its verdict and its numbers. A canary
    that cannot run is said and left to smoke and boot, which judge the candidate itself."""
    profile = ctx.config.matrix.profiles[entry.profile]
    argv = canary_argv(ctx.candidate, ctx.cache_dir, f"spark-nightly-canary-{ctx.run_id}-{entry.id}")
    if not canary_wanted(profile) or argv is None:
        return CanaryVerdict(), {}
    ctx.on_stage("canary")
    try:
        result = run_canary(argv, ctx.log_dir / f"{entry.id}-canary.log")
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
        judge = transformers_judge(entry, profile, model_ref, ctx.cache_dir, ctx.log_dir, say=ctx.say)
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
        log_dir=ctx.log_dir / "judge",
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
    """The reason line and one alert-ready failure per failing check."""
    failures = tuple(
        Failure(
            f"{entry.id}:golden:{v.check}:{v.subject}",
            f"golden {v.check} {v.subject}",
            v.reason,
            {k: str(x)[:300] for k, x in v.evidence.items()},
        )
        for v in golden.failures
    )
    first = golden.failures[0]
    return f"{len(failures)} golden check(s) failed; first: {first.check} {first.subject}: {first.reason}", failures


def _perf(entry: ModelEntry, turns: Turns, ctx: EntryContext, *, profile_hardware: str, before: Any) -> dict[str, Any]:
    perf_ctx = PerfContext(
        History(ctx.state.history),
        profile_hardware,
        socket.gethostname(),
        entry.id,
        ctx.run_id,
        ctx.night,
        ctx.commits,
        record=ctx.record,
        build=ctx.build,
        book=ConfirmedBook(ctx.state.confirmed),
        pair_book=PairBook(ctx.state.pairs),
    )
    judged = measure_and_judge(
        turns,
        entry,
        perf_ctx,
        profile=ctx.config.matrix.profiles[entry.profile],
        spec=entry.bench,
        thresholds=ctx.config.thresholds_for(entry.id, cpu_class()),
        before=before,
        cache_dir=ctx.cache_dir,
        log_dir=ctx.log_dir,
        say=ctx.say,
    )
    outcomes = judged.outcomes
    cells = {o.cell: _cell_numbers(o) for o in outcomes}
    status = worst(o.status for o in outcomes)
    bad = [o for o in outcomes if o.status in {Status.FAIL, Status.INCONCLUSIVE}]
    failures = tuple(
        Failure(perf_alert_key(entry.id), f"{o.cell} {o.metric}", o.reason, _evidence(o), subject=o.cell)
        for o in bad
        if o.status == Status.FAIL
    )
    reason = "; ".join(f"{o.cell}: {o.reason}" for o in bad) or f"{len(outcomes)} cells within their references"
    gaps = [f"{o.cell} {o.gap}" for o in outcomes if o.gap]
    if gaps and not bad:
        reason = f"{len(outcomes) - len(gaps)} cells within their references; gaps, not regressions: {'; '.join(gaps)}"
    health = {"before": health_facts_for_history(before), "measurement": health_facts_for_history(judged.health)}
    return {"status": status, "reason": reason, "cells": cells, "failures": failures, "health": health}


def _cell_numbers(outcome: CellOutcome) -> dict[str, Any]:
    numbers: dict[str, Any] = {
        "status": outcome.status.value,
        "value": round(outcome.gate.value, 3),
        "ref": outcome.gate.ref,
    }
    if outcome.gap:
        numbers["gap"] = outcome.gap
    if outcome.confirmation is not None:
        numbers |= {
            "b_over_a": round(outcome.confirmation.mean_ratio, 4),
            "pairs": outcome.pairs_measured,
            "last_good": outcome.last_good.id if outcome.last_good else None,
        }
        if outcome.last_good is not None and outcome.last_good.night:
            numbers["a_night"] = outcome.last_good.night  # the night whose build was A (the site marks it)
        if outcome.in_turn:  # the pairs were boot pairs, A and B booted in turns
            numbers["in_turn"] = True
    return numbers


def _evidence(outcome: CellOutcome) -> dict[str, Any]:
    evidence: dict[str, Any] = {"value": outcome.gate.value, "ref": outcome.gate.ref}
    if outcome.confirmation is not None and outcome.last_good is not None:
        evidence |= {
            "B/A": round(outcome.confirmation.mean_ratio, 4),
            "boot pairs in turn" if outcome.in_turn else "pairs": outcome.pairs_measured,
            "last confirmed build": outcome.last_good.describe(),
        }
    return evidence
