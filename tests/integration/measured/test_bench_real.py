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
from pipeline.stages.prove.perf.measure import (
    CaseResult,
    PromptMaker,
    latency_estimate,
    measure_run,
    run_bench,
)
from tests.integration.conftest import CpuEngine
from tests.shops import online

pytestmark = [pytest.mark.integration, pytest.mark.quiet_host, pytest.mark.calibration]

LLAMA_BENCHY = ("llama-benchy==0.4.0",)
CORPUS_URL = "local://spark-nightly-corpus"
RUNS = 8
ROUNDS = 3
RUNS_PER_ROUND = 4


SPEC = BenchSpec(pp=(128,), tg=(32,), runs=RUNS)


def _ours(server: Server) -> CaseResult:
    return run_bench(server.client, server.model, SPEC)[0]


def _our_runs(server: Server, prompts: PromptMaker, latency_s: float, runs: int) -> dict[str, list[float]]:
    """The product's own measured runs (measure_run, each figure as the night computes it), without the warm-up run
    run_bench adds, so the server's timers around them cover exactly these requests."""
    (case,) = SPEC.cases()
    samples = [
        measure_run(server.client, server.model, case, prompts=prompts, latency_s=latency_s) for _ in range(runs)
    ]
    return {metric: [run.metric(metric) for run in samples] for metric in ("pp_tps", "tg_tps")}


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
        "--no-warmup",  # the server is warm; a warm-up run would be timed by the server but not among the values
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


# The server's own timing of the same requests: decode as inter-token latency (tokens after the first over their time),
# prefill as prompt tokens over prefill time, both summed over every request of a block
_DECODE, _PREFILL, _PROMPT = (
    "vllm:inter_token_latency_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_prompt_tokens",
)
_SERVER_SUMS = tuple(f"{histogram}_{part}" for histogram in (_DECODE, _PREFILL, _PROMPT) for part in ("sum", "count"))


def _server_timers(server: Server) -> dict[str, float]:
    totals = dict.fromkeys(_SERVER_SUMS, 0.0)
    for sample in server.client.metrics():
        if sample.name in totals:
            totals[sample.name] += sample.value
    return totals


def _server_rates(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """What the server measured over one tool's block of runs: decode and prefill tokens/s."""
    grown = {name: after[name] - before[name] for name in _SERVER_SUMS}
    return {
        "tg_tps": grown[f"{_DECODE}_count"] / grown[f"{_DECODE}_sum"],
        "pp_tps": grown[f"{_PROMPT}_sum"] / grown[f"{_PREFILL}_sum"],
    }


def test_our_figures_agree_with_llama_benchy_on_the_same_server(
    cpu_engine: CpuEngine, cpu_server: Server, tmp_path: Path
) -> None:
    _ours(cpu_server)  # a freshly booted server runs its first minute slower: not part of the comparison
    prompts, latency_s = PromptMaker(cpu_server.client, cpu_server.model), latency_estimate(cpu_server.client)
    # This 2-core host's speed moves by +-20 % between blocks of runs and by several % within one, so each tool's runs
    # are read against the server's own timing of the very same requests, aggregated as the server aggregates them
    # (all tokens over all the time: the harmonic mean of the runs' rates); the host's speed cancels, the tools'
    # definitions remain. A median over 4 runs read against the server's mean over the block did not cancel it (the
    # landing run of 2026-12-01 read tg 0.980-1.067 over five rounds, median 1.051, and failed). Neither block holds a
    # request outside its values that decodes: ours has no warm-up run, llama-benchy runs with --no-warmup, and its
    # prompt adaptation asks for one token (no inter-token time); its two short prefills stay in its block, counted by
    # their tokens (counted as prefills they moved pp by 23 %), one reason pp is held less tightly. The tools alternate
    # (A B A B ...) and the median over rounds decides.
    raw: dict[str, list[float]] = {"pp_tps": [], "tg_tps": []}
    normalised: dict[str, list[float]] = {"pp_tps": [], "tg_tps": []}
    for round_ in range(ROUNDS):
        start = _server_timers(cpu_server)
        ours = _our_runs(cpu_server, prompts, latency_s, RUNS_PER_ROUND)
        middle = _server_timers(cpu_server)
        theirs = _llama_benchy(cpu_engine, cpu_server, tmp_path / f"round{round_}", RUNS_PER_ROUND)
        end = _server_timers(cpu_server)
        ours_server, theirs_server = _server_rates(start, middle), _server_rates(middle, end)
        for metric, raw_ratios in raw.items():
            assert len(ours[metric]) == len(theirs[metric]) == RUNS_PER_ROUND, (ours, theirs)
            ours_rate, theirs_rate = statistics.harmonic_mean(ours[metric]), statistics.harmonic_mean(theirs[metric])
            raw_ratios.append(ours_rate / theirs_rate)
            normalised[metric].append((ours_rate / ours_server[metric]) / (theirs_rate / theirs_server[metric]))
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
    # Read so, the rounds of 2026-12-01 agreed to 0.1 % on tg (1.000-1.001) and 0.6 % on pp (0.969-0.975, its two
    # short prefills): a definition off by one token of 32 (3.2 %) fails here, as it did not when rounds spread by 9 %
    assert abs(ratio["tg_tps"] - 1) <= 0.02
    assert abs(ratio["pp_tps"] - 1) <= 0.08
