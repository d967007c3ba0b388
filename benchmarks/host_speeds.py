"""Benchmark: the nightly's verdict path (judge_results) on hosts slower and faster than the one a file was measured on.

Every night of every series goes through pipeline.stages.prove.perf.judge.judge_results as the nightly calls it: a
real History (SQLite) and ConfirmedBook in a scratch folder, the CPU profile's shipped tg32 (c1) levels and pair
rules (thresholds/cpu-x86/smollm2-135m-instruct.yaml: ref 18.7 t/s, warn -35 %, fail -60 %), a rerun when a cell
trips and boot pairs in turns against the cell's last confirmed build (one server at a time, as the workflow's
nights run). Only the measurements are synthetic: a run's throughput = the host's speed x the file's reference x
the build's level x a night factor (SD 2 %) x a boot's own offset (SD 1 %) x run noise (SD 1 %).

Hosts at 0.5x, 1x and 2x the file's reference; per host, clean series (every build as fast as night 1's) and series
whose builds from night 2 on are 30 % slower. Printed per host: clean series with a false FAIL and with an
INCONCLUSIVE night, good first nights PASSed, -30 % steps FAILed on night 2 and by night 3, and with pairs as
evidence. Run: nice -n 19 .venv/bin/python benchmarks/host_speeds.py [--series N] [--nights N] [--seed S]
"""

from __future__ import annotations

import argparse
import math
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from pipeline.config.matrix import Cell
from pipeline.config.thresholds import Thresholds, build_thresholds
from pipeline.detect.boots import BootPair
from pipeline.infra.confirmed import BuildRef, ConfirmedBook
from pipeline.infra.history import History
from pipeline.stages.prove.health import HealthReport, HostFacts
from pipeline.stages.prove.perf.judge import PerfContext, judge_results
from pipeline.stages.prove.perf.measure import CaseResult, RequestSample, RunSample
from pipeline.stages.prove.perf.paired import CellOutcome, InTurn
from pipeline.stages.prove.perf.pairs import RUNS_PER_BOOT, pair_order
from pipeline.status import Status

FILE = Path(__file__).parents[1] / "thresholds" / "cpu-x86" / "smollm2-135m-instruct.yaml"
CELL = "tg32 (c1)"
PP, TG = Cell("pp128 (c1)", "pp", 128, 32, 0, 1), Cell(CELL, "tg", 128, 32, 0, 1)
HEALTHY = HealthReport(True, (), HostFacts(2, 0.0, (), None, (), "simulated"))
SPEEDS = (0.5, 1.0, 2.0)
STEP = -0.30
RUNS = 5
NIGHT_SD, BOOT_SD, RUN_SD = 0.02, 0.01, 0.01


def _run(tg_tps: float) -> RunSample:
    span = 32 / tg_tps
    return RunSample((RequestSample(128, 33, 0.1, 0.1, 0.1, 1.0, 1.0 + span, (1.0, 1.0 + span)),))


@dataclass
class Night:
    """One night's hidden truth: the host's level, the night's factor, and each boot's own offset."""

    rng: random.Random
    host: float  # t/s of a good build on this host
    step: float  # tonight's build's change against a good build
    factor: float
    boots: int = 0

    def measure(self, level: float, runs: int = RUNS) -> tuple[float, ...]:
        """A fresh boot of a build at `level` (relative to a good build), measured `runs` times."""
        self.boots += 1
        boot = math.exp(self.rng.gauss(0.0, BOOT_SD))
        return tuple(
            self.host * level * self.factor * boot * math.exp(self.rng.gauss(0.0, RUN_SD)) for _ in range(runs)
        )

    def case(self, level: float) -> CaseResult:
        return CaseResult(PP, TG, tuple(_run(v) for v in self.measure(level)), client_generated_tokens=0)

    def boot_pairs(self, levels: dict[str, float], build: str) -> InTurn:
        measured: list[BootPair] = []

        def measure(result: CaseResult, metric: str, wanted: int, a: BuildRef) -> list[BootPair]:
            while len(measured) < wanted:
                sides = [(a.id, levels[a.id]), (build, levels[build])]
                if not pair_order(len(measured)):
                    sides.reverse()
                runs = {name: self.measure(level, RUNS_PER_BOOT) for name, level in sides}
                measured.append(BootPair(runs[a.id], runs[build]))
            return measured[:wanted]

        return InTurn(measure)


def run_series(thresholds: Thresholds, speed: float, step: float, seed: str, nights: int) -> list[CellOutcome]:
    """One host's nights: night 1 good, then builds at 1 + step from night 2 on; every night's tg32 outcome."""
    rng = random.Random(seed)
    ref = thresholds.cells[CELL].ref
    assert ref is not None
    levels: dict[str, float] = {}
    outcomes = []
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as scratch:
        history, book = History(Path(scratch) / "h.sqlite"), ConfirmedBook(Path(scratch) / "confirmed.json")
        for index in range(nights):
            build = f"build-{index}"
            levels[build] = 1.0 + (step if index >= 1 else 0.0)
            night = Night(rng, ref * speed, levels[build], math.exp(rng.gauss(0.0, NIGHT_SD)))
            day = f"2026-12-{index + 1:02d}"
            ctx = PerfContext(
                history, "cpu-x86", "host", "smollm2", f"run-{index}", day, {},
                build=BuildRef(build, "runtime", build, "0" * 64, night=day), book=book,
            )  # fmt: skip
            outcome = judge_results(
                [night.case(levels[build])], thresholds, ctx, health_before=HEALTHY, health_after=HEALTHY,
                remeasure=lambda old: night.case(levels[build]),  # noqa: B023 -- called within this night's judging
                paired=night.boot_pairs(levels, build),
            )  # fmt: skip
            outcomes.append(next(o for o in outcome if o.cell == CELL))
    return outcomes


def boots_a_series(series: list[list[CellOutcome]]) -> float:
    """Boots made in turns for pairs, a series on average (a boot pair is two boots)."""
    return sum(2 * o.pairs_measured for s in series for o in s if o.in_turn) / len(series)


def share(flags: list[bool]) -> str:
    return f"{100.0 * sum(flags) / len(flags):.1f} %"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=200)
    parser.add_argument("--nights", type=int, default=10)
    parser.add_argument("--seed", default="20261126")
    args = parser.parse_args()
    data = yaml.safe_load(FILE.read_text())
    thresholds = build_thresholds("cpu-x86", "smollm2", {**data, "cells": {CELL: data["cells"][CELL]}})
    print(f"{args.series} series a host, {args.nights} nights each, {FILE.name}'s {CELL} (ref "
          f"{thresholds.cells[CELL].ref:g} t/s) and pairs {thresholds.pairs}; night SD {NIGHT_SD:.0%}, boot SD "
          f"{BOOT_SD:.0%}, run SD {RUN_SD:.0%}; step {STEP:+.0%} from night 2")  # fmt: skip
    print("| host | good 1st night PASS | clean: false FAIL / an INCONCLUSIVE night | -30 %: FAIL on night 2 / by "
          "night 3 / with pairs as evidence | boots a series (clean / step) |")  # fmt: skip
    print("|---|---|---|---|---|")
    for speed in SPEEDS:
        started = time.monotonic()
        clean = [run_series(thresholds, speed, 0.0, f"{args.seed}/clean/{speed}/{i}", args.nights)
                 for i in range(args.series)]  # fmt: skip
        stepped = [run_series(thresholds, speed, STEP, f"{args.seed}/step/{speed}/{i}", args.nights)
                   for i in range(args.series)]  # fmt: skip
        first_pass = share([s[0].status == Status.PASS for s in clean + stepped])
        false_fail = share([any(o.status == Status.FAIL for o in s) for s in clean])
        undecided = share([any(o.status == Status.INCONCLUSIVE for o in s) for s in clean])
        on_2 = share([s[1].status == Status.FAIL for s in stepped])
        by_3 = share([any(o.status == Status.FAIL for o in s[1:3]) for s in stepped])
        paired = share([s[1].status == Status.FAIL and s[1].confirmation is not None for s in stepped])
        print(f"| {speed:g}x | {first_pass} | {false_fail} / {undecided} | {on_2} / {by_3} / {paired} | "
              f"{boots_a_series(clean):.1f} / {boots_a_series(stepped):.1f} |"
              f"  ({time.monotonic() - started:.0f} s)")  # fmt: skip


if __name__ == "__main__":
    main()
