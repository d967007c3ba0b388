"""Prints how many extra builds the culprit search spends: every placement of 1 or 2 breaking PRs among n PRs.

Usage: .venv/bin/python benchmarks/culprit_cost.py [MAX_PRS]
"""

from __future__ import annotations

import itertools
import statistics
import sys

from pipeline.stages.aftermath.culprit import PullRef, TrialResult, find_culprits
from pipeline.status import Status


def builds(count: int, bad: set[int]) -> tuple[int, bool]:
    prs = [PullRef("vllm", n) for n in range(count)]

    def trial(subset: tuple[PullRef, ...]) -> TrialResult:
        return TrialResult(Status.FAIL if bad & {pr.number for pr in subset} else Status.PASS, "")

    search = find_culprits(prs, trial, max_builds=1000)
    found = {pr.number for pr, _ in search.culprits} == bad
    return len(search.trials), found


def main() -> None:
    most = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    print("PRs  culprits  placements  extra builds: median  max  (all found)")
    for count in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32):
        if count > most:
            break
        for size in (1, 2):
            if size > count:
                continue
            runs = [builds(count, set(bad)) for bad in itertools.combinations(range(count), size)]
            spent = [n for n, _ in runs]
            ok = all(found for _, found in runs)
            median, worst = statistics.median(spent), max(spent)
            print(f"{count:3d}  {size:8d}  {len(runs):10d}  {median:19.1f}  {worst:3d}  ({'yes' if ok else 'NO'})")


if __name__ == "__main__":
    main()
