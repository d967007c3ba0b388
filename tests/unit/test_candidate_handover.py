"""A built night's candidate stage serves the runtime its build made to read the lock, never makes it again; a run
whose build ran in another process (`spark-nightly build --run-id`, then `nightly --run-id`) makes it from the record.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.config.bundle import ConfigPaths, load_config
from pipeline.infra.runtime import Runtime
from pipeline.infra.supply import Supply
from pipeline.infra.wheel_cache import WheelCache
from pipeline.infra.workshop import Workshop
from pipeline.places import CacheDir, RunDir
from pipeline.stages.build.build_record import BuildRecord
from pipeline.stages.build.build_wheels import BuildResult
from pipeline.stages.build.inspect import ArtifactReport
from pipeline.stages.build.night_build import write_report
from pipeline.stages.prove import candidate
from pipeline.status import Status
from tests.wheelfactory import make_wheel


def _built_run(tmp_path: Path) -> tuple[RunDir, Path]:
    """What a passing `cpu-built` build leaves: its wheel in the night's folder and the wheel cache, its record,
    a passing inspection and its plan; returns the run and the wheels folder."""
    run, wheels = RunDir(tmp_path / "runs" / "r1"), tmp_path / "wheels"
    run.root.mkdir(parents=True)
    (wheels / "r1").mkdir(parents=True)
    wheel = make_wheel(wheels / "r1", "vllm-cpu", "0.32.0+g0123456.d20261129", {"vllm/x.py": b"x = 1\n"})
    WheelCache(CacheDir(tmp_path / "cache").wheels).store("k" * 24, [wheel], {}, 1.0)
    BuildRecord.of([BuildResult("vllm", "k" * 24, False, (wheel,), 1.0, 1.0, "overlay", "only Python")]).write(
        run.build_record
    )
    write_report(run.inspection, ArtifactReport(Status.PASS, (), ()))
    run.plan.write_text(json.dumps({"version": 1, "sources": []}))
    run.lock.write_text("vllm-cpu==0.32.0+g0123456.d20261129\n")  # read from the runtime the build made
    return run, wheels


def _runtime(root: Path) -> Runtime:
    root.mkdir(parents=True)
    (root / "lock.txt").write_text("vllm-cpu==0.32.0+g0123456.d20261129\n")
    return Runtime(root, root.name, (), ())


def test_the_runtime_the_build_made_is_served_and_one_built_elsewhere_is_made_from_the_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = Path(__file__).parents[2]
    profile = load_config(ConfigPaths(root / "models.yaml", root / "thresholds", root / "golden")).matrix.profiles[
        "cpu-built"
    ]
    run, wheels = _built_run(tmp_path)
    made: list[list[str]] = []
    elsewhere = _runtime(tmp_path / "made-from-the-record")

    def built_runtime(_profile: object, wheels: list[Path], *_args: object, **_kwargs: object) -> Runtime:
        made.append([w.name for w in wheels])
        return elsewhere

    monkeypatch.setattr(candidate, "built_runtime", built_runtime)
    tonight = _runtime(tmp_path / "made-by-the-build")
    shop = Workshop(CacheDir(tmp_path / "cache"), Supply())
    handed = candidate.prepare_night_candidate(profile, shop, run=run, wheels_dir=wheels, built=tonight)
    assert handed.candidate.runtime is tonight and made == []
    assert run.lock.read_text() == "vllm-cpu==0.32.0+g0123456.d20261129\n"
    (wheel_name,) = [p.name for p in (wheels / "r1").iterdir()]
    again = candidate.prepare_night_candidate(profile, shop, run=run, wheels_dir=wheels)
    assert again.candidate.runtime is elsewhere
    assert made == [[wheel_name]] and wheel_name.startswith("vllm_cpu-0.32.0+g0123456.d20261129-")
