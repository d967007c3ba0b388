"""A real build of flashinfer-python from its PyPI sdist, then unchanged nights: cache-hit time against the build.

Usage: .venv/bin/python benchmarks/build_cache.py [HITS]   (default 5)

Prints the first (cold) build, each cache hit, the median hit as a share of the build, and whether a second cold
build from an emptied cache gives byte-identical wheels (SOURCE_DATE_EPOCH from the source).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from pipeline.infra.files import sha256_of
from pipeline.infra.pypi import download_sdist
from pipeline.infra.supply import ONLINE
from pipeline.infra.wheel_cache import WheelCache
from pipeline.infra.workshop import Workshop
from pipeline.places import CacheDir
from pipeline.settings import from_environment
from pipeline.stages.build.build_wheels import BuildResult, build_source
from pipeline.stages.build.builders import BUILDERS
from pipeline.stages.build.builders.base import BuildSource, Toolchain

SDIST = "flashinfer-python==0.7.2.post1"
TOOLCHAIN = Toolchain(cuda_arch="12.1a", torch="torch==2.13.0", index_urls=(), max_jobs=2, mode="host", ccache_dir=None)


def main() -> None:
    hits = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    cache_dir = from_environment().settings.places.cache
    source = BuildSource.from_sdist("flashinfer", download_sdist(SDIST, CacheDir(cache_dir).sdists))
    with tempfile.TemporaryDirectory(prefix="build-cache-bench-") as scratch:
        root = Path(scratch)

        def night(name: str, cache: str) -> tuple[float, BuildResult]:
            started = time.monotonic()
            result = build_source(
                BUILDERS["flashinfer"],
                source,
                TOOLCHAIN,
                cache=WheelCache(root / cache),
                work_dir=root / name / "work",
                out_dir=root / name / "wheels",
                # a benchmark of the build cache on a machine with the network: pip resolves
                shop=Workshop(CacheDir(cache_dir), ONLINE),
            )
            return time.monotonic() - started, result

        cold_s, cold = night("cold", "cache-a")
        print(f"{SDIST}: cold build {cold_s:.2f} s -> {', '.join(w.name for w in cold.wheels)}")
        hit_times = []
        for index in range(hits):
            seconds, result = night(f"hit{index}", "cache-a")
            assert result.cached, "an unchanged source must be a cache hit"
            hit_times.append(seconds)
            print(f"  unchanged night {index + 1}: cache hit in {seconds:.3f} s")
        median_hit = statistics.median(hit_times)
        print(f"median cache hit {median_hit:.3f} s = {median_hit / cold_s:.2%} of the cold build (target < 5 %)")
        again_s, again = night("cold-again", "cache-b")
        same = [sha256_of(a) == sha256_of(b) for a, b in zip(cold.wheels, again.wheels, strict=True)]
        print(f"second cold build from an empty cache: {again_s:.2f} s; byte-identical wheels: {all(same)}")


if __name__ == "__main__":
    main()
