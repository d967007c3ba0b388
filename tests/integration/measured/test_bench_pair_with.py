"""`bench --pair-with` on the real CPU engine: a running server paired with a kept runtime booted beside it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.infra import procs
from pipeline.infra.server import Server
from tests.integration.conftest import CPU_ENTRY, CpuEngine, Place, bench_one_case

pytestmark = [pytest.mark.integration, pytest.mark.quiet_host]


def test_bench_pairs_a_running_server_with_a_kept_runtime(
    place: Place, cpu_server: Server, cpu_engine: CpuEngine, tmp_path: Path
) -> None:
    bench_one_case(place)  # one case: one set of pairs
    assert cpu_engine.candidate.runtime is not None
    kept = cpu_engine.candidate.runtime.root
    running = sorted(procs.owned_processes(None))
    report = tmp_path / "bench.json"
    code = main(["bench", CPU_ENTRY, "--url", cpu_server.base_url, "--pair-with", str(kept), "--json", str(report)])
    verdicts = json.loads(report.read_text())["verdicts"]
    print(f"\nbench --pair-with: exit {code}: {json.dumps(verdicts, indent=1)}", file=sys.stderr)
    assert set(verdicts) == {"pp128", "tg32"}
    for cell, verdict in verdicts.items():
        # the same build on both sides: never blamed, and every cell was judged by its pairs against the runtime
        assert verdict["status"] in {"PASS", "INCONCLUSIVE"}, (cell, verdict["reason"])
        assert (
            f"paired with the last confirmed build (runtime runtime-{cpu_engine.candidate.runtime.key}"
            in (verdict["reason"])
        ), verdict["reason"]
        assert "over 8 pairs" in verdict["reason"] or "over 16 pairs" in verdict["reason"], verdict["reason"]
    assert code in (0, 4)
    assert sorted(procs.owned_processes(None)) == running  # the runtime booted for A was stopped
