"""Benchmark: what the CPU profile's side-by-side pairs decide for a build against itself and for a build 10 % slower.

Each round runs both, through the perf stage's own code (pairs.interleaved_pairs with the last confirmed build's
servers, paired.side_by_side with the pair rules of thresholds/cpu-x86): tonight's side (B) booted first, then A
beside it, 8 pairs and 8 more at a time while undecided, one server booted again before each block of 4. "itself":
B is A's runtime. "10 % slower": B is a copy of it whose engine sleeps in every step, sized on the tg32 (c1)
reference of this host's CPU class so a decode step takes 1/0.9 as long (benchmarks/plants.py); the B/A each night
prints is what the sleep did on this host. The designs take turns, one first in odd rounds, the
other in even ones. Each verdict is printed with its pairs, boots and time, then each design's counts: the issue's
goal is the 10 % build FAILed and the build against itself PASSed.
Run on a quiet host: .venv/bin/python benchmarks/pair_power.py [ROUNDS]
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack, nullcontext
from pathlib import Path

from benchmarks.plants import plant_slowdown
from pipeline.config.bundle import ConfigPaths, load_config
from pipeline.config.matrix import ModelEntry, Profile
from pipeline.config.thresholds import PairRules
from pipeline.infra.confirmed import BuildRef
from pipeline.infra.cpu_class import cpu_class
from pipeline.infra.openai_client import OpenAIClient
from pipeline.infra.runtime import load_runtime
from pipeline.progress import quiet
from pipeline.settings import from_environment
from pipeline.stages.prove.boot import Candidate, prepare_candidate, restartable
from pipeline.stages.prove.last_good import LastGoodServers, runtime_build
from pipeline.stages.prove.perf.measure import CaseResult
from pipeline.stages.prove.perf.paired import side_by_side
from pipeline.stages.prove.perf.pairs import Beside, interleaved_pairs
from pipeline.stages.prove.supplies import night_workshop

ROOT = Path(__file__).parents[1]
ENTRY = "smollm2-135m-instruct"
DESIGNS = ("itself", "10 % slower")
SLOWER = 0.9  # the slower build's decode rate, as a share of the good one's


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    config = load_config(ConfigPaths(ROOT / "models.yaml", ROOT / "thresholds", ROOT / "golden"))
    entry = config.matrix.entry(ENTRY)
    profile = config.matrix.profiles[entry.profile]
    thresholds = config.thresholds_for(ENTRY, cpu_class())
    rules = thresholds.pairs
    (case,) = [c for c in entry.bench.cases() if c[0].concurrency == 1 and c[0].pp == min(entry.bench.pp)]
    result = CaseResult(case[0], case[1], (), 0)  # only its cells are read: which case the pairs measure
    tg_ref = thresholds.cells[case[1].name].ref
    assert tg_ref is not None, "no tg32 reference for this host class"
    cache = from_environment().settings.places.cache
    verdicts: dict[str, list[str]] = {design: [] for design in DESIGNS}
    print(f"pair rules: min_effect {rules.min_effect:g}, boot_sd {rules.boot_sd:g}, max_pairs {rules.max_pairs}")
    with tempfile.TemporaryDirectory() as scratch:
        shop = night_workshop(from_environment().settings, profile, quiet)  # the runner's wheelhouse and base
        good = prepare_candidate(profile, shop, Path(scratch))
        assert good.runtime is not None
        a = runtime_build(good.runtime, good.runtime.root / "lock.txt", night="", commits={})
        slower_root = cache / "runtimes" / f"{good.runtime.root.name}-pair-power-slower"
        delay = (1 / SLOWER - 1) / tg_ref  # a decode step of 1/tg_ref seconds, 1/0.9 as long
        plant_slowdown(good.runtime.root, slower_root, round(delay, 5), key=f"{good.runtime.key}-pair-power-slower")
        slower = load_runtime(slower_root)
        assert slower is not None, "the planted copy is not a runtime"
        print(f"10 % slower: {delay * 1000:.1f} ms a step (tg32 (c1) reference {tg_ref:g} t/s on this class)")
        try:
            for index in range(rounds):
                for design in DESIGNS if index % 2 == 0 else DESIGNS[::-1]:
                    b = good if design == DESIGNS[0] else Candidate(profile, runtime=slower)
                    logs = Path(scratch) / f"round{index}-{design.replace(' ', '-').replace('%', 'pc')}"
                    verdicts[design].append(
                        one_night(entry, profile, b, a, result, rules, cache=cache, logs=logs, design=design)
                    )
        finally:
            shutil.rmtree(slower_root, ignore_errors=True)
    for design in DESIGNS:
        print(f"{design}: {rounds} nights: {dict(Counter(verdicts[design]))}")


def one_night(  # noqa: PLR0913 -- one night's every part, named
    entry: ModelEntry,
    profile: Profile,
    b: Candidate,
    a: BuildRef,
    result: CaseResult,
    rules: PairRules,
    *,
    cache: Path,
    logs: Path,
    design: str,
) -> str:
    """Both cells of the case decided as a night decides them; returns tg32's verdict (the cell a step slows)."""
    started = time.monotonic()
    with restartable(entry, b, cache_dir=cache, log_dir=logs / "b") as tonight, ExitStack() as stack:
        servers = LastGoodServers(entry, profile, stack, cache_dir=cache, log_dir=logs, say=print)

        def again_b(why: str) -> OpenAIClient:
            tonight.stop()
            return tonight.server.client

        beside = Beside(servers, servers.again, lambda: tonight.server.client, again_b)
        measure = interleaved_pairs(beside, entry.served_model_name, watch=nullcontext, say=print)
        found: dict[str, str] = {}
        for metric, cell in (("pp_tps", result.pp_cell.name), ("tg_tps", result.tg_cell.name)):
            decided = side_by_side(measure, result, metric, a, rules)
            assert decided is not None, "the runtime did not serve"
            decision, pairs = decided
            ratios = [b_ / a_ for a_, b_ in pairs.values]
            found[metric] = decision.decision
            boots = len({x for x, _ in pairs.boots}) + len({y for _, y in pairs.boots})
            print(
                f"{design}, {cell}: {decision.decision} over {len(pairs.values)} pairs, {boots} boots; B/A "
                f"{decision.mean_ratio:.4f} (pairs {min(ratios):.3f}..{max(ratios):.3f}, median "
                f"{statistics.median(ratios):.3f}): {decision.reason}",
                flush=True,
            )
    print(f"{design}: {time.monotonic() - started:.0f} s", flush=True)
    return found["tg_tps"]


if __name__ == "__main__":
    main()
