"""Benchmark: how far boots of one build measure apart on a host that holds one server (a GPU, a Spark).

Boots the entry N times in a row from the runtime the night would serve (the settings' supply: its wheelhouse, its
base), measures its concurrency-1 case RUNS times after two warm-ups as the perf stage does, and prints each boot's
medians, then for each cell the SD of the boots' log medians less what the runs within a boot explain. Two boots
differ by sqrt(2) times that: the `boot_sd` of thresholds/ (the SD of log(B/A) between two boots of one build).
Run on a quiet host: python benchmarks/gpu_boot_spread.py ENTRY [BOOTS] [RUNS]
"""

from __future__ import annotations

import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pipeline.config.bundle import ConfigPaths, load_config
from pipeline.progress import quiet
from pipeline.settings import from_environment
from pipeline.stages.prove.boot import boot, prepare_candidate
from pipeline.stages.prove.perf.measure import PromptMaker, latency_estimate, measure_run
from pipeline.stages.prove.supplies import night_workshop


def main() -> None:
    entry_id = sys.argv[1]
    boots = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    settings = from_environment().settings
    root = settings.places.config
    config = load_config(ConfigPaths(root / "models.yaml", root / "thresholds", root / "golden"))
    entry = config.matrix.entry(entry_id)
    profile = config.matrix.profiles[entry.profile]
    (case,) = [c for c in entry.bench.cases() if c[0].concurrency == 1]
    cache, model = settings.places.cache, entry.served_model_name
    medians: dict[str, list[float]] = {"pp_tps": [], "tg_tps": []}
    within: dict[str, list[float]] = {"pp_tps": [], "tg_tps": []}
    with tempfile.TemporaryDirectory() as scratch:
        candidate = prepare_candidate(profile, night_workshop(settings, profile, quiet), Path(scratch))
        for index in range(boots):
            started = time.monotonic()
            with boot(entry, candidate, cache_dir=cache, log_dir=Path(scratch) / f"boot{index}") as server:
                ready_s = time.monotonic() - started
                prompts, latency = PromptMaker(server.client, model), latency_estimate(server.client)
                for _ in range(2):
                    measure_run(server.client, model, case, prompts=prompts, latency_s=latency)
                measured = [
                    measure_run(server.client, model, case, prompts=prompts, latency_s=latency) for _ in range(runs)
                ]
            for metric, found in medians.items():
                values = [m.metric(metric) for m in measured]
                found.append(statistics.median(values))
                within[metric].append(statistics.variance([math.log(v) for v in values]) / runs)
            print(
                f"boot {index + 1}/{boots}: ready in {ready_s:.0f} s; {case[0].name} {medians['pp_tps'][-1]:.1f} t/s, "
                f"{case[1].name} {medians['tg_tps'][-1]:.1f} t/s (medians of {runs})",
                flush=True,
            )
    for metric, cell in (("pp_tps", case[0].name), ("tg_tps", case[1].name)):
        logs = [math.log(v) for v in medians[metric]]
        total = statistics.variance(logs)
        per_boot = math.sqrt(max(0.0, total - statistics.fmean(within[metric])))
        print(
            f"{cell}: {boots} boots, medians {min(medians[metric]):.1f}..{max(medians[metric]):.1f} t/s; SD of the "
            f"log medians {math.sqrt(total):.4f}, of a boot beyond its runs {per_boot:.4f}; boot_sd (two boots) "
            f"{per_boot * math.sqrt(2):.4f}"
        )


if __name__ == "__main__":
    main()
