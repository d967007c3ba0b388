"""Benchmark: how far two boots of one build measure apart in the perf stage's side-by-side pairs, before and after
the later boot changes sides.

Each round pairs the CPU entry's runtime with itself twice, through the perf stage's own code (pairs.
interleaved_pairs with the last confirmed build's servers, last_good.LastGoodServers): tonight's side (B) booted
first, then A beside it, as a night does. "one boot each" is the design before: 8 pairs of those two boots, B always
the earlier. "later boot swapped" is the design now: 4 pairs, then B booted again after A and 4 more, so an order
effect (the later boot measuring faster) cancels. The designs take turns, one first in odd rounds, the other in
even ones. Every round compares one build with itself, so each design's ratios around 1, the pairs' own standard
errors taken out, are the spread its pair rules must count: sqrt(mean of the squared log ratios - mean squared
standard error), the order effect included. That figure is what thresholds/ calls `boot_sd`.
Run on a quiet host: .venv/bin/python benchmarks/boot_spread.py [ROUNDS]
"""

from __future__ import annotations

import math
import statistics
import sys
import tempfile
from contextlib import ExitStack, nullcontext
from pathlib import Path

from pipeline.config.bundle import ConfigPaths, load_config
from pipeline.detect.steps import CONFIRM_PAIRS, confirm
from pipeline.infra.cpu_class import cpu_class
from pipeline.infra.openai_client import OpenAIClient
from pipeline.progress import quiet
from pipeline.settings import from_environment
from pipeline.stages.prove.boot import prepare_candidate, restartable
from pipeline.stages.prove.last_good import LastGoodServers, runtime_build
from pipeline.stages.prove.perf.measure import CaseResult
from pipeline.stages.prove.perf.paired import PairsOverBoots
from pipeline.stages.prove.perf.pairs import Beside, interleaved_pairs
from pipeline.stages.prove.supplies import night_workshop

ROOT = Path(__file__).parents[1]
ENTRY = "smollm2-135m-instruct"
DESIGNS = ("one boot each", "later boot swapped")


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    config = load_config(ConfigPaths(ROOT / "models.yaml", ROOT / "thresholds", ROOT / "golden"))
    entry = config.matrix.entry(ENTRY)
    profile = config.matrix.profiles[entry.profile]
    rules = config.thresholds_for(ENTRY, cpu_class()).pairs
    (case,) = [c for c in entry.bench.cases() if c[0].concurrency == 1 and c[0].pp == min(entry.bench.pp)]
    cells = {"pp_tps": case[0].name, "tg_tps": case[1].name}
    result = CaseResult(case[0], case[1], (), 0)  # only its cells are read: which case the pairs measure
    cache = from_environment().settings.places.cache
    found: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        shop = night_workshop(from_environment().settings, profile, quiet)  # the runner's wheelhouse and base
        candidate = prepare_candidate(profile, shop, Path(scratch))
        assert candidate.runtime is not None
        a = runtime_build(candidate.runtime, candidate.runtime.root / "lock.txt", night="", commits={})
        for index in range(rounds):
            order = DESIGNS if index % 2 == 0 else DESIGNS[::-1]
            for design in order:
                logs = Path(scratch) / f"round{index}-{design.replace(' ', '-')}"
                with (
                    restartable(entry, candidate, cache_dir=cache, log_dir=logs / "b") as b,
                    ExitStack() as stack,
                ):
                    servers = LastGoodServers(entry, profile, stack, cache_dir=cache, log_dir=logs, say=print)

                    def again_b(why: str) -> OpenAIClient:
                        b.stop()
                        return b.server.client

                    swap = again_b if design == DESIGNS[1] else None
                    beside = Beside(servers, servers.again, lambda: b.server.client, swap)
                    measure = interleaved_pairs(beside, entry.served_model_name, watch=nullcontext, say=print)
                    for metric, cell in cells.items():
                        measured = measure(result, metric, CONFIRM_PAIRS, a)
                        assert isinstance(measured, PairsOverBoots), "the runtime did not serve"
                        pairs = measured.values
                        alone = confirm(pairs)
                        counted = confirm(pairs, min_effect=rules.min_effect, boot_sd=rules.boot_sd)
                        se = alone.sd_log_ratio / math.sqrt(len(pairs))
                        found.setdefault((design, metric), []).append((alone.mean_log_ratio, se))
                        print(
                            f"round {index + 1}/{rounds}, {design}, {cell}: B/A {alone.mean_ratio:.4f} (se of the "
                            f"log {se:.4f}); with the pair rules (min_effect {rules.min_effect:g}, boot_sd "
                            f"{rules.boot_sd:g}): {counted.decision}",
                            flush=True,
                        )
    for design in DESIGNS:
        for metric, cell in cells.items():
            means = [m for m, _ in found[(design, metric)]]
            within = statistics.fmean(se**2 for _, se in found[(design, metric)])
            around_one = math.sqrt(max(0.0, statistics.fmean(m**2 for m in means) - within))
            print(
                f"{design}, {cell}: {rounds} rounds of {CONFIRM_PAIRS} pairs; B/A {min(map(math.exp, means)):.4f}.."
                f"{max(map(math.exp, means)):.4f}, mean {math.exp(statistics.fmean(means)):.4f}; pairs' own se "
                f"(rms) {math.sqrt(within):.4f}; spread of B/A around 1, the pairs' error taken out (boot_sd) "
                f"{around_one:.4f}"
            )


if __name__ == "__main__":
    main()
