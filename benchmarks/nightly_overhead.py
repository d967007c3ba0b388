"""The pipeline's own overhead on the CPU profile: a whole night's wall time against the engine's work in it.

Usage: .venv/bin/python benchmarks/nightly_overhead.py [NIGHTS]   (default 2; needs the CPU runtime, made by the tests)

Each night runs `spark-nightly nightly --profile cpu` as a real process in a scratch folder (its own runs, history
and release store) and is timed from outside; the engine's work is the sum of boot, golden and benchmark time that
the night recorded for its entry. The rest is the pipeline: candidate check, health, smoke, publishing, alerts and
reports, and the interpreter's start.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).parents[1]


def main() -> None:
    nights = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    ratios = []
    for index in range(nights):
        with tempfile.TemporaryDirectory(prefix="nightly-overhead-") as scratch:
            env = dict(os.environ) | {
                "SPARK_NIGHTLY_PATHS_RUNS": f"{scratch}/runs",
                "SPARK_NIGHTLY_PATHS_STATE": f"{scratch}/history",
                "SPARK_NIGHTLY_PUBLISH_LOCAL_DIR": f"{scratch}/releases",
            }
            started = time.monotonic()
            subprocess.run(
                [str(ROOT / ".venv" / "bin" / "spark-nightly"), "nightly", "--profile", "cpu"],
                env=env, cwd=ROOT, check=True, capture_output=True, timeout=1800,
            )  # fmt: skip
            wall = time.monotonic() - started
            (run_json,) = Path(scratch, "runs").glob("*/run.json")
            entries = json.loads(run_json.read_text())["entries"]
            engine = sum(e["numbers"].get(k, 0.0) for e in entries for k in ("boot_s", "golden_s", "perf_s"))
            ratios.append(wall / engine)
            print(
                f"night {index + 1}: wall {wall:.1f} s; boot + golden + benchmark {engine:.1f} s; "
                f"pipeline {wall - engine:.1f} s; ratio {wall / engine:.3f}"
            )
    print(f"median ratio over {nights} nights: {statistics.median(ratios):.3f} (1.0 would be no overhead at all)")


if __name__ == "__main__":
    main()
