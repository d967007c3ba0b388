"""The nightly: candidate, entries, decide, publish, alert, report, as one short visible list of stages."""

from __future__ import annotations

import json
import os
import socket
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pipeline.commands.releases import open_store
from pipeline.config.bundle import Config
from pipeline.config.matrix import ModelEntry, Profile
from pipeline.errors import PipelineCrash, SparkNightlyError, UsageError
from pipeline.infra.history import History
from pipeline.infra.runtime import write_atomically
from pipeline.progress import Progress, Say, clock_text
from pipeline.settings import Settings
from pipeline.stages.alert import AlertEvent, raise_alerts
from pipeline.stages.alert_backends import deliver_alerts
from pipeline.stages.boot import Candidate
from pipeline.stages.candidate import NightCandidate, prepare_night_candidate
from pipeline.stages.culprit_run import WHEELS_ENTRY, CulpritFindings, NightRef, find_culprit
from pipeline.stages.durations import Durations
from pipeline.stages.entry_run import EntryContext, Outcome, run_entry
from pipeline.stages.plan import BuildPlan
from pipeline.stages.publish import Night, build_manifest, publish_night
from pipeline.stages.report import write_reports
from pipeline.stages.report_html import collect_series, render_html
from pipeline.stages.suspects import record_last_good
from pipeline.status import Status, worst


@dataclass(frozen=True)
class NightPlan:
    """Who runs tonight and where everything goes."""

    run_id: str
    night: str
    run_dir: Path
    profile: Profile
    entries: tuple[ModelEntry, ...]


def plan_night(
    settings: Settings, config: Config, *, only: Sequence[str], resume: str | None, run_id: str | None = None
) -> NightPlan:
    profile = config.matrix.profiles[settings.profile]
    entries = tuple(e for e in config.matrix.entries if e.profile == profile.name)
    unknown = sorted(set(only) - {e.id for e in entries})
    if unknown:
        raise UsageError(f"--only {', '.join(unknown)}: not an entry of profile {profile.name}")
    if only:
        entries = tuple(e for e in entries if e.id in only)
    runs = settings.path("runs_dir")
    if run_id and (runs / run_id / "night.json").exists():
        resume = run_id  # a shard of a night another shard started, or a named run started again
    if resume:
        state = runs / resume / "night.json"
        if not state.exists():
            raise UsageError(f"--resume {resume}: no run {runs / resume} to continue")
        night = json.loads(state.read_text())["night"]
        return NightPlan(resume, night, runs / resume, profile, entries)
    run_id = run_id or time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    night = time.strftime("%Y-%m-%d", time.gmtime())
    run_dir = runs / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    write_atomically(run_dir / "night.json", json.dumps({"run_id": run_id, "night": night, "profile": profile.name}))
    return NightPlan(run_id, night, run_dir, profile, entries)


def run_nightly(
    settings: Settings, config: Config, plan: NightPlan, *, progress: Progress, publish: bool = True
) -> int:
    """Every stage in order; one entry's failure never stops the others; our own crash is reported as such."""
    say = progress.say
    durations = Durations(settings.path("history_dir") / "durations.json")
    say(f"nightly {plan.night}, run {plan.run_id}, profile {plan.profile.name}: {len(plan.entries)} entries")
    outcomes: list[Outcome] = []
    crash: str | None = None
    publish_note = ""
    findings: CulpritFindings | None = None
    try:
        with progress.step("candidate", durations.expected("candidate")):
            started = time.monotonic()
            night = prepare_night_candidate(
                plan.profile,
                run_dir=plan.run_dir,
                wheels_dir=settings.path("wheels_dir"),
                cache_dir=settings.path("cache_dir"),
                say=say,
            )
            durations.record("candidate", time.monotonic() - started)
        if night.refused is not None:
            outcomes = refused_outcomes(plan.entries, night.refused)
        else:
            outcomes = _stage_entries(settings, config, plan, night.candidate, progress=progress, durations=durations)
        verdict = decide(outcomes)
        built = night.plan is not None  # a built night's commits are what the alerts name
        if built and publish and verdict == Status.FAIL.value:  # INCONCLUSIVE or ABORTED blames nobody
            with progress.step("culprits"):
                ref = NightRef(plan.run_id, plan.night, plan.run_dir)
                findings = find_culprit(settings, config, plan.profile, ref, outcomes, say=say)
        if publish:
            with progress.step("publish"):
                publish_note = _stage_publish(
                    settings, plan, outcomes, verdict=verdict, night=night, findings=findings, say=say
                )
            if built and verdict in {Status.PASS.value, Status.XFAIL.value}:  # the range the next failure blames
                last_good = settings.path("history_dir") / "last_good.json"
                record_last_good(last_good, BuildPlan.load(plan.run_dir / "plan.json"), plan.night)
        else:
            publish_note = "a shard: publishing is left to the merge"
    except (KeyboardInterrupt, SparkNightlyError):
        raise
    except Exception as exc:  # our bug: reported as the pipeline's failure, never as a regression
        crash = "".join(traceback.format_exception(exc))[-4000:]
        verdict = "CRASH"
    events: list[AlertEvent] = []
    alert_problems: list[str] = []
    if publish or crash is not None:  # a shard leaves the alerts of its entries to the merge
        suspects = findings.suspects if findings is not None else _suspects(plan)
        events, alert_problems = _stage_alerts(settings, plan, outcomes, suspects=suspects, crash=crash, say=say)
    run = {
        "run_id": plan.run_id,
        "night": plan.night,
        "profile": plan.profile.name,
        "verdict": verdict,
        "publish": publish_note,
        "host": socket.gethostname(),
        "alerts": [{"key": e.key, "action": e.action, "title": e.title} for e in events],
        "alert_problems": alert_problems,
        "suspects": findings.suspects if findings is not None else None,
        "culprits": findings.search.to_json() if findings is not None and findings.search is not None else None,
    }
    report = _stage_reports(settings, config, plan, run, outcomes)
    print(f"nightly {plan.night}: {verdict}; report {report} (summary.md, junit.xml, run.json beside it)")
    print(f"release: {publish_note or 'nothing published'}")
    if crash is not None:
        raise PipelineCrash(f"the pipeline crashed (see {plan.run_dir / 'alerts'}); no wheel is blamed")
    return worst(o.status for o in outcomes if o.required).exit_code


def decide(outcomes: Sequence[Outcome]) -> str:
    """PASS when every required entry passed (or failed as expected); optional entries only raise alerts."""
    required = [o.status for o in outcomes if o.required]
    return worst(required).value if required else Status.SKIPPED.value


def _stage_entries(
    settings: Settings,
    config: Config,
    plan: NightPlan,
    candidate: Candidate,
    *,
    progress: Progress,
    durations: Durations,
) -> list[Outcome]:
    outcomes = []
    say = progress.say
    for number, entry in enumerate(plan.entries, 1):
        saved = plan.run_dir / "entries" / f"{entry.id}.json"
        if saved.exists():  # --resume: a finished entry is not run again
            outcome = Outcome.from_json(json.loads(saved.read_text()))
            say(f"{entry.id}: {outcome.status.value} (finished before the interruption)")
            outcomes.append(outcome)
            continue
        left = durations.expected_total(e.id for e in plan.entries[number - 1 :])
        night_left = f"; the night's entries took {clock_text(left)} last time" if left else ""
        say(f"entry {number}/{len(plan.entries)}: {entry.id}{night_left}")
        with progress.step(f"[{number}/{len(plan.entries)}] {entry.id}", durations.expected(entry.id)):
            ctx = EntryContext(
                config,
                candidate,
                settings.path("cache_dir"),
                settings.path("history_dir"),
                plan.run_dir / "logs" / entry.id,
                plan.run_id,
                plan.night,
                _commits(plan),
                say,
                on_stage=progress.stage,
            )
            outcome = run_entry(entry, ctx)
        saved.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(saved, json.dumps(outcome.to_json(), indent=2, sort_keys=True, default=str) + "\n")
        if outcome.status in {Status.PASS, Status.XFAIL}:  # a failed entry ends early: no guide for tomorrow
            durations.record(entry.id, outcome.duration_s)
        say(f"{entry.id}: {outcome.status.value} at {outcome.stage}: {outcome.reason} ({outcome.duration_s:.0f} s)")
        outcomes.append(outcome)
    return outcomes


def refused_outcomes(entries: Sequence[ModelEntry], problems: str) -> list[Outcome]:
    """Inspection refused tonight's wheels: that is the night's failure, and no entry is booted on them."""
    wheels = Outcome(
        WHEELS_ENTRY, Status.FAIL, "inspect", f"inspection refused the wheels: {problems}", True, 0.0,
        failures=({"key": "wheels:inspect", "what": "wheel inspection", "reason": problems, "evidence": {}},),
    )  # fmt: skip
    return [wheels] + [
        Outcome(e.id, Status.ABORTED, "inspect", "not run: inspection refused tonight's wheels", e.required, 0.0)
        for e in entries
    ]


def _stage_publish(
    settings: Settings,
    plan: NightPlan,
    outcomes: Sequence[Outcome],
    *,
    verdict: str,
    night: NightCandidate,
    findings: CulpritFindings | None,
    say: Say,
) -> str:
    culprits: dict[str, Any] | None = None
    dropped: list[dict[str, str]] = []
    if verdict not in {Status.PASS.value, Status.XFAIL.value}:
        if findings is None or findings.replacement is None or findings.search is None:
            say(f"publish: skipped, the night is {verdict}")
            return ""
        dropped = [{"pr": str(pr), "why": why} for pr, why in findings.search.culprits]
        outcomes = _verified(outcomes, findings.replacement_outcomes)
        if unverified := [o.entry for o in outcomes if o.status not in {Status.PASS, Status.XFAIL}]:
            say(f"publish: skipped; without {_names(dropped)} the entries {', '.join(unverified)} were never run")
            return ""
        say(f"publish: the night is {verdict}; publishing main plus the PRs that passed, without {_names(dropped)}")
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
        health=None,
        entries=[_manifest_entry(o) for o in outcomes],
        report=str(plan.run_dir / "summary.md"),
        culprits=culprits,
    )
    files = [*night.wheels, night.lock]
    release = publish_night(open_store(settings), Night(plan.night, plan.run_id, True, manifest), files, say=say)
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


def _stage_reports(
    settings: Settings, config: Config, plan: NightPlan, run: dict[str, Any], outcomes: Sequence[Outcome]
) -> Path:
    """run.json, summary.md, junit.xml, then report.html with every entry's history; returns the HTML report."""
    write_reports(plan.run_dir, run, outcomes)
    history = History(settings.path("history_dir") / "history.sqlite")
    series = collect_series(history, config, plan.profile.hardware, [e.id for e in plan.entries])
    report = plan.run_dir / "report.html"
    write_atomically(report, render_html(run, outcomes, series))
    return report


def _stage_alerts(
    settings: Settings, plan: NightPlan, outcomes: Sequence[Outcome], *, suspects: str, crash: str | None, say: Say
) -> tuple[list[AlertEvent], list[str]]:
    """Tonight's alert events, delivered to the configured target; returns them and the delivery problems."""
    state = settings.path("history_dir") / "alerts.json"
    events = raise_alerts(
        outcomes,
        night=plan.night,
        run_id=plan.run_id,
        state_path=state,
        suspects=suspects,
        crash=crash,
        report=_report_link(plan),
    )
    problems = deliver_alerts(events, settings=settings, state_path=state, run_dir=plan.run_dir, say=say)
    return events, problems


def _manifest_entry(outcome: Outcome) -> dict[str, Any]:
    return {
        "id": outcome.entry,
        "status": outcome.status.value,
        "stage": outcome.stage,
        "reason": outcome.reason,
        "numbers": outcome.numbers,
        "duration_s": outcome.duration_s,
    }


def _report_link(plan: NightPlan) -> str:
    """The Actions run when on Actions (its summary and artifacts hold the report), else the report's path."""
    server, repo, run = (os.environ.get(f"GITHUB_{name}") for name in ("SERVER_URL", "REPOSITORY", "RUN_ID"))
    if server and repo and run:
        return f"{server}/{repo}/actions/runs/{run}"
    return str(plan.run_dir / "report.html")


def _commits(plan: NightPlan) -> dict[str, str]:
    return {"candidate": " ".join(plan.profile.candidate_requirements)}


def _suspects(plan: NightPlan) -> str:
    pinned = " ".join(plan.profile.candidate_requirements)
    return (
        f"none upstream: profile {plan.profile.name} runs the pinned {pinned} (look at the host, the model, the data)"
    )
