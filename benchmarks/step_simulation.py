"""Benchmark: what one-boot bisection steps cost and how often they answer wrong, through the decision's own code.

Each simulated night is a perf FAIL as a host with one server makes it: boot pairs in turns of A and of tonight's
build B (B slower by the day's slowdown), decided one at a time by the night's sequential test
(detect/sequential.decide_sequential, the shift of PairRules at MIN_EFFECT, at most MAX_BOOT_PAIRS); a night that
does not FAIL is not bisected and is only counted. Every boot is a normal in the log around its build's figure, of SD
`boot SD` (the runs' own noise inside it). Then two steps of the bisection are asked with tonight's own boots of A
and B/A (detect/step_test.two_builds, the host's pair variance known): one commit like A, one like B, each booted
until TwoBuilds.answer says A or B, or "between" after `culprit.step_boots` boots. A wrong step is one answered the
other build; a step "between" is skipped by the bisection (no wrong answer, a commit left unjudged).
`--min-effect` sets the night's pair rules (the gpu profile's files say 0.13); `--assumed` the boot SD the decision
believes as a share of the true one (the pooled prior of a host whose boots spread wider than its record: 0.5).
Run: .venv/bin/python -m benchmarks.step_simulation [--nights N] [--step-boots K] [--min-effect E] [--assumed R]
"""

from __future__ import annotations

import argparse
import math
import random
from collections import Counter

from pipeline.config.thresholds import MAX_BOOT_PAIRS, MIN_EFFECT, PairRules
from pipeline.detect.evidence import Carried
from pipeline.detect.sequential import decide_sequential
from pipeline.detect.step_test import STEP_ERROR, two_builds
from pipeline.settings import Settings

SLOWDOWNS = (0.10, 0.19, 0.25, 0.50)  # 0.19: a gap of 3 boot SDs at 7 %
# nights a slowdown's undecided pairs are carried over before the simulation gives it up (the pair book carries them
# as long as A stands)
CARRIED_NIGHTS = 4
BOOT_SDS = (0.02, 0.07)


def failing_night(
    rng: random.Random, slowdown: float, boot_sd: float, min_effect: float
) -> tuple[list[float], float] | None:
    """The boots of A of the night whose pairs FAILed (their log figures) and the B/A they FAILed at, the evidence
    carried over up to CARRIED_NIGHTS nights as the pair book carries it; None where they PASSed or never FAILed."""
    rules = PairRules(min_effect=min_effect, boot_sd=boot_sd * math.sqrt(2))
    variance = 2 * boot_sd**2
    carried: Carried | None = None
    for night in range(CARRIED_NIGHTS):
        a_boots: list[float] = []
        differences: list[float] = []
        for index in range(MAX_BOOT_PAIRS):
            a, b = rng.gauss(0.0, boot_sd), rng.gauss(math.log1p(-slowdown), boot_sd)
            a_boots.append(a)
            differences.append(b - a)
            decided = decide_sequential(
                differences, carried, a="A", night=str(night), shift=rules.shift(), variance=variance,
                spread=math.sqrt(variance), more=index + 1 < MAX_BOOT_PAIRS,
            )  # fmt: skip
            if decided.decision == "FAIL":
                every = [*(carried.differences if carried is not None else ()), *differences]
                return a_boots, math.exp(math.fsum(every) / len(every))
            if decided.decision == "PASS":
                return None
        carried = decided.carry
    return None


def step(
    rng: random.Random, truth: float, a_boots: list[float], b_over_a: float, boot_sd: float, most: int, assumed: float
) -> tuple[str, int]:
    """One step whose commit's figure is `truth` (log): its answer and the boots it took, the decision believing a
    boot SD of `assumed` times the true one."""
    builds = two_builds([(math.exp(x),) for x in a_boots], b_over_a, 2 * (assumed * boot_sd) ** 2)
    boots: list[float] = []
    while True:
        boots.append(rng.gauss(truth, boot_sd))
        answer = builds.answer(boots, max_boots=most)
        if answer != "more":
            return answer, len(boots)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=4000)
    parser.add_argument("--step-boots", type=int, default=Settings().culprit_step_boots)
    parser.add_argument("--min-effect", type=float, default=MIN_EFFECT)
    parser.add_argument("--assumed", type=float, default=1.0)
    args = parser.parse_args()
    nights, most = args.nights, args.step_boots
    rng = random.Random(20261129)
    print(
        f"{nights} nights a row; culprit.step_boots {most}; STEP_ERROR {STEP_ERROR}; the night's min_effect "
        f"{args.min_effect}; boot SD believed {args.assumed:g} x the true one"
    )
    print(
        "| slowdown | boot SD | gap (boot SDs) | nights FAILed (in 4) | boot pairs, the FAILing night | boots a step "
        "| one boot | wrong steps | skipped (between) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for slowdown in SLOWDOWNS:
        for boot_sd in BOOT_SDS:
            failed, pairs, boots, answers = 0, 0, Counter[int](), Counter[str]()
            for _ in range(nights):
                night = failing_night(rng, slowdown, boot_sd, args.min_effect)
                if night is None:
                    continue
                failed += 1
                a_boots, b_over_a = night
                pairs += len(a_boots)
                for truth, right in ((0.0, "A"), (math.log1p(-slowdown), "B")):
                    answer, used = step(rng, truth, a_boots, b_over_a, boot_sd, most, args.assumed)
                    boots[used] += 1
                    answers["right" if answer == right else "between" if answer == "between" else "wrong"] += 1
            steps = sum(boots.values())
            gap = -math.log1p(-slowdown) / boot_sd
            print(
                f"| -{slowdown:.0%} | {boot_sd:.0%} | {gap:.1f} | {failed / nights:.1%} | "
                f"{pairs / max(failed, 1):.2f} | {sum(k * n for k, n in boots.items()) / max(steps, 1):.2f} | "
                f"{boots[1] / max(steps, 1):.1%} | {answers['wrong'] / max(steps, 1):.2%} | "
                f"{answers['between'] / max(steps, 1):.1%} |"
            )


if __name__ == "__main__":
    main()
