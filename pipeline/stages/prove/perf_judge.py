"""Judge an entry's performance: health, measurement, reference and history, rerun, paired confirmation, record.

A tripped cell is rerun; if it still trips and the last good build can be served beside the
candidate, the two are measured interleaved (A B A B ...) on the same host the same night and the
paired ratio decides. An unhealthy host makes every cell INCONCLUSIVE and keeps its numbers out
of the history: a sick night is never blamed on the wheels and never becomes the new normal.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pipeline.config.thresholds import Thresholds
from pipeline.detect.steps import (
    CONFIRM_PAIRS,
    MIN_BASELINE_NIGHTS,
    Confirmation,
    Screen,
    confirm,
    detect_step,
    screen,
)
from pipeline.infra.history import History, Night, Sample
from pipeline.infra.openai_client import OpenAIClient
from pipeline.stages.prove.gate import CellVerdict, judge_cell
from pipeline.stages.prove.health import HealthReport, health_facts_for_history
from pipeline.stages.prove.perf import CaseResult, PromptMaker, RunSample, latency_estimate, measure_run
from pipeline.status import Status

METRIC_OF_KIND = {"pp": "pp_tps", "tg": "tg_tps"}
Remeasure = Callable[[CaseResult], CaseResult]
# (last good, candidate) values of a metric, as many pairs as asked for; None without a last good build
PairedMeasure = Callable[[CaseResult, str, int], list[tuple[float, float]] | None]


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


def _history_nights(ctx: PerfContext, cell: str, metric: str) -> list[Night]:
    return ctx.history.nights(
        hardware=ctx.hardware, entry=ctx.entry, cell=cell, metric=metric, host=ctx.host, before=ctx.night
    )


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
    paired: PairedMeasure,
) -> list[CellOutcome]:
    """Every judged cell's outcome; records healthy samples into the history."""
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
    kept: list[CaseResult] = []
    seen: set[str] = set()
    for result in results:
        final = result
        for cell, metric in _cells(result):
            if cell in seen or cell not in thresholds.cells:
                continue
            seen.add(cell)
            outcome, final = _judge_cell(
                final, cell, metric, thresholds=thresholds, ctx=ctx, remeasure=remeasure, paired=paired
            )
            outcomes.append(outcome)
        kept.append(final)
    if ctx.record:
        _record(kept, ctx, health_after)
    return outcomes


def _judge_cell(
    result: CaseResult,
    cell: str,
    metric: str,
    *,
    thresholds: Thresholds,
    ctx: PerfContext,
    remeasure: Remeasure,
    paired: PairedMeasure,
) -> tuple[CellOutcome, CaseResult]:
    reference = thresholds.cells[cell]
    nights = [n.values for n in _history_nights(ctx, cell, metric)]
    gate, screened = judge_cell(reference, result.values(metric)), screen(nights, result.values(metric))
    if not (gate.tripped or _history_trips(screened)):
        status = Status.XFAIL if gate.status == "XFAIL" else Status.PASS
        return CellOutcome(cell, metric, status, f"{gate.reason}; {screened.reason}", gate, screened), result
    rerun = remeasure(result)
    rerun_gate, rescreened = judge_cell(reference, rerun.values(metric)), screen(nights, rerun.values(metric))
    if not (rerun_gate.tripped or _history_trips(rescreened)):
        reason = (
            f"tripped ({gate.reason}; {screened.reason}), passed on rerun: {rerun_gate.reason}; {rescreened.reason}"
        )
        return CellOutcome(cell, metric, Status.PASS, reason, gate, rescreened, rerun_gate), rerun
    pairs = paired(rerun, metric, CONFIRM_PAIRS)
    if pairs is None:
        if rerun_gate.status == "FAIL":  # far past a fixed reference (missing kernels): no comparison needed
            return CellOutcome(
                cell,
                metric,
                Status.FAIL,
                f"{rerun_gate.reason} (rerun too; no last good build to pair with)",
                gate,
                rescreened,
                rerun_gate,
            ), rerun
        # without a pair, only a step that persists over several nights of history is blamed on the builds
        step = detect_step([statistics.median(n) for n in nights] + [statistics.median(rerun.values(metric))])
        if step.fired:
            reason = f"tripped twice and the history shows a step: {step.reason}"
            return CellOutcome(cell, metric, Status.FAIL, reason, gate, rescreened, rerun_gate), rerun
        reason = f"tripped twice ({rerun_gate.reason}; {rescreened.reason}) with no last good build to confirm against"
        return CellOutcome(cell, metric, Status.INCONCLUSIVE, reason, gate, rescreened, rerun_gate), rerun
    decision = confirm(pairs)
    if decision.decision == "INCONCLUSIVE":  # once more as many pairs: a noisy night gets a second look
        decision = confirm(paired(rerun, metric, 2 * CONFIRM_PAIRS) or pairs)
    status = {"FAIL": Status.FAIL, "PASS": Status.PASS, "INCONCLUSIVE": Status.INCONCLUSIVE}[decision.decision]
    reason = f"tripped twice, paired with the last good build: {decision.reason}"
    return CellOutcome(cell, metric, status, reason, gate, rescreened, rerun_gate, decision), rerun


def _history_trips(screened: Screen) -> bool:
    """A history too short to have a noise estimate leaves the judgement to the fixed reference."""
    return screened.tripped and screened.nights_used >= MIN_BASELINE_NIGHTS


def _record(results: Sequence[CaseResult], ctx: PerfContext, health: HealthReport) -> None:
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
            commits=ctx.commits,
            health=facts,
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


def interleaved_pairs(last_good: OpenAIClient, candidate: OpenAIClient, model: str) -> PairedMeasure:
    """Measure the last good build (A) and the candidate (B) run for run, A B B A ..., per case, on demand.

    Alternating the order in each pair cancels a slow drift within the night; the shared host state
    of the night cancels in each ratio. Pairs already measured for a case are reused when more are asked.
    """
    runs: dict[str, list[tuple[RunSample, RunSample]]] = {}
    sides: dict[str, tuple[OpenAIClient, PromptMaker, float]] = {}

    def side(name: str, client: OpenAIClient) -> tuple[OpenAIClient, PromptMaker, float]:
        if name not in sides:
            sides[name] = (client, PromptMaker(client, model), latency_estimate(client))
        return sides[name]

    def measure(result: CaseResult, metric: str, wanted: int) -> list[tuple[float, float]]:
        case = (result.pp_cell, result.tg_cell)
        a, b = side("a", last_good), side("b", candidate)
        done = runs.setdefault(result.pp_cell.name, [])
        if not done:
            for client, prompts, latency in (a, b, a, b):  # two warm-up runs each, not kept: A was just booted
                measure_run(client, model, case, prompts=prompts, latency_s=latency)
        while len(done) < wanted:
            forward = len(done) % 2 == 0
            first, second = (
                measure_run(c, model, case, prompts=p, latency_s=lat) for c, p, lat in ((a, b) if forward else (b, a))
            )
            done.append((first, second) if forward else (second, first))
        return [(ra.metric(metric), rb.metric(metric)) for ra, rb in done[:wanted]]

    return measure
