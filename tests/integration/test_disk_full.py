"""A night whose disk fills: the host's, exit 4, the full folder named first; never "a bug in spark-nightly".

The runs folder lies on a 64 KiB tmpfs in a mount namespace of its own, filled before the night starts, so the first
run record the night writes finds the disk full for real (ENOSPC from the kernel), as a runner's disk fills when its
cache has grown unchecked.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.integration.conftest import GATE, CpuEngine, Place, require_root_and

pytestmark = pytest.mark.integration


def test_a_night_whose_disk_fills_is_the_hosts_and_names_the_full_folder(
    place: Place, cpu_engine: CpuEngine, tmp_path: Path
) -> None:
    require_root_and({"unshare": "util-linux"}, "a full disk", "a mount namespace needs it")
    small = tmp_path / "small-disk"
    small.mkdir()
    runs = small / "runs"
    # the small disk filled before the night starts, so its first write fails whatever it writes first (a loaded
    # host's night skips its boot and writes little: 64 KiB free would hold it)
    mount = f"mount -t tmpfs -o size=64k tmpfs {small} && (head -c 1M /dev/zero > {small}/filler || true)"
    env = {"SPARK_NIGHTLY_PATHS_RUNS": str(runs), "SPARK_NIGHTLY_PATHS_CACHE": str(cpu_engine.cache_dir)}
    night = subprocess.run(
        ["unshare", "-m", "sh", "-c", f'{mount} && exec "$@"', "sh", str(GATE), "nightly", "--profile", "cpu"],
        env=dict(os.environ) | env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert night.returncode == 4, night.stdout[-2000:] + night.stderr[-2000:]
    (error,) = [line for line in night.stderr.splitlines() if line.startswith("error:")]
    assert "a disk of this host is full" in error and "No space left on device" in error, error
    assert f"): paths.runs {runs}: 0 MiB free; " in error, error  # the full folder first
    assert "bug in spark-nightly" not in night.stderr and "internal error" not in night.stderr
    assert not any((place.root / "releases").glob("**/*.whl"))  # nothing published
