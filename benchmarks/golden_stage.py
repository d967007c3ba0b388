"""Benchmark: the golden stage on the CPU profile, rerun N times, each on a fresh boot (as nights are).

The first run has no drift reference: the judge (transformers on the entry's weights) scores it, and it
records the reference; every later run is judged against that reference (its answers scored again under
the run's build), so a false failure from nondeterminism across boots would show. Prints per run: checks,
failures, tokens generated and seconds; then medians, to plan the golden budget on a Spark.
Run: .venv/bin/python benchmarks/golden_stage.py [RUNS]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from pipeline.config.bundle import ConfigPaths, load_config
from pipeline.infra.references import ReferenceStore
from pipeline.infra.weights import model_reference
from pipeline.progress import quiet
from pipeline.settings import from_environment
from pipeline.stages.prove.boot import boot, prepare_candidate
from pipeline.stages.prove.golden_run import run_golden
from pipeline.stages.prove.judge import transformers_judge
from pipeline.stages.prove.supplies import night_workshop

ROOT = Path(__file__).parents[1]


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    config = load_config(ConfigPaths(ROOT / "models.yaml", ROOT / "thresholds", ROOT / "golden"))
    entry = config.matrix.entry("smollm2-135m-instruct")
    hardware = config.matrix.profiles[entry.profile].hardware
    cache = from_environment().settings.places.cache
    durations, tokens, false_failures = [], [], 0
    with tempfile.TemporaryDirectory() as scratch:
        store = ReferenceStore(Path(scratch) / "history" / "golden")
        profile = config.matrix.profiles[entry.profile]
        shop = night_workshop(from_environment().settings, profile, quiet)  # the runner's wheelhouse and base
        candidate = prepare_candidate(profile, shop, Path(scratch))
        model_ref = model_reference(entry, shop, Path(scratch))
        judge = transformers_judge(entry, profile, model_ref, shop, Path(scratch))
        for index in range(runs):
            references = store.load(hardware, entry.id)
            with boot(entry, candidate, cache_dir=cache, log_dir=Path(scratch) / f"run{index}") as server:
                result = run_golden(
                    server.client,
                    entry,
                    config.golden[entry.golden],
                    model_ref=model_ref,
                    references=references,
                    judge=judge if references is None else None,
                )
            if index == 0 and result.recordable:
                store.save(hardware, entry.id, time.strftime("%Y-%m-%d"), result.generations, result.identity_files)
            false_failures += len(result.failures)
            durations.append(result.duration_s)
            tokens.append(result.tokens_generated)
            failed = "; ".join(f"{v.check}/{v.subject}: {v.reason}" for v in result.failures) or "none"
            judged_by = "the judge" if references is None else "the reference"
            print(
                f"run {index + 1} ({judged_by}): {len(result.verdicts)} checks, failures: {failed}; "
                f"{result.tokens_generated} tokens "
                f"in {result.duration_s:.1f} s (boot {server.boot_s:.1f} s)",
                flush=True,
            )
    print(
        f"\n{runs} runs on fresh boots: {false_failures} false failures; "
        f"golden stage median {statistics.median(durations):.1f} s "
        f"(min {min(durations):.1f}, max {max(durations):.1f}), {statistics.median(tokens):.0f} tokens per run, "
        f"{statistics.median(tokens) / statistics.median(durations):.1f} tokens/s through the stage"
    )


if __name__ == "__main__":
    main()
