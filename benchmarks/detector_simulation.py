"""Benchmark: the nightly's own verdict path (judge_results) on synthetic months, side by side with Apache Otava.

Every night of every series goes through pipeline.stages.prove.perf.judge.judge_results, exactly as the
nightly calls it: a real History (SQLite) and ConfirmedBook in a scratch folder, the reference levels of
thresholds/spark-gb10/gpt-oss-120b.yaml (tg32: ref 32 t/s, warn -5 %, fail -15 %), a rerun when a cell
trips, pairs against the cell's last confirmed build (A) measured in the production order (pair_order),
the extension when the first pairs cannot decide, A moved only where tonight is accepted, and the month
going on after a FAIL. Each night brings a new build (upstream moves daily). Only the measurements are
synthetic: a run's throughput = build level x host x night factor x within-night drift x outlier x noise.

Series: 30 nights of history, then a month of 30. Scenarios (in the month):
  clean, clean+dips      no change; dips: -10 % on 5 % of nights (the whole host, A too)
  ar1                    night factors AR(1), rho 0.7: slow nights come in runs
  drift                  every run of a night 0.3 % slower than the one before (warming, throttling)
  outliers               2 % of runs hit by a -30 % hiccup
  slower host            from the month's first night the host is 5 % slower (A and B alike)
  bimodal runs           every build's runs land in a slow mode (-4 %) half the time
  bimodal boot           each boot of a build lands in a slow mode (-4 %) half the time
  bimodal boot .3        each boot lands in a slow mode (-4 %) with probability 0.3 (and with a -5 % step)
  creep                  each night's build 0.3 % slower than the night before's
  step -2/-3/-5/-10/-20  every build from the month's first night on is that much slower (with dips)
Two modes: side by side (A served beside B, as the CPU profile does) and one-resident (`servers_at_once: 1`, as
a Spark must: pairs are boot pairs in turns, each boot new, MIN_BOOT_PAIRS then one more up to MAX_BOOT_PAIRS;
boots/month counts them). --boot-sd gives every boot an offset of its own (log SD) on top of any bimodal mode.
Figures: share of step series that FAIL on the step's first night, by its 2nd and by its 7th; share with the
alert still open at month end (alert: opened by a FAIL, closed by a PASS, left by INCONCLUSIVE); share of
clean months with a false FAIL; INCONCLUSIVE nights and pairs measured per month. Otava 0.8.0's default
analysis runs on the same nightly medians (re-run every night, a drop placed in the month is an alarm).
Needs apache-otava==0.8.0: `.venv/bin/pip install -e ".[bench]"` (the pipeline itself does not use it).
Run: nice -n 19 .venv/bin/python benchmarks/detector_simulation.py [--series N] [--seed S] [--jobs J]
     [--statistic mean|trimmed] [--only SCENARIO ...] [--pair-rules MIN_EFFECT:BOOT_SD ...]
     [--mode side one-resident] [--boot-sd SD] [--boot-pairs FIRST:MAX ...] [--prior-df DF ...]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml
from otava.series import AnalysisOptions, Metric, Series  # type: ignore[import-untyped,import-not-found,unused-ignore]  # the [bench] extra

from pipeline.config import thresholds as pair_limits
from pipeline.config.matrix import BootBudget, Cell
from pipeline.config.thresholds import MIN_EFFECT, build_thresholds
from pipeline.detect import boots, steps
from pipeline.detect.boots import BootPair
from pipeline.infra.confirmed import BuildRef, ConfirmedBook, series_key
from pipeline.infra.history import History
from pipeline.stages.prove.health import HealthReport, HostFacts
from pipeline.stages.prove.perf import judge as perf_judge
from pipeline.stages.prove.perf.judge import PerfContext, judge_results
from pipeline.stages.prove.perf.measure import CaseResult, RequestSample, RunSample
from pipeline.stages.prove.perf.pair_book import PairBook
from pipeline.stages.prove.perf.paired import InTurn
from pipeline.stages.prove.perf.pairs import RUNS_PER_BOOT, pair_order
from pipeline.status import Status

SEED = 20261123
SERIES = 200
HISTORY_NIGHTS = 30
MONTH_NIGHTS = 30
RUNS = 5
NIGHT_SD = 0.02
SAMPLE_SD = 0.01
DIP_RATE = 0.05
DIP = 0.10
THRESHOLDS = Path(__file__).parents[1] / "thresholds" / "spark-gb10" / "gpt-oss-120b.yaml"
PP, TG = Cell("pp2048", "pp", 2048, 32, 0, 1), Cell("tg32", "tg", 2048, 32, 0, 1)
HEALTHY = HealthReport(True, (), HostFacts(20, 0.0, (), None, (), "simulated"))
# A drop Otava places this many nights before the month or later is counted as an alarm about the month.
OTAVA_SLACK = 2
# A's move slack as the pipeline ships it, side by side and in turns (a comparison sets one of them per series)
SIDE_SLACK, IN_TURN_SLACK = perf_judge.A_MOVE_MAX_LOSS, perf_judge.A_MOVE_MAX_LOSS_IN_TURN
# A night is counted as costly past this many boots in turns (the goal for a Spark's night), whatever --usual says
NIGHT_GOAL = 8


Mode = Literal["side", "one-resident"]


@dataclass(frozen=True)
class Variant:
    """The switches a comparison flips: paired statistic, screen z, A's move slack, the thresholds' pair rules
    (min_effect, boot_sd), the mode, every boot's own offset, the boot pairs asked (first, most) and the prior's
    degrees of freedom."""

    statistic: Literal["mean", "trimmed"]
    z: float
    slack: float
    rules: tuple[float, float]
    mode: Mode = "side"
    boot_sd: float = 0.0
    boot_pairs: tuple[int, int] = (pair_limits.MIN_BOOT_PAIRS, pair_limits.MAX_BOOT_PAIRS)
    prior_df: float = boots.PRIOR_DF
    budget: int = 16  # one-resident: boots in turns a night, at most
    usual: int = BootBudget().entry  # one-resident: boots a night's pairs stop at when they lean to no slowdown


@dataclass(frozen=True)
class Scenario:
    name: str
    step: float = 0.0  # every month build this much slower (negative)
    dips: bool = True
    ar1: float = 0.0  # rho of the night factor's AR(1) process
    drift: float = 0.0  # each run of a night this much slower than the one before
    outliers: float = 0.0  # share of runs hit by a -30 % hiccup
    host: float = 0.0  # the whole host this much slower from the month on
    bimodal: float = 0.0  # a boot lands this much slower, with probability bimodal_p
    bimodal_p: float = 0.5
    bimodal_runs: float = 0.0  # a run (of any build) lands this much slower half the time
    creep: float = 0.0  # each month night's build this much slower than the night before's

    @property
    def regression(self) -> bool:
        return self.step < 0 or self.creep > 0


SCENARIOS = (
    Scenario("clean", dips=False),
    Scenario("clean+dips"),
    Scenario("ar1", ar1=0.7),
    Scenario("drift", drift=0.003),
    Scenario("outliers", outliers=0.02),
    Scenario("slower host", host=-0.05),
    Scenario("bimodal runs", bimodal_runs=-0.04),
    Scenario("bimodal boot", bimodal=-0.04),
    Scenario("bimodal boot .3", bimodal=-0.04, bimodal_p=0.3),
    Scenario("step -5% bimodal .3", step=-0.05, bimodal=-0.04, bimodal_p=0.3),
    Scenario("creep", creep=0.003),
    *(Scenario(f"step {int(100 * s)}%", step=s) for s in (-0.02, -0.03, -0.05, -0.10, -0.20)),
)


def _run(tg_tps: float) -> RunSample:
    """A run whose tg32 decodes at `tg_tps` (prefill figures are not judged here)."""
    return RunSample((RequestSample(2048, 33, 0.5, 0.5, 0.5, 1.0, 1.0 + 32 / tg_tps, (1.0, 1.0 + 32 / tg_tps)),))


@dataclass
class World:
    """One series' hidden truth: levels of builds and boots, the night's factor, and the random stream."""

    scenario: Scenario
    rng: random.Random
    ref: float
    night: int = 0
    factor: float = 1.0
    log_ar: float = 0.0
    position: int = 0  # runs measured so far tonight (the within-night drift)
    boots: dict[str, float] = field(default_factory=dict)  # boot -> its factor (mode and own offset), tonight
    boot_sd: float = 0.0  # every boot's own offset (log SD)
    boot_count: int = 0  # boots made in turns
    night_boots: int = 0  # boots made in turns tonight

    def build_level(self, night: int) -> float:
        month = night - HISTORY_NIGHTS
        if month < 0:
            return self.ref
        level = self.ref * (1.0 + self.scenario.step)
        return level * (1.0 - self.scenario.creep) ** (month + 1)

    def start_night(self, night: int) -> None:
        s = self.scenario
        self.night, self.position, self.boots, self.night_boots = night, 0, {}, 0
        shock = self.rng.gauss(0.0, NIGHT_SD * math.sqrt(1 - s.ar1**2))
        self.log_ar = s.ar1 * self.log_ar + shock
        dipped = s.dips and self.rng.random() < DIP_RATE
        host = 1.0 + s.host if night >= HISTORY_NIGHTS else 1.0
        self.factor = math.exp(self.log_ar) * (1.0 - DIP if dipped else 1.0) * host

    def measure(self, build_night: int, boot: str) -> float:
        s = self.scenario
        if boot not in self.boots:  # each server boot lands in its mode, with an offset of its own
            mode = 1.0 + s.bimodal if s.bimodal and self.rng.random() < s.bimodal_p else 1.0
            self.boots[boot] = mode * math.exp(self.rng.gauss(0.0, self.boot_sd)) if self.boot_sd else mode
        drift = (1.0 - s.drift) ** self.position
        self.position += 1
        hiccup = 0.7 if s.outliers and self.rng.random() < s.outliers else 1.0
        hiccup *= 1.0 + s.bimodal_runs if s.bimodal_runs and self.rng.random() < 0.5 else 1.0
        noise = math.exp(self.rng.gauss(0.0, SAMPLE_SD))
        return self.build_level(build_night) * self.boots[boot] * self.factor * drift * hiccup * noise


@dataclass
class Tonight:
    """The night's rerun and pairs, measured in the world: A at its own build's level, in the production order."""

    world: World
    levels: dict[str, int]  # build id -> the night it was built
    night: int
    build: str
    done: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    boot_pairs: dict[str, list[BootPair]] = field(default_factory=dict)

    def remeasure(self, old: CaseResult) -> CaseResult:
        return CaseResult(PP, TG, tuple(_run(self.world.measure(self.night, self.build)) for _ in range(RUNS)), 0)

    def paired(self, old: CaseResult, metric: str, wanted: int, a: BuildRef) -> list[tuple[float, float]]:
        measured = self.done.setdefault(a.id, [])
        while len(measured) < wanted:
            sides = [(self.levels[a.id], a.id), (self.night, self.build)]
            if not pair_order(len(measured)):
                sides.reverse()
            values = {build: self.world.measure(night, build) for night, build in sides}
            measured.append((values[a.id], values[self.build]))
        return measured[:wanted]

    def in_turn(self, old: CaseResult, metric: str, wanted: int, a: BuildRef) -> list[BootPair]:
        """Boot pairs as the production measures them (pairs.boots_in_turn): every boot new, in pair_order."""
        measured = self.boot_pairs.setdefault(a.id, [])
        while len(measured) < wanted:
            sides = [(self.levels[a.id], a.id), (self.night, self.build)]
            if not pair_order(len(measured)):
                sides.reverse()
            runs: dict[str, tuple[float, ...]] = {}
            for night, build in sides:
                self.world.boot_count += 1
                self.world.night_boots += 1
                boot = f"{build}#{self.world.boot_count}"
                runs[build] = tuple(self.world.measure(night, boot) for _ in range(RUNS_PER_BOOT))
            measured.append(BootPair(runs[a.id], runs[self.build]))
        return measured[:wanted]


@dataclass(frozen=True)
class SeriesResult:
    statuses: tuple[str, ...]  # the month's nights
    pairs: int
    boots: int  # boots made in turns over the month
    medians: tuple[float, ...]  # every night's first measurement, history included (what Otava sees)
    most_boots: int = 0  # boots made in turns in the month's costliest night
    over_eight: int = 0  # the month's nights that made more than NIGHT_GOAL boots in turns
    slower_a: bool = False  # A moved in the month to a build at least 1 % slower than the A it replaced


def run_series(scenario: Scenario, index: int, seed: int, variant: Variant) -> SeriesResult:
    # the switches a comparison flips, in the production modules themselves
    steps.PAIRED_STATISTIC, steps.SCREEN_Z = variant.statistic, variant.z
    side = variant.mode == "side"  # both slacks set every series: a worker process runs variants of both modes
    perf_judge.A_MOVE_MAX_LOSS = variant.slack if side else SIDE_SLACK
    perf_judge.A_MOVE_MAX_LOSS_IN_TURN = IN_TURN_SLACK if side else variant.slack
    pair_limits.MIN_BOOT_PAIRS, pair_limits.MAX_BOOT_PAIRS = variant.boot_pairs
    boots.PRIOR_DF = variant.prior_df
    min_effect, boot_sd = variant.rules
    data = yaml.safe_load(THRESHOLDS.read_text())
    pairs = {"min_effect": min_effect, "boot_sd": boot_sd}
    thresholds = build_thresholds(
        "spark-gb10", "gpt-oss-120b", {**data, "cells": {"tg32": data["cells"]["tg32"]}, "pairs": pairs}
    )
    ref = thresholds.cells["tg32"].ref
    assert ref is not None
    world = World(scenario, random.Random(f"{seed}/{scenario.name}/{index}"), ref, boot_sd=variant.boot_sd)
    levels: dict[str, int] = {}
    statuses, medians, pairs_total, boots_before_month, most_boots, slower_a, over_eight = [], [], 0, 0, 0, False, 0
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as scratch:
        history, book = History(Path(scratch) / "h.sqlite"), ConfirmedBook(Path(scratch) / "confirmed.json")
        pair_book = PairBook(Path(scratch) / "pairs.json")
        key = series_key("spark-gb10", "gpt-oss-120b", "tg32", "tg_tps")
        for night in range(HISTORY_NIGHTS + MONTH_NIGHTS):
            world.start_night(night)
            build_id = f"build-{night}"
            levels[build_id] = night
            runs = tuple(_run(world.measure(night, build_id)) for _ in range(RUNS))
            result = CaseResult(PP, TG, runs, client_generated_tokens=0)
            medians.append(statistics.median(result.values("tg_tps")))
            tonight = Tonight(world, levels, night, build_id)
            day = f"2026-{1 + night // 28:02d}-{1 + night % 28:02d}"
            ctx = PerfContext(
                history, "spark-gb10", "spark-a", "gpt-oss-120b", f"run-{night}", day, {},
                build=BuildRef(build_id, "image", build_id, "0" * 64, night=day), book=book, pair_book=pair_book,
            )  # fmt: skip
            a_before = book.last_good(key)
            in_turn = InTurn(tonight.in_turn, lambda: variant.budget - world.night_boots, variant.usual)
            outcome = judge_results(
                [result], thresholds, ctx, health_before=HEALTHY, health_after=HEALTHY,
                remeasure=tonight.remeasure,
                paired=in_turn if variant.mode == "one-resident" else tonight.paired,
            )[0]  # fmt: skip
            a_after = book.last_good(key)
            if night == HISTORY_NIGHTS - 1:
                boots_before_month = world.boot_count
            if night >= HISTORY_NIGHTS:
                statuses.append(outcome.status.value)
                pairs_total += outcome.pairs_measured
                most_boots = max(most_boots, world.night_boots)
                over_eight += world.night_boots > NIGHT_GOAL
                if a_before and a_after and a_after.build.id != a_before.build.id:
                    moved = world.build_level(levels[a_after.build.id]) / world.build_level(levels[a_before.build.id])
                    slower_a = slower_a or moved <= 0.99
    return SeriesResult(
        tuple(statuses),
        pairs_total,
        world.boot_count - boots_before_month,
        tuple(medians),
        most_boots=most_boots,
        over_eight=over_eight,
        slower_a=slower_a,
    )


def otava_alarm(medians: Sequence[float]) -> int | None:
    """The first month night on which Otava's default analysis places a drop in the month; None if never."""
    for night in range(HISTORY_NIGHTS, HISTORY_NIGHTS + MONTH_NIGHTS):
        series = Series(
            "tg32", None, list(range(night + 1)), {"tg32": Metric(1, 1.0)}, {"tg32": list(medians[: night + 1])}, {}
        )
        points = series.analyze(AnalysisOptions()).change_points["tg32"]
        if any(p.index >= HISTORY_NIGHTS - OTAVA_SLACK and p.forward_change_percent() < 0 for p in points):
            return night - HISTORY_NIGHTS
    return None


def first_fail(statuses: Sequence[str]) -> int | None:
    return next((i for i, s in enumerate(statuses) if s == Status.FAIL.value), None)


def open_at_end(statuses: Sequence[str]) -> bool:
    """The alert after the month: opened by each FAIL, closed by each PASS or XFAIL, left as it was otherwise."""
    state = False
    for status in statuses:
        if status == "FAIL":
            state = True
        elif status in ("PASS", "XFAIL"):
            state = False
    return state


def share(flags: Sequence[bool]) -> str:
    return f"{100 * sum(flags) / len(flags):5.1f}%"


def report(scenario: Scenario, results: Sequence[SeriesResult], otava: Sequence[int | None], label: str) -> str:
    fails = [first_fail(r.statuses) for r in results]
    inconclusive = statistics.fmean(sum(s == "INCONCLUSIVE" for s in r.statuses) for r in results)
    pairs = statistics.fmean(r.pairs for r in results)
    boots_month = statistics.fmean(r.boots for r in results)
    most = max(r.most_boots for r in results)
    over = 100 * sum(r.over_eight for r in results) / (len(results) * MONTH_NIGHTS)
    slower_a = share([r.slower_a for r in results])
    if scenario.regression:
        limit = 15 if scenario.creep else 2
        by_limit = share([f is not None and f < limit for f in fails])
        gate = (
            f"FAIL n1 {share([f == 0 for f in fails])}  by n{limit} {by_limit}"
            f"  by n7 {share([f is not None and f < 7 for f in fails])}"
            f"  by n10 {share([f is not None and f < 10 for f in fails])}  open at end "
            f"{share([open_at_end(r.statuses) for r in results])}"
        )
        other = f"by n{limit} {share([o is not None and o < limit for o in otava])}  by n7 " + share(
            [o is not None and o < 7 for o in otava]
        )
    else:
        gate = f"false FAIL months {share([f is not None for f in fails])}"
        other = f"false alarm months {share([o is not None for o in otava])}"
    return (
        f"{scenario.name:<19} {label:<36} {gate:<80} INCONCLUSIVE/month {inconclusive:4.2f}  pairs/month {pairs:5.1f}"
        f"  boots/month {boots_month:5.1f}  most/night {most:2d} (nights over 8: {over:.1f} %)  A to a slower build "
        f"{slower_a}  | Otava: {other}"
    )


def _default_rules(mode: Mode) -> tuple[float, float]:
    """Side by side as the CPU profile pairs (no boot spread counted); in turns the Spark file's own pairs."""
    if mode == "side":
        return MIN_EFFECT, 0.0
    pairs = yaml.safe_load(THRESHOLDS.read_text())["pairs"]
    return float(pairs["min_effect"]), float(pairs["boot_sd"])


def _default_slack(mode: Mode) -> float:
    return SIDE_SLACK if mode == "side" else IN_TURN_SLACK


def _boot_pairs(text: str) -> tuple[int, int]:
    first, _, most = text.partition(":")
    return int(first), int(most or first)


def _pair_rules(text: str) -> tuple[float, float]:
    min_effect, _, boot_sd = text.partition(":")
    return float(min_effect), float(boot_sd or 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--series", type=int, default=SERIES, help="series per scenario")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--statistic", choices=("mean", "trimmed", "both"), default="both")
    parser.add_argument("--only", nargs="*", help="scenario names to run (default: all)")
    parser.add_argument("--z", type=float, nargs="*", default=[steps.SCREEN_Z], help="screen z values to compare")
    parser.add_argument(
        "--slack",
        type=float,
        nargs="*",
        default=None,
        help="A's move slack to compare (A_MOVE_MAX_LOSS side by side, A_MOVE_MAX_LOSS_IN_TURN one-resident); "
        "default: the pipeline's own",
    )
    parser.add_argument(
        "--pair-rules",
        type=_pair_rules,
        nargs="*",
        default=None,
        help="thresholds' pairs (min_effect:boot_sd, such as 0.05:0.02) to compare; default: side by side 0.02:0 (no "
        "boot spread counted), one-resident the file's own",
    )
    parser.add_argument("--mode", nargs="*", choices=("side", "one-resident"), default=["side", "one-resident"])
    parser.add_argument("--boot-sd", type=float, nargs="*", default=[0.0], help="every boot's own offset (log SD)")
    parser.add_argument("--budget", type=int, nargs="*", default=[16], help="one-resident: boots in turns a night")
    parser.add_argument(
        "--usual", type=int, default=BootBudget().entry, help="one-resident: boots a night leaning clean stops at"
    )
    parser.add_argument(
        "--boot-pairs",
        type=_boot_pairs,
        nargs="*",
        default=[(pair_limits.MIN_BOOT_PAIRS, pair_limits.MAX_BOOT_PAIRS)],
        help="one-resident: boot pairs asked first and at most (FIRST:MAX) to compare",
    )
    parser.add_argument("--prior-df", type=float, nargs="*", default=[boots.PRIOR_DF], help="the boot prior's df")
    args = parser.parse_args()
    started = time.monotonic()
    statistics_run: list[Literal["mean", "trimmed"]] = (
        ["trimmed", "mean"] if args.statistic == "both" else [args.statistic]
    )
    chosen = [s for s in SCENARIOS if not args.only or s.name in args.only]
    print(
        f"seed {args.seed}, {args.series} series per scenario, {HISTORY_NIGHTS} nights of history then "
        f"{MONTH_NIGHTS}; {RUNS} runs a night; night noise {NIGHT_SD:.0%}, run noise {SAMPLE_SD:.0%}, dips "
        f"-{DIP:.0%} on {DIP_RATE:.0%} of nights; through judge_results with {THRESHOLDS.name}'s tg32 levels; "
        f"{steps.CONFIRM_PAIRS} pairs (+{steps.CONFIRM_PAIRS} once), FAIL at one-sided {steps.FAIL_ALPHA} and "
        f"B/A < {1 - MIN_EFFECT:.2f}"
    )
    with ProcessPoolExecutor(args.jobs) as pool:
        for scenario in chosen:
            medians_for_otava: list[tuple[float, ...]] = []
            lines = []
            variants = [
                Variant(st, z, sl, rules, mode, sd, bp, df, budget, args.usual)
                for sd in args.boot_sd
                for mode in args.mode
                for budget in (args.budget if mode == "one-resident" else [0])
                for st in statistics_run
                for z in args.z
                for sl in args.slack or [_default_slack(mode)]
                for rules in args.pair_rules or [_default_rules(mode)]
                for bp, df in (
                    [(b, d) for b in args.boot_pairs for d in args.prior_df]
                    if mode == "one-resident"
                    else [(args.boot_pairs[0], args.prior_df[0])]
                )
            ]
            for variant in variants:
                jobs = [pool.submit(run_series, scenario, i, args.seed, variant) for i in range(args.series)]
                results = [job.result() for job in jobs]
                if not medians_for_otava:
                    medians_for_otava = [r.medians for r in results]
                    otava = list(pool.map(otava_alarm, medians_for_otava, chunksize=4))
                label = f"{variant.mode} {variant.statistic} z={variant.z:g} s={variant.slack:g}"
                if args.pair_rules and len(args.pair_rules) > 1:
                    label += f" pairs {variant.rules[0]:g}:{variant.rules[1]:g}"
                if variant.mode == "one-resident" and (len(args.boot_pairs) > 1 or len(args.prior_df) > 1):
                    label += f" bp {variant.boot_pairs[0]}:{variant.boot_pairs[1]} df {variant.prior_df:g}"
                if len(args.boot_sd) > 1:
                    label += f" boot {variant.boot_sd:.0%}"
                if variant.mode == "one-resident" and len(args.budget) > 1:
                    label += f" budget {variant.budget}"
                lines.append(report(scenario, results, otava, label))
            print("\n".join(lines), flush=True)
    print(f"\n{time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
