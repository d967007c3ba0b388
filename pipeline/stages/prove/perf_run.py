"""The perf stage on a served model: the bench in one health window, then the judgement with its reruns and pairs.

The nightly and `bench` measure the same way: each rerun and each batch of pairs is a health window
of its own, and the last confirmed build is booted only if a cell needs pairs, and stopped after.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from pipeline.config.matrix import BenchSpec, ModelEntry, Profile
from pipeline.config.thresholds import Thresholds
from pipeline.infra.openai_client import OpenAIClient
from pipeline.progress import Say
from pipeline.stages.prove.health import CpuWindow, HealthReport, judge_window, watched
from pipeline.stages.prove.last_good import last_good_server
from pipeline.stages.prove.perf import CaseResult, case_spec, run_bench
from pipeline.stages.prove.perf_judge import CellOutcome, PerfContext, interleaved_pairs, judge_results


@dataclass(frozen=True)
class JudgedPerf:
    """What was measured, the host's health over the measurement, and every cell's outcome."""

    results: Sequence[CaseResult]
    health: HealthReport
    outcomes: Sequence[CellOutcome]


def measure_and_judge(
    client: OpenAIClient,
    entry: ModelEntry,
    ctx: PerfContext,
    *,
    profile: Profile,
    spec: BenchSpec,
    thresholds: Thresholds,
    before: HealthReport,
    cache_dir: Path,
    log_dir: Path,
    say: Say,
) -> JudgedPerf:
    """Measure `spec` on the served model and judge every cell (rerun, then pairs against A where it trips)."""
    window = CpuWindow()
    results = run_bench(client, entry.served_model_name, spec, say=say)
    after = judge_window(profile, window)
    watch = partial(watched, profile)

    def remeasure(result: CaseResult) -> CaseResult:
        say(f"{entry.id}: {result.tg_cell.name} tripped; measuring it again")
        with watch():
            return run_bench(client, entry.served_model_name, case_spec(spec, result))[0]

    with ExitStack() as last_good:  # the last confirmed build, booted only if a cell needs pairs, stopped after
        serve = last_good_server(entry, profile, last_good, cache_dir=cache_dir, log_dir=log_dir, say=say)
        outcomes = judge_results(
            results,
            thresholds,
            ctx,
            health_before=before,
            health_after=after,
            remeasure=remeasure,
            paired=interleaved_pairs(serve, client, entry.served_model_name, watch=watch),
        )
    return JudgedPerf(results, after, outcomes)
