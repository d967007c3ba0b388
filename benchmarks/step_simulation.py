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
`--bisections N` then bisects N failing days of DAY commits (the GPU day's shape: the GUILTY-th carries the
slowdown) through aftermath/bisect.bisect_main with these steps, with and without its second look at the boundary
(bisect.CONFIRM_BOOTS), and counts the days that named a wrong commit, ended in an honest range, and the boots.
`--two-cell-days N` bisects N of the landing run's day of 2026-12-02 (4 commits, the 3rd slower; two cells, pp128 at
-25 % and tg32 at -51 %, a boot's offset shared by both; one boot of A) through the product's step verdict
(trial_bench.step_verdict, cells_disagree) and bisect_main, as the rule was before that day and as it is.
Run: .venv/bin/python -m benchmarks.step_simulation [--nights N] [--step-boots K] [--min-effect E] [--assumed R]
     [--bisections N] [--two-cell-days N]
"""

from __future__ import annotations

import argparse
import math
import random
from collections import Counter
from types import SimpleNamespace
from typing import cast

from pipeline.config.matrix import ModelEntry
from pipeline.config.thresholds import MAX_BOOT_PAIRS, MIN_EFFECT, PairRules
from pipeline.detect.evidence import Carried
from pipeline.detect.sequential import decide_sequential
from pipeline.detect.step_test import STEP_ERROR, two_builds
from pipeline.outcome import Failure, Outcome
from pipeline.settings import Settings
from pipeline.stages.aftermath.bisect import CONFIRM_BOOTS, Bisection, Commit, StepResult, bisect_main, step_bound
from pipeline.stages.aftermath.trial_bench import Failing, cells_disagree, step_verdict
from pipeline.status import Status

SLOWDOWNS = (0.10, 0.19, 0.25, 0.50)  # 0.19: a gap of 3 boot SDs at 7 %
# nights a slowdown's undecided pairs are carried over before the simulation gives it up (the pair book carries them
# as long as A stands)
CARRIED_NIGHTS = 4
BOOT_SDS = (0.02, 0.07)
DAY, GUILTY = 10, 7  # the GPU day of 2026-11-29: 10 commits, the 7th slower
# (slowdown, true boot SD, believed share): -25 % and -50 % at 7 % believed right and half as wide, and the H200 of
# that day (tg32 at batch 4 FAILed at 0.61x; its good boots spread about 16 % where the file's prior says 4.6 %)
BISECTED = ((0.25, 0.07, 1.0), (0.25, 0.07, 0.5), (0.50, 0.07, 1.0), (0.50, 0.07, 0.5), (0.39, 0.16, 0.29))


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
    rng: random.Random,
    truth: float,
    night: tuple[list[float], float],
    boot_sd: float,
    most: int,
    assumed: float,
    *,
    least: int = 1,
    earlier: tuple[float, ...] = (),
) -> tuple[str, list[float]]:
    """One step whose commit's figure is `truth` (log): its answer and its boots, `earlier` (a first look's) and its
    own, against the `night` (its boots of A and the B/A its pairs FAILed at), the decision believing a boot SD of
    `assumed` times the true one."""
    a_boots, b_over_a = night
    builds = two_builds([(math.exp(x),) for x in a_boots], b_over_a, 2 * (assumed * boot_sd) ** 2)
    boots = list(earlier)
    while True:
        boots.append(rng.gauss(truth, boot_sd))
        answer = builds.answer(boots, max_boots=max(most, least), least_boots=least)
        if answer != "more":
            return answer, boots


def bisected_day(
    rng: random.Random, night: tuple[list[float], float], slowdown: float, boot_sd: float, most: int, assumed: float,
    *, confirm: bool,
) -> tuple[str, int]:  # fmt: skip
    """One failing day bisected: "right" (the guilty commit named), "range" (an honest range holding it), or
    "wrong" (another commit named, a range without it, or "not main's history"); and the boots its steps made."""
    commits = [Commit(f"{n:040x}", f"change {n}", "2026-11-29") for n in range(1, DAY + 1)]
    booted = 0
    looks: dict[str, tuple[float, ...]] = {}  # each commit's first look's boots: a second look starts from them

    def trial(commit: Commit, least: int) -> StepResult:
        nonlocal booted
        truth = math.log1p(-slowdown) if int(commit.sha, 16) >= GUILTY else 0.0
        earlier = looks.get(commit.sha, ()) if least > 1 else ()
        answer, boots = step(rng, truth, night, boot_sd, most, assumed, least=least, earlier=earlier)
        booted += len(boots) - len(earlier)
        looks[commit.sha] = tuple(boots)
        status = {"A": Status.PASS, "B": Status.FAIL}.get(answer, Status.SKIPPED)
        return StepResult(status, answer, weighed_boots=len(boots))

    found: Bisection = bisect_main(
        "vllm", Commit("0" * 40, "good", "2026-11-28"), commits, lambda c: trial(c, 1),
        max_steps=step_bound(DAY) + 2, confirm=(lambda c: trial(c, CONFIRM_BOOTS)) if confirm else None,
    )  # fmt: skip
    return scored(found, commits[GUILTY - 1]), booted


def scored(found: Bisection, guilty: Commit) -> str:
    """A bisected day's answer: "right" (the guilty commit named), "range" (an honest range holding it), or "wrong"
    (another commit named, a range without it, or "not main's history")."""
    if found.first_bad is not None:
        return "right" if found.first_bad == guilty else "wrong"
    if found.good_fails:
        return "wrong"
    return "range" if guilty in found.candidates or found.last_bad == guilty.sha else "wrong"


def bisections(rng: random.Random, days: int, most: int, min_effect: float) -> None:
    """The second table: whole days bisected, without and with the boundary's second look."""
    print(f"\n{days} failing days of {DAY} commits a row, the {GUILTY}th slower; culprit.step_boots {most}")
    print(
        "| slowdown | boot SD (believed) | wrong commit, one look | wrong commit, boundary again | honest range "
        "(one look / again) | boots a day (one look / again) |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for slowdown, boot_sd, assumed in BISECTED:
        counts = {flag: Counter[str]() for flag in (False, True)}
        boots = {False: 0, True: 0}
        done = 0
        while done < days:
            night = failing_night(rng, slowdown, boot_sd, min_effect)
            if night is None:
                continue
            done += 1
            for confirm in (False, True):
                answer, used = bisected_day(rng, night, slowdown, boot_sd, most, assumed, confirm=confirm)
                counts[confirm][answer] += 1
                boots[confirm] += used
        print(
            f"| -{slowdown:.0%} | {boot_sd:.0%} ({assumed * boot_sd:.1%}) | {counts[False]['wrong'] / days:.2%} | "
            f"{counts[True]['wrong'] / days:.2%} | {counts[False]['range'] / days:.1%} / "
            f"{counts[True]['range'] / days:.1%} | {boots[False] / days:.2f} / {boots[True] / days:.2f} |"
        )


# The landing run's day of 2026-12-02 (`cpu-built` one server at a time): 4 commits, the 3rd slower; its pairs FAILed
# pp128 at 0.75x and tg32 at 0.49x on one boot pair, and a boot's offset is shared by both cells (a slow boot is slow
# in each); the decision believes the cpu file's 5 % wherever the host's boots spread
TWO_CELLS = {"pp128": 0.25, "tg32": 0.51}
TWO_CELL_DAY, TWO_CELL_GUILTY, CELL_SD, BELIEVED = 4, 3, 0.02, 0.05
TWO_CELL_SDS = (0.05, 0.08, 0.10, 0.12, 0.15)
FAILING = Failing(cast(ModelEntry, SimpleNamespace(id="m")), "perf", dict.fromkeys(TWO_CELLS, 0.5),
                  frozenset(f"m:perf {cell}" for cell in TWO_CELLS))  # fmt: skip


def two_cell_step(
    rng: random.Random, bad: bool, boot_sd: float, night: tuple[dict[str, float], dict[str, float]], most: int,
    least: int, earlier: dict[str, tuple[float, ...]],
) -> tuple[Outcome, int]:  # fmt: skip
    """One look at a step, each cell asked as the perf stage asks it (its first look's boots, then boots shared by
    both cells, up to `most`): its outcome as the bisection reads one, and the boots it made."""
    a_boot, b_over_a = night
    boots: list[dict[str, float]] = []
    shift = {cell: math.log1p(-slowdown) if bad else 0.0 for cell, slowdown in TWO_CELLS.items()}
    cells: dict[str, dict[str, object]] = {}
    for cell in TWO_CELLS:
        builds = two_builds([(math.exp(a_boot[cell]),)], b_over_a[cell], 2 * BELIEVED**2)
        own = earlier.get(cell, ())
        step = [*own]
        while True:
            if len(boots) < len(step) - len(own) + 1:
                offset = rng.gauss(0.0, boot_sd)
                boots.append({c: offset + rng.gauss(shift[c], CELL_SD) for c in TWO_CELLS})
            step.append(boots[len(step) - len(own)][cell])
            answer = builds.answer(step, max_boots=max(most, least), least_boots=least)
            if answer != "more":
                break
        status = {"A": Status.PASS, "B": Status.FAIL}.get(answer, Status.INCONCLUSIVE)
        decided = status != Status.INCONCLUSIVE
        cells[cell] = {"status": status.value, "step_boots": len(step) if decided else 0,
                       "step_logs": list(step) if decided else []}  # fmt: skip
    failed = [cell for cell, c in cells.items() if c["status"] == "FAIL"]
    failures = tuple(Failure("m:perf", cell, "slower", subject=cell) for cell in failed)
    ended = {c["status"] for c in cells.values()}
    status = Status.FAIL if failures else Status.PASS if ended == {"PASS"} else Status.INCONCLUSIVE
    return Outcome("m", status, "perf", "", True, 1.0, {"cells": cells}, failures=failures), len(boots)


def two_cell_day(rng: random.Random, boot_sd: float, most: int, *, before: bool) -> tuple[str, int]:
    """The landing run's day bisected through the product's step verdict and bisect_main: "right", "range" or
    "wrong", and its boots. `before`: as the rule was until 2026-12-02 (a step passed only where every cell of
    tonight's passed, and a step whose cells answered both ways was skipped)."""
    while True:
        a_offset, b_offset = rng.gauss(0.0, boot_sd), rng.gauss(0.0, boot_sd)
        a_boot = {c: a_offset + rng.gauss(0.0, CELL_SD) for c in TWO_CELLS}
        b_boot = {c: b_offset + rng.gauss(math.log1p(-s), CELL_SD) for c, s in TWO_CELLS.items()}
        b_over_a = {c: math.exp(b_boot[c] - a_boot[c]) for c in TWO_CELLS}
        if all(ratio < 1 for ratio in b_over_a.values()):  # both FAILed tonight (the night is bisected)
            break
    commits = [Commit(f"{n:040x}", f"change {n}", "2026-12-02") for n in range(1, TWO_CELL_DAY + 1)]
    looks: dict[str, dict[str, tuple[float, ...]]] = {}
    booted = 0

    def trial(commit: Commit, least: int) -> StepResult:
        nonlocal booted
        earlier = looks.get(commit.sha, {}) if least > 1 else {}
        bad = int(commit.sha, 16) >= TWO_CELL_GUILTY
        outcome, boots = two_cell_step(rng, bad, boot_sd, (a_boot, b_over_a), most, least, earlier)
        booted += boots
        looks[commit.sha] = {name: tuple(c["step_logs"]) for name, c in outcome.numbers["cells"].items()}
        status, detail = step_verdict([FAILING], [outcome])
        split = cells_disagree([FAILING], [outcome])
        if before:
            undecided = any(c["status"] == "INCONCLUSIVE" for c in outcome.numbers["cells"].values())
            status = Status.SKIPPED if status == Status.PASS and undecided else status
            split = False
        weighed = [int(c["step_boots"]) for c in outcome.numbers["cells"].values() if c["step_boots"]]
        return StepResult(status, detail, weighed_boots=min(weighed, default=0), split=split)

    found: Bisection = bisect_main(
        "vllm", Commit("0" * 40, "good", "2026-12-01"), commits, lambda c: trial(c, 1),
        max_steps=step_bound(TWO_CELL_DAY) + 2, confirm=lambda c: trial(c, CONFIRM_BOOTS),
    )  # fmt: skip
    return scored(found, commits[TWO_CELL_GUILTY - 1]), booted


def two_cell_days(rng: random.Random, days: int, most: int) -> None:
    """The third table: the landing run's day, as the rule was and as it is."""
    print(f"\n{days} days of {TWO_CELL_DAY} commits a row, the {TWO_CELL_GUILTY}rd slower (pp128 -25 %, tg32 -51 %), "
          f"one boot of A; the decision believes a boot SD of {BELIEVED:.0%}; culprit.step_boots {most}")  # fmt: skip
    print("| boot SD | named right (before / now) | honest range (before / now) | wrong (before / now) "
          "| boots a day (before / now) |")  # fmt: skip
    print("| --- | --- | --- | --- | --- |")
    for boot_sd in TWO_CELL_SDS:
        counts = {flag: Counter[str]() for flag in (True, False)}
        boots = {True: 0, False: 0}
        for _ in range(days):
            for before in (True, False):
                answer, used = two_cell_day(rng, boot_sd, most, before=before)
                counts[before][answer] += 1
                boots[before] += used
        share = {flag: {k: v / days for k, v in c.items()} for flag, c in counts.items()}
        print(
            f"| {boot_sd:.0%} | {share[True].get('right', 0):.1%} / {share[False].get('right', 0):.1%} | "
            f"{share[True].get('range', 0):.1%} / {share[False].get('range', 0):.1%} | "
            f"{share[True].get('wrong', 0):.2%} / {share[False].get('wrong', 0):.2%} | "
            f"{boots[True] / days:.2f} / {boots[False] / days:.2f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=4000)
    parser.add_argument("--step-boots", type=int, default=Settings().culprit_step_boots)
    parser.add_argument("--min-effect", type=float, default=MIN_EFFECT)
    parser.add_argument("--assumed", type=float, default=1.0)
    parser.add_argument("--bisections", type=int, default=0)
    parser.add_argument("--two-cell-days", type=int, default=0)
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
                a_boots = night[0]
                pairs += len(a_boots)
                for truth, right in ((0.0, "A"), (math.log1p(-slowdown), "B")):
                    answer, made = step(rng, truth, night, boot_sd, most, args.assumed)
                    boots[len(made)] += 1
                    answers["right" if answer == right else "between" if answer == "between" else "wrong"] += 1
            steps = sum(boots.values())
            gap = -math.log1p(-slowdown) / boot_sd
            print(
                f"| -{slowdown:.0%} | {boot_sd:.0%} | {gap:.1f} | {failed / nights:.1%} | "
                f"{pairs / max(failed, 1):.2f} | {sum(k * n for k, n in boots.items()) / max(steps, 1):.2f} | "
                f"{boots[1] / max(steps, 1):.1%} | {answers['wrong'] / max(steps, 1):.2%} | "
                f"{answers['between'] / max(steps, 1):.1%} |"
            )
    if args.bisections:
        bisections(rng, args.bisections, most, args.min_effect)
    if args.two_cell_days:
        two_cell_days(rng, args.two_cell_days, most)


if __name__ == "__main__":
    main()
