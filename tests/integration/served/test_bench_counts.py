"""The benchmark client and the bench command on the real CPU engine: tokens counted from the stream as the
server counts them, and a verdict per cell with every raw sample kept (what is counted, not how fast)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.config.matrix import BenchSpec
from pipeline.infra.server import Server
from pipeline.stages.prove.perf.measure import run_bench
from pipeline.status import Status, worst
from tests.integration.conftest import CPU_ENTRY

pytestmark = pytest.mark.integration

RUNS = 8


def test_tokens_are_counted_from_the_stream_and_match_the_server(cpu_server: Server) -> None:
    result = run_bench(cpu_server.client, cpu_server.model, BenchSpec(pp=(128,), tg=(32,), runs=RUNS))[0]
    assert result.client_generated_tokens == RUNS * 32  # ignore_eos + min_tokens: exactly tg tokens each run
    assert result.server_generated_tokens == result.client_generated_tokens
    requests = [r for run in result.runs for r in run.requests]
    assert requests  # not empty: an assert over nothing passes
    assert all(r.server_prompt_tokens == 128 for r in requests)  # the template's tokens included
    assert all(r.prompt_tokens == 128 - 30 for r in requests)  # counted as llama-benchy counts them (see perf.py)


def test_the_bench_command_prints_a_verdict_per_cell_and_writes_every_sample(
    cpu_server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "bench.json"
    code = main(["bench", CPU_ENTRY, "--url", cpu_server.base_url, "--runs", "2", "--json", str(report)])
    out = capsys.readouterr().out
    assert "pp128 (c1) |" in out and "tg32 (c4) |" in out
    data = json.loads(report.read_text())
    assert set(data["verdicts"]) == {"pp128 (c1)", "tg32 (c1)", "pp128 (c4)", "tg32 (c4)"}
    assert data["cases"]  # not empty: an assert over nothing passes
    assert all(len(case["runs"]) == 2 for case in data["cases"])
    statuses = [Status(v["status"]) for v in data["verdicts"].values()]
    assert code == worst(statuses).exit_code
