"""Performance judgement on the real CPU engine: no alarm on identical reruns, a planted slowdown caught and
confirmed by interleaved pairs, a CPU hog during measurement makes the cells INCONCLUSIVE and keeps them out of history.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.config.matrix import BenchSpec
from pipeline.detect.steps import CONFIRM_PAIRS, MIN_BASELINE_NIGHTS, confirm
from pipeline.infra import procs
from pipeline.infra.history import History
from pipeline.infra.runtime import Runtime
from pipeline.infra.server import Server
from pipeline.stages.prove.boot import Candidate, boot
from pipeline.stages.prove.health import judge_health, read_host_facts
from pipeline.stages.prove.perf import CaseResult, run_bench
from pipeline.stages.prove.perf_judge import CellOutcome, PairedMeasure, PerfContext, interleaved_pairs, judge_results
from pipeline.status import Status
from tests.integration.conftest import CpuEngine

pytestmark = [pytest.mark.integration, pytest.mark.quiet_host]

SPEC = BenchSpec(pp=(128,), tg=(32,), runs=3)
STEP_ANCHOR = "        scheduler_output = self.scheduler.schedule(self._should_throttle_prefills())\n"
# About a quarter of one decode step here (55-75 ms, the host's speed drifts). A CI host's pairs spread +-10 %, so a
# tenth of a step can honestly come out INCONCLUSIVE at the 0.1 % fail level; the power for small steps is measured in
# benchmarks/detector_simulation.py, this test proves the chain end to end.
PLANTED_DELAY_S = 0.02


def _context(tmp_path: Path, night: str) -> PerfContext:
    return PerfContext(
        History(tmp_path / "history.sqlite"), "cpu-x86", "test-host", "smollm2", f"run-{night}", night, {"vllm": "test"}
    )


def _night(
    server: Server, engine: CpuEngine, ctx: PerfContext, paired: PairedMeasure | None = None
) -> list[CellOutcome]:
    profile = engine.config.matrix.profiles[engine.entry.profile]
    before = judge_health(profile, read_host_facts(sample_s=0.5, canary=False))
    results = run_bench(server.client, server.model, SPEC)
    after = judge_health(profile, read_host_facts(sample_s=0.5, canary=False), under_load=True)
    references = engine.config.thresholds_for(engine.entry.id)
    thresholds = replace(
        references, cells={"pp128": references.cells["pp128 (c1)"], "tg32": references.cells["tg32 (c1)"]}
    )

    def remeasure(result: CaseResult) -> CaseResult:
        return run_bench(server.client, server.model, SPEC)[0]

    def no_last_good(result: CaseResult, metric: str, wanted: int) -> None:
        return None

    return judge_results(
        results,
        thresholds,
        ctx,
        health_before=before,
        health_after=after,
        remeasure=remeasure,
        paired=paired or no_last_good,
    )


@pytest.fixture(scope="module")
def slowed_candidate(cpu_engine: CpuEngine, tmp_path_factory: pytest.TempPathFactory) -> Candidate:
    """The candidate environment with a real code change in the installed engine: a short sleep in every step."""
    assert cpu_engine.candidate.runtime is not None
    source = cpu_engine.candidate.runtime.root
    target = tmp_path_factory.mktemp("slowed") / "runtime"
    subprocess.run(["cp", "-al", str(source), str(target)], check=True)  # hard links: instant, shares the files
    core = next(target.glob("lib/python3*/site-packages/vllm/v1/engine/core.py"))
    text = core.read_text()
    assert STEP_ANCHOR in text
    patched = text.replace(STEP_ANCHOR, STEP_ANCHOR + f"        time.sleep({PLANTED_DELAY_S})  # planted slowdown\n", 1)
    fresh = core.with_suffix(".new")
    fresh.write_text(patched)
    os.replace(fresh, core)  # a new inode: the shared original stays untouched
    for cached in core.parent.glob("__pycache__/core.*.pyc"):
        cached.unlink()
    runtime = Runtime(target, "slowed", cpu_engine.candidate.runtime.requirements, cpu_engine.candidate.runtime.lock)
    return replace(cpu_engine.candidate, runtime=runtime)


def test_identical_reruns_raise_no_alarm(cpu_server: Server, cpu_engine: CpuEngine, tmp_path: Path) -> None:
    for index in range(10):
        outcomes = _night(cpu_server, cpu_engine, _context(tmp_path, f"2026-11-{index + 1:02d}"))
        print(f"night {index + 1}: " + "; ".join(f"{o.cell} {o.status}" for o in outcomes), file=sys.stderr)
        assert not [o for o in outcomes if o.status == Status.FAIL], [o.reason for o in outcomes]
        assert not [o for o in outcomes if "unhealthy" in o.reason], [o.reason for o in outcomes]


def test_a_planted_slowdown_is_caught_and_confirmed_by_interleaved_pairs(
    cpu_server: Server, cpu_engine: CpuEngine, slowed_candidate: Candidate, tmp_path: Path
) -> None:
    def serve(candidate: Candidate, name: str) -> contextlib.AbstractContextManager[Server]:
        return boot(cpu_engine.entry, candidate, cache_dir=cpu_engine.cache_dir, log_dir=tmp_path / name)

    for index in range(MIN_BASELINE_NIGHTS + 1):  # the good build's nights: the history the candidate meets
        _night(cpu_server, cpu_engine, _context(tmp_path, f"2026-11-{index + 1:02d}"))
    with contextlib.ExitStack() as later, serve(slowed_candidate, "candidate") as slowed:
        booted: list[Server] = []

        def paired(result: CaseResult, metric: str, wanted: int) -> list[tuple[float, float]]:
            if not booted:  # the last good build is served only when a confirmation needs it, as in a night
                booted.append(later.enter_context(serve(cpu_engine.candidate, "last-good")))
                measure_pairs.append(interleaved_pairs(booted[0].client, slowed.client, slowed.model))
            pairs = measure_pairs[0](result, metric, wanted)
            assert pairs is not None
            return pairs

        measure_pairs: list[PairedMeasure] = []
        outcomes = {o.cell: o for o in _night(slowed, cpu_engine, _context(tmp_path, "2026-11-20"), paired=paired)}
    decode = outcomes["tg32"]
    print(f"\nplanted slowdown: {decode.status}: {decode.reason}", file=sys.stderr)
    assert decode.status == Status.FAIL, decode.reason
    assert decode.confirmation is not None and decode.confirmation.mean_ratio < 0.95


def test_the_same_build_paired_with_itself_passes(cpu_server: Server) -> None:
    pairs = interleaved_pairs(cpu_server.client, cpu_server.client, cpu_server.model)
    result = run_bench(cpu_server.client, cpu_server.model, SPEC)[0]
    decision = confirm(pairs(result, "tg_tps", CONFIRM_PAIRS))
    print(f"\nA/A pairs: {decision.decision}: {decision.reason}", file=sys.stderr)
    assert decision.decision != "FAIL", decision.reason


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
        outcomes = _night(cpu_server, cpu_engine, ctx)
    finally:
        hog.kill()
        hog.wait()
    assert outcomes and all(o.status == Status.INCONCLUSIVE for o in outcomes), [o.reason for o in outcomes]
    assert f"({hog.pid})" in outcomes[0].reason or str(hog.pid) in outcomes[0].reason
    assert ctx.history.nights(hardware="cpu-x86", entry="smollm2", cell="tg32", metric="tg_tps") == []
