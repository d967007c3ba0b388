"""The benchmark client's figures on the real CPU engine, cross-checked with llama-benchy 0.4.0 on the same server."""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import sys
from pathlib import Path

import pytest

from pipeline.config.matrix import BenchSpec
from pipeline.infra import procs
from pipeline.infra.runtime import ensure_pip_runtime
from pipeline.infra.server import Server
from pipeline.infra.weights import package_folder
from pipeline.stages.prove.corpus import corpus_text
from pipeline.stages.prove.perf.measure import CaseResult, run_bench
from tests.integration.conftest import CpuEngine
from tests.shops import online

pytestmark = [pytest.mark.integration, pytest.mark.quiet_host, pytest.mark.calibration]

LLAMA_BENCHY = ("llama-benchy==0.4.0",)
CORPUS_URL = "local://spark-nightly-corpus"
RUNS = 8
ROUNDS = 5
RUNS_PER_ROUND = 4


def _ours(server: Server, runs: int = RUNS) -> CaseResult:
    return run_bench(server.client, server.model, BenchSpec(pp=(128,), tg=(32,), runs=runs))[0]


def _llama_benchy(engine: CpuEngine, server: Server, tmp_path: Path, runs: int) -> dict[str, list[float]]:
    """llama-benchy offline: our corpus seeded where it caches its book, its tokenizer pointed at the model."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    runtime = ensure_pip_runtime("llama-benchy", LLAMA_BENCHY, (), online(engine.cache_dir), tmp_path)
    home = tmp_path / "home"
    key = hashlib.md5(CORPUS_URL.encode()).hexdigest()  # llama-benchy's cache key for a book URL
    book = home / ".cache" / "llama-benchy" / f"{key}.txt"
    book.parent.mkdir(parents=True)
    book.write_text(corpus_text())
    result = tmp_path / "llama-benchy.json"
    argv = [
        str(runtime.bin("llama-benchy")),
        "--base-url",
        f"{server.base_url}/v1",
        "--model",
        server.model,
        "--tokenizer",
        str(package_folder(engine.entry, engine.cache_dir)),
        "--book-url",
        CORPUS_URL,
        "--skip-coherence",
        "--exit-on-first-fail",
        "--pp",
        "128",
        "--tg",
        "32",
        "--runs",
        str(runs),
        "--format",
        "json",
        "--save-result",
        str(result),
    ]
    procs.run(
        argv,
        tmp_path / "llama-benchy.log",
        timeout_s=600,
        env=dict(os.environ) | {"HOME": str(home), "HF_HUB_OFFLINE": "1"},
    )
    bench = next(b for b in json.loads(result.read_text())["benchmarks"] if not b["is_context_prefill_phase"])
    return {"pp_tps": bench["pp_throughput"]["values"], "tg_tps": bench["tg_throughput"]["values"]}


# The server's own timing of the same requests: decode as inter-token latency, prefill as prefill time per request.
_SERVER_TIMERS = ("vllm:inter_token_latency_seconds", "vllm:request_prefill_time_seconds")


def _server_timers(server: Server) -> dict[str, float]:
    totals: dict[str, float] = {}
    for sample in server.client.metrics():
        for timer in _SERVER_TIMERS:
            if sample.name in (f"{timer}_sum", f"{timer}_count"):
                totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


def _server_rates(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """What the server measured over one tool's block of runs: decode tokens/s and prefills/s."""
    rate = {
        timer: (after[f"{timer}_count"] - before[f"{timer}_count"]) / (after[f"{timer}_sum"] - before[f"{timer}_sum"])
        for timer in _SERVER_TIMERS
    }
    return {"tg_tps": rate[_SERVER_TIMERS[0]], "pp_tps": rate[_SERVER_TIMERS[1]]}


def test_our_figures_agree_with_llama_benchy_on_the_same_server(
    cpu_engine: CpuEngine, cpu_server: Server, tmp_path: Path
) -> None:
    _ours(cpu_server, RUNS)  # a freshly booted server runs its first minute slower: not part of the comparison
    # This 2-core host's speed moves by +-20 % between blocks of runs, so each tool's figures are read against the
    # server's own timing of the very same requests; the host's speed cancels, the tools' definitions remain. The
    # tools alternate (A B A B ...), and the median over rounds keeps one or two disturbed rounds from deciding
    # (seven rounds measured: normalised tg 0.974-1.072, median 0.988; pp 1.022-1.117, median 1.081).
    raw: dict[str, list[float]] = {"pp_tps": [], "tg_tps": []}
    normalised: dict[str, list[float]] = {"pp_tps": [], "tg_tps": []}
    for round_ in range(ROUNDS):
        start = _server_timers(cpu_server)
        ours = _ours(cpu_server, RUNS_PER_ROUND)
        middle = _server_timers(cpu_server)
        theirs = _llama_benchy(cpu_engine, cpu_server, tmp_path / f"round{round_}", RUNS_PER_ROUND)
        end = _server_timers(cpu_server)
        ours_server, theirs_server = _server_rates(start, middle), _server_rates(middle, end)
        for metric, raw_ratios in raw.items():
            ours_median, theirs_median = statistics.median(ours.values(metric)), statistics.median(theirs[metric])
            raw_ratios.append(ours_median / theirs_median)
            normalised[metric].append((ours_median / ours_server[metric]) / (theirs_median / theirs_server[metric]))
    ratio = {metric: statistics.median(values) for metric, values in normalised.items()}

    def shown(values: list[float]) -> str:
        return ", ".join(f"{v:.3f}" for v in values)

    print(
        f"\ncross-check pp128/tg32, {ROUNDS} alternating rounds of {RUNS_PER_ROUND} runs each side, ours/llama-benchy: "
        f"raw pp {shown(raw['pp_tps'])}, tg {shown(raw['tg_tps'])}; each against the server's timing of its own "
        f"requests: pp {shown(normalised['pp_tps'])} (median {ratio['pp_tps']:.3f}), tg {shown(normalised['tg_tps'])} "
        f"(median {ratio['tg_tps']:.3f})",
        file=sys.stderr,
    )
    assert abs(ratio["tg_tps"] - 1) <= 0.05
    assert abs(ratio["pp_tps"] - 1) <= 0.15
