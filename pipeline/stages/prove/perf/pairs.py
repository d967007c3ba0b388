"""Measuring pairs of A (the last confirmed build) and B (tonight's) on one host: side by side, or boots in turn.

Side by side, A and B are one server each and measured run for run, A B then B A...; in turns (a host that holds
one server), each pair is a boot of A and a boot of B next to each other in time, in alternating order, every
boot a new one: the boot pair's difference carries both boots' own offsets, so tonight's boots measure the boot
spread that the side-by-side pairs can only be told.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from pipeline.detect.boots import BootPair
from pipeline.errors import EngineError, ProcessError
from pipeline.infra.confirmed import BuildRef
from pipeline.infra.openai_client import OpenAIClient
from pipeline.progress import Say
from pipeline.stages.prove.perf.measure import CaseResult, PromptMaker, RunSample, latency_estimate, measure_run
from pipeline.stages.prove.perf.paired import InTurn, PairedMeasure
from pipeline.stages.prove.perf.turns import Turns

# Runs kept from each boot in turn, after WARMUP_RUNS that are not (a fresh boot's first requests compile and
# fill caches). Three runs make a boot's mean 1/sqrt(3) as noisy as one run, well under the boot spread.
RUNS_PER_BOOT = 3
WARMUP_RUNS = 2


def interleaved_pairs(
    serve: Callable[[BuildRef], OpenAIClient | None], candidate: OpenAIClient, model: str, *, watch: Watch
) -> PairedMeasure:
    """Measure A (served on demand by `serve`) and the candidate B run for run, per case: A B, B A, A B, ...

    Alternating the order in each pair cancels a slow drift within the night (a warming host, a
    filling cache); the shared host state of the night cancels in each ratio. Pairs already measured
    for a case are reused when more are asked. Each batch of pairs is one health window (`watch`).
    """
    runs: dict[tuple[str, str], list[tuple[RunSample, RunSample]]] = {}
    sides: dict[str, tuple[OpenAIClient, PromptMaker, float]] = {}

    def side(name: str, client: OpenAIClient) -> tuple[OpenAIClient, PromptMaker, float]:
        if name not in sides:
            sides[name] = (client, PromptMaker(client, model), latency_estimate(client))
        return sides[name]

    def measure(result: CaseResult, metric: str, wanted: int, last_good: BuildRef) -> list[tuple[float, float]] | None:
        served = serve(last_good)
        if served is None:
            return None
        case = (result.pp_cell, result.tg_cell)
        a, b = side(f"a:{last_good.id}", served), side("b", candidate)
        done = runs.setdefault((last_good.id, result.pp_cell.name), [])
        if len(done) < wanted:  # the case's other cell asks for pairs already measured: nothing to watch
            with watch():
                if not done:
                    for client, prompts, latency in (a, b, a, b):  # two warm-ups each, not kept: A was just booted
                        measure_run(client, model, case, prompts=prompts, latency_s=latency)
                while len(done) < wanted:
                    done.append(measure_pair(a, b, model, case, a_first=pair_order(len(done))))
        return [(ra.metric(metric), rb.metric(metric)) for ra, rb in done[:wanted]]

    return measure


# A health window over a measurement (health.watched): raises HostUnhealthy at its end if foreign load spoiled it.
Watch = Callable[[], AbstractContextManager[None]]
Side = tuple[OpenAIClient, PromptMaker, float]


def pair_order(index: int) -> bool:
    """Whether pair `index` (from 0) measures A first: A B, then B A, then A B... so drift cancels pair by pair."""
    return index % 2 == 0


def measure_pair(a: Side, b: Side, model: str, case: tuple[Any, Any], *, a_first: bool) -> tuple[RunSample, RunSample]:
    """One run of A and one of B, in the order given; returned as (A, B) whatever the order."""
    order = (a, b) if a_first else (b, a)
    first, second = (measure_run(c, model, case, prompts=p, latency_s=lat) for c, p, lat in order)
    return (first, second) if a_first else (second, first)


def boots_in_turn(turns: Turns, model: str, cases: Sequence[tuple[Any, Any]], *, watch: Watch, say: Say) -> InTurn:
    """Boot pairs of A and tonight's build B, served in turns: pair k boots A then B when k is even, B then A when
    odd, every boot a new one (tonight's bench boot is not reused: a cell trips more easily on a slow boot, and
    reusing it would carry that into the pairs). Each boot measures every case of the entry (WARMUP_RUNS, then
    RUNS_PER_BOOT kept, in one health window), so one boot pair serves every cell that tripped: a boot costs minutes
    on a Spark, a case seconds."""
    done: dict[str, list[tuple[dict[str, list[RunSample]], dict[str, list[RunSample]]]]] = {}

    def one_boot(client: OpenAIClient) -> dict[str, list[RunSample]]:
        runs = {}
        with watch():
            prompts, latency = PromptMaker(client, model), latency_estimate(client)
            for case in cases:
                for _ in range(WARMUP_RUNS):
                    measure_run(client, model, case, prompts=prompts, latency_s=latency)
                kept = [
                    measure_run(client, model, case, prompts=prompts, latency_s=latency) for _ in range(RUNS_PER_BOOT)
                ]
                runs[case[0].name] = kept
        return runs

    def measure(result: CaseResult, metric: str, wanted: int, last_good: BuildRef) -> list[BootPair] | None:
        pairs = done.setdefault(last_good.id, [])
        while len(pairs) < wanted:
            index = len(pairs) + 1
            runs: dict[str, dict[str, list[RunSample]]] = {}
            for side in ("a", "b") if pair_order(len(pairs)) else ("b", "a"):
                if side == "b":
                    runs["b"] = one_boot(turns.fresh_tonight(f"boot pair {index}"))
                    continue
                try:
                    with turns.turn(last_good, f"boot pair {index}") as client:
                        runs["a"] = one_boot(client)
                except (EngineError, ProcessError) as exc:
                    say(f"{turns.entry.id}: the last confirmed build {last_good.describe()} did not serve: {exc}")
                    return None
            pairs.append((runs["a"], runs["b"]))
            say(f"{turns.entry.id}: boot pair {index} measured, every case; {turns.cost()}")
        case = result.pp_cell.name
        return [
            BootPair(tuple(r.metric(metric) for r in a[case]), tuple(r.metric(metric) for r in b[case]))
            for a, b in pairs[:wanted]
        ]

    def measured(build_id: str) -> int:
        return len(done.get(build_id, []))

    return InTurn(measure, turns.boots_left, turns.profile.boot_budget.entry, measured=measured)
