"""Benchmark: the most any verdict could catch of a step with one server at a time, at a given boot spread.

An upper bound, not a simulation: every variance known exactly, no dips, every boot of the budget spent on the
step from its first night, and all of it pooled into one z-test of known variance. Each night gives `pairs` boot
pairs, each a difference of B's and A's mean log throughput over `runs` runs (variance 2 x boot_sd^2 + 2 x
run_sd^2 / runs), and the night's own bench boot of B against a long history of accepted nights (variance
boot_sd^2 + night_sd^2 + run_sd^2 / bench_runs). The power of a one-sided test at level alpha after `nights` nights
is Phi(|step| / SE - z_alpha). A month's false FAILs stay under 2 % only if the month's looks share that 2 %: one
look a month may use alpha 0.02; a verdict that can FAIL on any of its nights needs far less a look (the columns
below 0.02 assume the looks share the 2 % evenly). One cell: a verdict pooling cells that all slow down could do
better.
Run: .venv/bin/python benchmarks/detection_bound.py [--boot-sd SD ...] [--pairs K] [--step S ...] [--nights N ...]
     [--alpha A ...]
"""

from __future__ import annotations

import argparse
import math
from statistics import NormalDist

from pipeline.stages.prove.perf.pairs import RUNS_PER_BOOT

RUN_SD, NIGHT_SD = 0.01, 0.02  # the simulation's (benchmarks/detector_simulation.py)
BENCH_RUNS = 5  # a night's measured runs of a case


def standard_error(boot_sd: float, pairs: int, nights: int) -> float:
    """The standard error of the step's log estimate from every boot pair and bench boot of `nights` nights."""
    pair_variance = 2 * boot_sd**2 + 2 * RUN_SD**2 / RUNS_PER_BOOT
    bench_variance = boot_sd**2 + NIGHT_SD**2 + RUN_SD**2 / BENCH_RUNS
    precision = nights * (pairs / pair_variance + 1 / bench_variance)
    return 1 / math.sqrt(precision)


def power(step: float, boot_sd: float, pairs: int, nights: int, alpha: float) -> float:
    z = abs(math.log1p(step)) / standard_error(boot_sd, pairs, nights)
    return NormalDist().cdf(z - NormalDist().inv_cdf(1 - alpha))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--boot-sd", type=float, nargs="*", default=[0.01, 0.02, 0.03])
    parser.add_argument("--pairs", type=int, default=4, help="boot pairs a night (8 boots: 4)")
    parser.add_argument("--step", type=float, nargs="*", default=[-0.05, -0.03])
    parser.add_argument("--nights", type=int, nargs="*", default=[2, 7])
    parser.add_argument("--alpha", type=float, nargs="*", default=[0.02, 0.005, 0.001])
    args = parser.parse_args()
    print(f"{args.pairs} boot pairs a night ({2 * args.pairs} boots) and the bench boot; run SD {RUN_SD:.0%}, night SD "
          f"{NIGHT_SD:.0%}; the most a verdict could catch by the night given")  # fmt: skip
    for step in args.step:
        for nights in args.nights:
            for boot_sd in args.boot_sd:
                figures = "  ".join(
                    f"alpha {a:g}: {power(step, boot_sd, args.pairs, nights, a):6.1%}" for a in args.alpha
                )
                print(f"step {step:+.0%} by night {nights}, boot SD {boot_sd:.0%}: {figures}")


if __name__ == "__main__":
    main()
