"""The canary for real, through run_entry as the nightly calls it: the CPU profile's own torch runs the fixed matrix
products, and a floor this host cannot reach ends the entry INCONCLUSIVE at health, naming the rate, before any
boot (GPU profiles always run it; benchmarks/canary_probe.py runs it on a real GPU)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

import pytest

from pipeline.infra.supply import ONLINE
from pipeline.places import RunDir, StateDir
from pipeline.stages.prove.canary import CANARY_SIZE, canary_argv, run_canary
from pipeline.stages.prove.entry_run import EntryContext, run_entry
from pipeline.status import Status
from tests.integration.conftest import CpuEngine

pytestmark = pytest.mark.integration


def test_the_canary_runs_in_the_candidates_torch(cpu_engine: CpuEngine, tmp_path: Path) -> None:
    argv = canary_argv(cpu_engine.candidate, cpu_engine.cache_dir, "unused")
    assert argv is not None and argv[0] == str(cpu_engine.candidate.runtime.python)  # type: ignore[union-attr]
    result = run_canary(argv, tmp_path / "canary.log")
    assert result.device == "cpu" and result.finite and result.products > 0 and result.tflops > 0
    assert result.seconds >= 1.0 and result.sm_mhz is None  # a CPU has no SM clock to read


def test_a_host_under_the_profiles_canary_floor_is_inconclusive_before_any_boot(
    cpu_engine: CpuEngine, tmp_path: Path
) -> None:
    config = cpu_engine.config
    profile = config.matrix.profiles[cpu_engine.entry.profile]
    # the canary's floor alone: in the suite's parallel phase the other worker's engines load the host, and the
    # profile's load limit would end the entry before the canary ran (test_nightly_faults.py proves that limit)
    health = {key: value for key, value in profile.health.items() if key != "max_load_per_core"}
    floored = replace(profile, health=MappingProxyType(health | {"canary_min_tflops": 1000.0}))
    matrix = replace(config.matrix, profiles=MappingProxyType(dict(config.matrix.profiles) | {profile.name: floored}))
    ctx = EntryContext(
        replace(config, matrix=matrix),
        replace(cpu_engine.candidate, profile=floored),
        cpu_engine.cache_dir,
        StateDir(tmp_path / "state"),
        RunDir(tmp_path / "run-canary"),
        "2026-11-25",
        {},
        supply=ONLINE,
    )
    (tmp_path / "run-canary" / "logs" / cpu_engine.entry.id).mkdir(parents=True)
    outcome = run_entry(cpu_engine.entry, ctx)
    assert outcome.status == Status.INCONCLUSIVE and outcome.stage == "health"
    assert outcome.reason.startswith("host unhealthy: the canary ran ")
    assert "TFLOPS on cpu" in outcome.reason and "below the profile's 1000 TFLOPS" in outcome.reason
    assert outcome.numbers["canary"]["tflops"] > 0 and CANARY_SIZE["cpu"] == 512
    assert not list((tmp_path / "logs").glob("*server*"))  # nothing was booted
