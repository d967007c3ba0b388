"""Measuring pairs of A (the last confirmed build) and B (tonight's) on one host: side by side, or boots in turn.

Side by side, A and B are one server each and measured run for run, A B then B A..., in blocks between which the
server booted earlier is booted again, so the later boot changes sides and the boots' order cancels; in turns (a
host that holds one server), each pair is a boot of A and a boot of B next to each other in time, in alternating
order, every boot a new one: the boot pair's difference carries both boots' own offsets, so tonight's boots measure
the boot spread that the side-by-side pairs can only be told.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from pipeline.config.thresholds import PAIRS_PER_BLOCK
from pipeline.detect.boots import BootPair
from pipeline.errors import EngineError, ProcessError
from pipeline.infra.confirmed import BuildRef
from pipeline.infra.openai_client import OpenAIClient
from pipeline.progress import Say
from pipeline.stages.prove.perf.measure import CaseResult, PromptMaker, RunSample, latency_estimate, measure_run
from pipeline.stages.prove.perf.paired import InTurn, PairedMeasure, PairsOverBoots
from pipeline.stages.prove.perf.turns import Turns

# Runs kept from each boot in turn, after WARMUP_RUNS that are not (a fresh boot's first requests compile and
# fill caches). Three runs make a boot's mean 1/sqrt(3) as noisy as one run, well under the boot spread.
RUNS_PER_BOOT = 3
WARMUP_RUNS = 2


# Side by side, a case's pairs come in blocks of PAIRS_PER_BLOCK. Before each block after a case's first, the server
# booted earlier is replaced by a new boot of its build, so the later boot is A in one block and B in the next: an
# order effect (the later of two boots measuring a few per cent faster, as on an AMX Xeon) cancels in the case's
# mean instead of counting against tonight's build, which is always booted first. CONFIRM_PAIRS is two blocks. Each
# pair says which boots it measured, so the decision's boot term shrinks with the boots averaged (boot_share).


@dataclass(frozen=True)
class Beside:
    """A (the last confirmed build) and B (tonight's) served side by side, each bootable again."""

    serve_a: Callable[[BuildRef], OpenAIClient | None]  # A's server, booted on first demand; None: it cannot serve
    again_a: Callable[[BuildRef], OpenAIClient | None]  # a new boot of A, its earlier one stopped
    tonight: Callable[[], OpenAIClient]
    again_b: Callable[[str], OpenAIClient] | None  # a new boot of B; None: not ours to boot (bench --url)


@dataclass
class _Servers:
    """The two servers a build's pairs measure now, and which of them was booted later."""

    a: Side
    b: Side
    later: str  # "a" or "b"
    boots: tuple[int, int] = (0, 0)  # which boot of A and of B they are, counted from 0


class _SideBySide:
    """PairedMeasure for servers side by side: see interleaved_pairs."""

    def __init__(self, beside: Beside, model: str, *, watch: Watch, say: Say) -> None:
        self.beside, self.model, self.watch, self.say = beside, model, watch, say
        # each case's pairs against a build: A's run, B's run, and the boots of A and B they measured
        self.runs: dict[tuple[str, str], list[tuple[RunSample, RunSample, tuple[int, int]]]] = {}
        self.servers: dict[str, _Servers] = {}
        self.unswapped_said = False

    def __call__(self, result: CaseResult, metric: str, wanted: int, last_good: BuildRef) -> PairsOverBoots | None:
        case = (result.pp_cell, result.tg_cell)
        now = self.servers.get(last_good.id)
        fresh: tuple[Side, ...] = ()
        if now is None:
            served = self.beside.serve_a(last_good)
            if served is None:
                return None
            now = self.servers[last_good.id] = _Servers(self._side(served), self._side(self.beside.tonight()), "a")
            fresh = (now.a, now.b)
        done = self.runs.setdefault((last_good.id, result.pp_cell.name), [])
        while len(done) < wanted:
            if done and len(done) % PAIRS_PER_BLOCK == 0:  # a new block: the later boot changes sides
                rebooted = self._swap(now, last_good)
                if rebooted is None:
                    return None
                fresh = rebooted
            block_end = min(wanted, (len(done) // PAIRS_PER_BLOCK + 1) * PAIRS_PER_BLOCK)
            with self.watch():
                for client, prompts, latency in (*fresh, *fresh):  # two warm-ups of a new boot, not kept
                    measure_run(client, self.model, case, prompts=prompts, latency_s=latency)
                fresh = ()
                while len(done) < block_end:
                    ra, rb = measure_pair(now.a, now.b, self.model, case, a_first=pair_order(len(done)))
                    done.append((ra, rb, now.boots))
        kept = done[:wanted]
        return PairsOverBoots([(ra.metric(metric), rb.metric(metric)) for ra, rb, _ in kept], [b for *_, b in kept])

    def _side(self, client: OpenAIClient) -> Side:
        return client, PromptMaker(client, self.model), latency_estimate(client)

    def _swap(self, now: _Servers, last_good: BuildRef) -> tuple[Side, ...] | None:
        """The earlier-booted server booted again: the new boot's side to warm (none when B is not ours to boot), or
        None when A did not boot again."""
        if self.beside.again_b is None:
            if not self.unswapped_said:
                self.unswapped_said = True
                self.say(f"{self.model}: tonight's server is not ours to boot again: the boots' order is not swapped")
            return ()
        if now.later == "a":
            self.say(f"{self.model}: tonight's build booted again, after A's boot, so the later boot changes sides")
            now.b, now.later = self._side(self.beside.again_b("pairs: the later boot changes sides")), "b"
            now.boots = (now.boots[0], now.boots[1] + 1)
            return (now.b,)
        client = self.beside.again_a(last_good)
        if client is None:
            return None
        now.a, now.later = self._side(client), "a"
        now.boots = (now.boots[0] + 1, now.boots[1])
        return (now.a,)


def interleaved_pairs(beside: Beside, model: str, *, watch: Watch, say: Say) -> PairedMeasure:
    """Measure A and the candidate B run for run, per case: A B, B A, A B, ... in blocks whose later-booted server
    alternates (PAIRS_PER_BLOCK).

    Alternating the order in each pair cancels a slow drift within the night (a warming host, a filling cache);
    swapping the later boot block by block cancels the boots' order; the shared host state of the night cancels in
    each ratio. Pairs already measured for a case are reused when more are asked. A block, with the warm-ups of a
    new boot, is one health window (`watch`); boots are made outside any window."""
    return _SideBySide(beside, model, watch=watch, say=say)


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
