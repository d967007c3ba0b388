"""Benchmark: the harness's boot overhead on the CPU profile, against the server's own log timestamps.

For N boots (default 5) prints, per boot and as medians: launch to the server's first log line,
launch to the server's own "ready" (its last timestamped line before uvicorn's "Application startup
complete", 1 s resolution), launch to the harness seeing the right /v1/models, and launch to ready
after the warm-up completion. Run: .venv/bin/python benchmarks/harness_overhead.py [N]
"""

from __future__ import annotations

import re
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from pipeline.config.bundle import ConfigPaths, load_config
from pipeline.progress import quiet
from pipeline.settings import from_environment
from pipeline.stages.prove.boot import boot, prepare_candidate
from pipeline.stages.prove.supplies import night_workshop

ROOT = Path(__file__).parents[1]
STAMP = re.compile(r"(?:INFO|WARNING|DEBUG|ERROR) (\d\d-\d\d \d\d:\d\d:\d\d)")


def server_times(log: Path, launched_wall: float) -> tuple[float, float]:
    """(first log line, own ready) in seconds after launch, from the server's log timestamps."""
    text = log.read_text(errors="replace")
    year = datetime.fromtimestamp(launched_wall).year
    stamps = [
        (m.start(), datetime.strptime(f"{year}-{m.group(1)}", "%Y-%m-%d %H:%M:%S").timestamp())
        for m in STAMP.finditer(text)
    ]
    ready_at = text.index("Application startup complete")
    own_ready = max(t for pos, t in stamps if pos < ready_at)
    return stamps[0][1] - launched_wall, own_ready - launched_wall


def main() -> None:
    boots = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    config = load_config(ConfigPaths(ROOT / "models.yaml", ROOT / "thresholds", ROOT / "golden"))
    entry = config.matrix.entry("smollm2-135m-instruct")
    cache = from_environment().settings.places.cache
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        profile = config.matrix.profiles[entry.profile]
        shop = night_workshop(from_environment().settings, profile, quiet)  # the runner's wheelhouse and base
        candidate = prepare_candidate(profile, shop, Path(scratch))
        for index in range(boots):
            log_dir = Path(scratch) / f"boot{index}"
            launched = time.time()
            with boot(entry, candidate, cache_dir=cache, log_dir=log_dir) as server:
                first, own = server_times(server.log_path, launched)
                rows.append((first, own, server.identity_s, server.boot_s))
            print(
                f"boot {index + 1}: first log line {first:5.1f} s, server's own ready {own:5.1f} s, "
                f"harness sees /v1/models {rows[-1][2]:5.1f} s, ready after warm-up {rows[-1][3]:5.1f} s",
                flush=True,
            )
    medians = [statistics.median(column) for column in zip(*rows, strict=True)]
    print(
        f"\nmedian of {boots}: server ready {medians[1]:.1f} s (1 s log resolution), harness identity "
        f"{medians[2]:.1f} s, harness ready {medians[3]:.1f} s"
    )
    print(
        f"harness overhead: {medians[3] - medians[1]:+.1f} s over the server's own ready "
        f"({medians[2] - medians[1]:+.1f} s to see it, {medians[3] - medians[2]:+.1f} s for the warm-up completion); "
        f"ratio {medians[3] / medians[1]:.2f}"
    )


if __name__ == "__main__":
    main()
