"""Probe: the accelerator canary on a real GPU, exactly as health runs it, and its judgement against the Spark profile.

The machine's own python (with torch and nvidia-ml-py, as a vLLM candidate has them) stands for the candidate's:
three canaries back to back, each line its rate, products, SM clock under load and clock-event reasons, then the
Spark profile's verdict on each. Run on a GPU host: python benchmarks/canary_probe.py [OUT_DIR]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))

from pipeline.config.bundle import ConfigPaths, load_config
from pipeline.stages.prove.canary import CANARY, CANARY_SECONDS, CANARY_SIZE, judge_canary, run_canary

ROOT = Path(__file__).parents[1]


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())
    spark = load_config(ConfigPaths(ROOT / "models.yaml", ROOT / "thresholds", ROOT / "golden")).matrix.profiles[
        "spark"
    ]
    argv = [sys.executable, "-c", CANARY, "cuda", str(CANARY_SIZE["cuda"]), str(CANARY_SECONDS["cuda"])]
    rates = []
    for index in range(3):
        result = run_canary(argv, out / f"canary-{index}.log")
        rates.append(result.tflops)
        judged = judge_canary(spark, result)
        reasons = [*judged.host, *judged.candidate, *judged.notes] or ["fit"]
        verdict = "; ".join(reasons)
        print(f"canary {index}: {result.describe()}; reasons 0x{result.reasons or 0:x}; Spark verdict: {verdict}")
    print(f"median {statistics.median(rates):.1f} TFLOPS over {len(rates)} canaries")


if __name__ == "__main__":
    main()
