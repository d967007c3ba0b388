"""How long `inspect --profile spark` takes on what upstream ships, the cubin wheel above all.

Usage: .venv/bin/python -m benchmarks.inspect_upstream [ROUNDS]   (default 3; fetches the pinned wheels from PyPI once)

Times inspect_wheel per wheel (archive and RECORD check, metadata, every native member through cuobjdump), as
`spark-nightly inspect` runs it, and prints each wheel's median, its range, its member count and the members read a
second. flashinfer-cubin 0.6.13 holds about 16,000 cubins: the single pass over its archive with cuobjdump pipelined
over the cores is what keeps it under two minutes on two cores (the earlier member-by-member reopening took 23).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from pipeline.config.bundle import ConfigPaths, load_config
from pipeline.infra.fatbin import ensure_cuobjdump
from pipeline.infra.wheels import native_infos
from pipeline.progress import quiet
from pipeline.settings import from_environment
from pipeline.stages.build.inspect import Target, inspect_wheel
from pipeline.stages.prove.supplies import night_workshop
from tests.upstream import FLASHINFER_CUBIN, FLASHINFER_PYTHON, VLLM_AARCH64

ROOT = Path(__file__).parents[1]


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    config = load_config(ConfigPaths(ROOT / "models.yaml", ROOT / "thresholds", ROOT / "golden"))
    target = Target.of(config.matrix.profiles["spark"])
    settings = from_environment().settings
    shop = night_workshop(settings, config.matrix.profiles["spark"], quiet)  # the runner's wheelhouse, as a night's
    with tempfile.TemporaryDirectory(prefix="inspect-bench-") as logs:
        cuobjdump = ensure_cuobjdump(shop, Path(logs))
    print(f"{'wheel':52} {'members':>8} {'median s':>9} {'range s':>14} {'members/s':>10}")
    for upstream in (FLASHINFER_CUBIN, VLLM_AARCH64, FLASHINFER_PYTHON):
        wheel = upstream.fetch()
        with zipfile.ZipFile(wheel) as archive:
            native = len(native_infos(archive))
        seconds = []
        for _ in range(rounds):
            started = time.monotonic()
            report = inspect_wheel(wheel, target, cuobjdump)
            seconds.append(time.monotonic() - started)
        median = statistics.median(seconds)
        shown = f"{min(seconds):.1f}..{max(seconds):.1f}"
        rate = native / median
        print(f"{wheel.name[:52]:52} {native:>8,} {median:>9.1f} {shown:>14} {rate:>10,.0f}  {report.status.value}")


if __name__ == "__main__":
    main()
