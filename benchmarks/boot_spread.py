"""Benchmark: how far two boots of one build measure apart in paired runs, the spread pairs cannot see.

Each round boots the CPU entry twice from the same runtime (X and Y, side by side), measures interleaved pairs
of its concurrency-1 case as the perf stage does (two warm-ups each, then X Y, Y X, ...), and prints Y/X with
the pairs' own standard error (both as the gate's trimmed statistic has them) and the verdicts `confirm` gives,
without and with the hardware's pair rules from thresholds/. Every round compares one build with itself, so any
spread of the rounds' ratios beyond their standard errors is the boots' own: between-boot SD =
sqrt(var of the rounds' log ratios - mean squared standard error). That figure is what thresholds/ calls
`boot_sd`; where X, the earlier boot, measures slower or faster every round (an order effect: tonight's B is
booted before A), the spread around 1 is the figure to count.
Run on a quiet host: .venv/bin/python benchmarks/boot_spread.py [ROUNDS] [PAIRS]
"""

from __future__ import annotations

import math
import statistics
import sys
import tempfile
from pathlib import Path

from pipeline.config.bundle import ConfigPaths, load_config
from pipeline.detect.steps import confirm
from pipeline.infra.cpu_class import cpu_class
from pipeline.settings import from_environment
from pipeline.stages.prove.boot import boot, prepare_candidate
from pipeline.stages.prove.perf.measure import PromptMaker, latency_estimate, measure_run
from pipeline.stages.prove.perf.pairs import measure_pair, pair_order

ROOT = Path(__file__).parents[1]
ENTRY = "smollm2-135m-instruct"


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    wanted = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    config = load_config(ConfigPaths(ROOT / "models.yaml", ROOT / "thresholds", ROOT / "golden"))
    entry = config.matrix.entry(ENTRY)
    profile = config.matrix.profiles[entry.profile]
    spec = entry.bench
    rules = config.thresholds_for(ENTRY, cpu_class()).pairs
    (case,) = [c for c in spec.cases() if c[0].concurrency == 1 and c[0].pp == min(spec.pp) and c[1].tg == min(spec.tg)]
    cache = from_environment().settings.places.cache
    model = entry.served_model_name
    found: dict[str, list[tuple[float, float]]] = {"pp_tps": [], "tg_tps": []}
    with tempfile.TemporaryDirectory() as scratch:
        candidate = prepare_candidate(profile, cache, Path(scratch))
        for index in range(rounds):
            logs = Path(scratch) / f"round{index}"
            with (
                boot(entry, candidate, cache_dir=cache, log_dir=logs / "x") as x,
                boot(entry, candidate, cache_dir=cache, log_dir=logs / "y") as y,
            ):
                sides = [(s.client, PromptMaker(s.client, model), latency_estimate(s.client)) for s in (x, y)]
                for side in (*sides, *sides):  # two warm-ups each, not kept, as the perf stage's pairs
                    measure_run(side[0], model, case, prompts=side[1], latency_s=side[2])
                runs = [measure_pair(sides[0], sides[1], model, case, a_first=pair_order(i)) for i in range(wanted)]
            for metric, cell in (("pp_tps", case[0].name), ("tg_tps", case[1].name)):
                pairs = [(rx.metric(metric), ry.metric(metric)) for rx, ry in runs]
                alone = confirm(pairs)
                counted = confirm(pairs, min_effect=rules.min_effect, boot_sd=rules.boot_sd)
                se = alone.sd_log_ratio / math.sqrt(len(pairs))
                found[metric].append((alone.mean_log_ratio, se))
                print(
                    f"round {index + 1}/{rounds} {cell}: Y/X {alone.mean_ratio:.4f} (se of the log {se:.4f}); "
                    f"pairs alone: {alone.decision}; with the pair rules (min_effect {rules.min_effect:g}, boot_sd "
                    f"{rules.boot_sd:g}): {counted.decision}: {counted.reason}",
                    flush=True,
                )
    for metric, cell in (("pp_tps", case[0].name), ("tg_tps", case[1].name)):
        means = [m for m, _ in found[metric]]
        within = statistics.fmean(se**2 for _, se in found[metric])
        between = statistics.variance(means) if len(means) > 1 else math.nan
        boot_sd = math.sqrt(max(0.0, between - within)) if math.isfinite(between) else math.nan
        # Y is always the later boot: a mean away from 1 is an order effect (the earlier boot slower, say), which
        # the SD around the mean hides but the gate sees, as it tests B/A against 1 and B is the earlier boot
        around_one = math.sqrt(max(0.0, statistics.fmean(m**2 for m in means) - within))
        print(
            f"{cell}: {rounds} rounds of {wanted} pairs; ratios {min(map(math.exp, means)):.4f}.."
            f"{max(map(math.exp, means)):.4f}, mean {math.exp(statistics.fmean(means)):.4f}; SD of the rounds' log "
            f"ratios {math.sqrt(between):.4f}, pairs' own se (rms) {math.sqrt(within):.4f}; between-boot SD of a "
            f"ratio {boot_sd:.4f}, around 1 (the order effect counted) {around_one:.4f}"
        )


if __name__ == "__main__":
    main()
