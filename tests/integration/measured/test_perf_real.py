"""Performance judgement on the real CPU engine: no alarm on identical reruns, a CPU hog during measurement makes the
cells INCONCLUSIVE and keeps them out of history. (A planted slowdown is caught through the whole nightly in
tests/integration/test_nightly_real.py; a build paired with a second copy of itself in test_side_by_side_pairs.py.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.config.matrix import BenchSpec
from pipeline.detect.steps import MIN_BASELINE_NIGHTS
from pipeline.infra import procs
from pipeline.infra.cpu_class import cpu_class
from pipeline.infra.history import History
from pipeline.infra.server import Server
from pipeline.progress import quiet
from pipeline.stages.prove.health import judge_health, read_host_facts
from pipeline.stages.prove.perf.judge import PerfContext
from pipeline.stages.prove.perf.paired import CellOutcome
from pipeline.stages.prove.perf.run import measure_and_judge
from pipeline.status import Status
from tests.integration.conftest import CpuEngine

pytestmark = [pytest.mark.integration, pytest.mark.quiet_host]

SPEC = BenchSpec(pp=(128,), tg=(32,), runs=3)


def _context(tmp_path: Path, night: str) -> PerfContext:
    return PerfContext(
        History(tmp_path / "history.sqlite"), "cpu-x86", "test-host", "smollm2", f"run-{night}", night, {"vllm": "test"}
    )


def _night(server: Server, engine: CpuEngine, ctx: PerfContext, log_dir: Path) -> list[CellOutcome]:
    """One night's perf stage as the nightly runs it, on the c1 case only (no confirmed build: no pairs)."""
    profile = engine.config.matrix.profiles[engine.entry.profile]
    references = engine.config.thresholds_for(engine.entry.id, cpu_class())  # this host's references, as the nightly
    thresholds = replace(
        references, cells={"pp128": references.cells["pp128 (c1)"], "tg32": references.cells["tg32 (c1)"]}
    )
    judged = measure_and_judge(
        server.client,
        engine.entry,
        ctx,
        profile=profile,
        spec=SPEC,
        thresholds=thresholds,
        before=judge_health(profile, read_host_facts(sample_s=0.5, canary=False)),
        cache_dir=engine.cache_dir,
        log_dir=log_dir,
        say=quiet,
    )
    return list(judged.outcomes)


@pytest.mark.calibration  # the screen's false alarms on real reruns (./scripts/test-calibration runs it alone)
def test_identical_reruns_raise_no_alarm(cpu_server: Server, cpu_engine: CpuEngine, tmp_path: Path) -> None:
    for index in range(MIN_BASELINE_NIGHTS + 2):  # the screen judges the last two
        outcomes = _night(cpu_server, cpu_engine, _context(tmp_path, f"2026-11-{index + 1:02d}"), tmp_path)
        judged = "; ".join(f"{o.cell} {o.status} ({o.reason})" for o in outcomes)
        print(f"night {index + 1}: {judged}", file=sys.stderr)
        assert not [o for o in outcomes if o.status == Status.FAIL], [o.reason for o in outcomes]
        assert not [o for o in outcomes if "unhealthy" in o.reason], [o.reason for o in outcomes]


def test_a_cpu_hog_during_measurement_makes_the_cells_inconclusive(
    cpu_server: Server, cpu_engine: CpuEngine, tmp_path: Path
) -> None:
    # started without our owner marker, as any competing process on a host would be
    env = {k: v for k, v in os.environ.items() if k != procs.OWNER_ENV}
    hog = subprocess.Popen(
        [sys.executable, "-c", "import time\nend = time.time() + 120\nwhile time.time() < end: pass"], env=env
    )
    try:
        ctx = _context(tmp_path, "2026-11-21")
        outcomes = _night(cpu_server, cpu_engine, ctx, tmp_path)
    finally:
        hog.kill()
        hog.wait()
    assert outcomes and all(o.status == Status.INCONCLUSIVE for o in outcomes), [o.reason for o in outcomes]
    assert f"({hog.pid})" in outcomes[0].reason or str(hog.pid) in outcomes[0].reason
    assert ctx.history.nights(hardware="cpu-x86", entry="smollm2", cell="tg32", metric="tg_tps") == []
