"""Benchmark: how often side-by-side pairs PASS an unchanged build and FAIL a slower one, through the decision's own
code (paired.side_by_side with the CPU profile's pair rules), over simulated nights.

A simulated night measures pairs as pairs.interleaved_pairs does (config.thresholds.blocked_boots: blocks of 4,
one server booted again before each block after the first, B first), each boot adding its own offset (a normal of
SD spread/sqrt(2) in the log, so two boots differ by `spread`), each pair its own noise (SD 0.03 in the log, about
what a tg32 pair shows on a 2-core CPU). The spreads are the measured one (0.043, benchmarks/boot_spread.py) and
wider ones a host may have.
Run: .venv/bin/python benchmarks/side_by_side_simulation.py [NIGHTS]
"""

from __future__ import annotations

import math
import random
import sys
from collections import Counter
from pathlib import Path
from typing import cast

from pipeline.config.bundle import ConfigPaths, load_config
from pipeline.config.thresholds import PairRules, blocked_boots
from pipeline.infra.confirmed import BuildRef
from pipeline.stages.prove.perf.measure import CaseResult
from pipeline.stages.prove.perf.paired import PairedMeasure as Measure
from pipeline.stages.prove.perf.paired import PairsOverBoots, side_by_side

ROOT = Path(__file__).parents[1]
PAIR_SD = 0.03
SPREADS = (0.02, 0.043, 0.06, 0.08)
EFFECTS = (0.0, 0.05, 0.10, 0.15)
# what side_by_side hands the measure, which a simulated night does not read
UNREAD_CASE, UNREAD_BUILD = cast(CaseResult, None), cast(BuildRef, None)


def simulated_night(rng: random.Random, slowdown: float, spread: float) -> Measure:
    """A night's pairs of a build `slowdown` slower than A (0.1 = 10 %), boots offset by `spread` a pair of them,
    in the layout the side-by-side pairs boot (blocked_boots)."""
    offsets: dict[tuple[str, int], float] = {}
    values: list[tuple[float, float]] = []

    def offset(side: str, boot: int) -> float:
        return offsets.setdefault((side, boot), rng.gauss(0.0, spread / math.sqrt(2)))

    def measure(result: CaseResult, metric: str, wanted: int, a: BuildRef) -> PairsOverBoots:
        boots = blocked_boots(wanted)
        for a_boot, b_boot in boots[len(values) :]:
            log = math.log1p(-slowdown) + offset("b", b_boot) - offset("a", a_boot) + rng.gauss(0.0, PAIR_SD)
            values.append((100.0, 100.0 * math.exp(log)))
        return PairsOverBoots(values[:wanted], boots)

    return measure


def main() -> None:
    nights = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    config = load_config(ConfigPaths(ROOT / "models.yaml", ROOT / "thresholds", ROOT / "golden"))
    rules: PairRules = config.thresholds_for("smollm2-135m-instruct", "avx512").pairs
    print(f"pair rules: min_effect {rules.min_effect:g}, boot_sd {rules.boot_sd:g}, max_pairs {rules.max_pairs}")
    print("| boot pair spread | slowdown | FAIL | PASS | INCONCLUSIVE | pairs (mean) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for spread in SPREADS:
        for slowdown in EFFECTS:
            rng = random.Random(f"{spread}/{slowdown}")
            counts: Counter[str] = Counter()
            pairs = 0
            for _ in range(nights):
                night = simulated_night(rng, slowdown, spread)
                found = side_by_side(night, UNREAD_CASE, "tg_tps", UNREAD_BUILD, rules)
                assert found is not None
                counts[found[0].decision] += 1
                pairs += len(found[1].values)
            rates = " | ".join(f"{counts[d] / nights:.1%}" for d in ("FAIL", "PASS", "INCONCLUSIVE"))
            print(f"| {spread:g} | {slowdown:.0%} | {rates} | {pairs / nights:.1f} |", flush=True)


if __name__ == "__main__":
    main()
