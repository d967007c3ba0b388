"""The perf stage on a served model: the bench in one health window, then the judgement with its reruns and pairs.

The nightly and `bench` measure the same way: each rerun and each batch of pairs is a health window
of its own, and the last confirmed build is booted only if a cell needs pairs, and stopped after: beside
tonight's server, or, on a host that holds one server (`servers_at_once: 1`), in turns with it.
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
from pipeline.stages.prove.last_good import LastGoodServers
from pipeline.stages.prove.perf.judge import PerfContext, judge_results
from pipeline.stages.prove.perf.measure import CaseResult, case_spec, run_bench
from pipeline.stages.prove.perf.paired import CellOutcome, InTurn, PairedMeasure
from pipeline.stages.prove.perf.pairs import Beside, boots_in_turn, interleaved_pairs
from pipeline.stages.prove.perf.turns import Turns


@dataclass(frozen=True)
class JudgedPerf:
    """What was measured, the host's health over the measurement, and every cell's outcome."""

    results: Sequence[CaseResult]
    health: HealthReport
    outcomes: Sequence[CellOutcome]


def measure_and_judge(  # noqa: PLR0913 -- the perf stage's inputs, by keyword (bench and the nightly)
    client: OpenAIClient | Turns,
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
    """Measure `spec` on the served model and judge every cell (rerun, then pairs against A where it trips).

    `client` is tonight's server; given as Turns (the nightly's), pairs are boots in turn where the profile holds
    one server at a time, and tonight's server is asked for afresh each time (it may have stepped aside)."""
    turns = client if isinstance(client, Turns) else None

    def tonight() -> OpenAIClient:
        return client.tonight if isinstance(client, Turns) else client

    server = tonight()  # booted again (after the golden judge's turn) before the window: a boot is not a measurement
    window = CpuWindow()
    results = run_bench(server, entry.served_model_name, spec, say=say)
    after = judge_window(profile, window)
    watch = partial(watched, profile)

    fresh_boots: list[dict[str, CaseResult]] = []  # each fresh boot of tonight's build: every case measured on it
    one_at_a_time = turns is not None and profile.servers_at_once < 2

    def remeasure(result: CaseResult) -> CaseResult:
        if one_at_a_time:
            return on_a_fresh_boot(result, 1)
        say(f"{entry.id}: {result.tg_cell.name} tripped; measuring it again")
        server = tonight()  # booted outside the window: a boot is not a measurement
        with watch():
            return run_bench(server, entry.served_model_name, case_spec(spec, result))[0]

    def on_a_fresh_boot(result: CaseResult, number: int) -> CaseResult:
        """A rerun on tonight's boot would measure that boot again: tonight's build is booted once more and every
        case measured on it, for each cell that asks (the last confirmed build itself measured again, or, in turns,
        where tonight's boots of A are kept, a trial's build asked whether it is like A or like tonight's build). The
        `number`-th fresh boot is made when a cell first asks for it; the others share it."""
        assert turns is not None
        while len(fresh_boots) < number:
            why = "a rerun on a fresh boot" if not ctx.slowdowns else f"boot {len(fresh_boots) + 2} of this build"
            say(f"{entry.id}: {result.tg_cell.name}: {why}")
            server = turns.fresh_tonight(why)  # booted outside the window
            with watch():
                measured = run_bench(server, entry.served_model_name, spec)
            fresh_boots.append({r.pp_cell.name: r for r in measured})
        return fresh_boots[number - 1][result.pp_cell.name]

    def another_boot(result: CaseResult, number: int) -> CaseResult | None:
        """The `number`-th fresh boot, shared by every cell; None where it is not made yet and the night's boot budget
        holds no more."""
        assert turns is not None
        if len(fresh_boots) < number and turns.boots_left() < 1:
            return None
        return on_a_fresh_boot(result, number)

    with ExitStack() as last_good:  # the last confirmed build, booted only if a cell needs pairs, stopped after
        paired: PairedMeasure | InTurn
        if turns is not None and profile.servers_at_once < 2:
            paired = boots_in_turn(turns, entry.served_model_name, entry.bench.cases(), watch=watch, say=say)
        else:
            serve = LastGoodServers(entry, profile, last_good, cache_dir=cache_dir, log_dir=log_dir, say=say)
            again_b = turns.fresh_tonight if turns is not None else None  # a server given by URL is not ours
            beside = Beside(serve, serve.again, tonight, again_b)
            paired = interleaved_pairs(beside, entry.served_model_name, watch=watch, say=say)
        outcomes = judge_results(
            results, thresholds, ctx, health_before=before, health_after=after, remeasure=remeasure, paired=paired,
            boot_again=another_boot if turns is not None else None,
        )  # fmt: skip
    return JudgedPerf(results, after, outcomes)
