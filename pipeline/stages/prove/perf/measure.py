"""Perf: measure benchmark cells the way llama-benchy does, keeping every raw sample.

Definitions (llama-benchy 0.4.0): ttfr is the time to the first SSE chunk carrying `choices`;
est_ppt is ttfr minus the latency estimate (mean of 3 `GET /v1/models`); e2e_ttft is the time to
the first chunk with content or reasoning; pp t/s = prompt tokens / est_ppt; tg t/s = tokens
after the first / (last token time - first token time); peak t/s = most tokens in any 1 s window.
Tokens are counted from the stream (token ids when the server sends them, else one per chunk,
reconciled with the stream's usage), never taken from a server's claim alone.
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from pipeline.config.matrix import BenchSpec, Cell
from pipeline.errors import EngineError
from pipeline.infra.openai_client import OpenAIClient, metric_total
from pipeline.progress import Say, quiet
from pipeline.stages.prove.corpus import corpus_text

LATENCY_PROBES = 3
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
SPEC_DRAFTS = "vllm:spec_decode_num_draft_tokens_total"
GENERATED = "vllm:generation_tokens_total"


@dataclass(frozen=True)
class RequestSample:
    """One streamed request: every timing llama-benchy reports, in seconds and tokens."""

    prompt_tokens: int
    completion_tokens: int
    ttfr_s: float
    e2e_ttft_s: float
    est_ppt_s: float
    first_token_at: float
    last_token_at: float
    token_times: tuple[float, ...]
    server_prompt_tokens: int = 0

    @property
    def pp_tps(self) -> float:
        return self.prompt_tokens / self.est_ppt_s if self.est_ppt_s > 0 else float("nan")

    @property
    def tg_tps(self) -> float:
        span = self.last_token_at - self.first_token_at
        return (self.completion_tokens - 1) / span if span > 0 and self.completion_tokens > 1 else float("nan")


@dataclass(frozen=True)
class RunSample:
    """One measured run of a cell: `concurrency` requests started together."""

    requests: tuple[RequestSample, ...]

    @property
    def pp_tps(self) -> float:
        """Total prompt throughput: all prompt tokens over the longest processing time."""
        return sum(r.prompt_tokens for r in self.requests) / max(r.est_ppt_s for r in self.requests)

    @property
    def tg_tps(self) -> float:
        """Total generation throughput: tokens after each first over the span of the whole run's decoding."""
        span = max(r.last_token_at for r in self.requests) - min(r.first_token_at for r in self.requests)
        return sum(r.completion_tokens - 1 for r in self.requests) / span if span > 0 else float("nan")

    @property
    def peak_tps(self) -> float:
        """Most tokens of all requests in any 1 s window."""
        times = sorted(t for r in self.requests for t in r.token_times)
        best, start = 0, 0
        for end, moment in enumerate(times):
            while moment - times[start] > 1.0:
                start += 1
            best = max(best, end - start + 1)
        return float(best)

    def metric(self, name: str) -> float:
        if name in ("pp_tps", "tg_tps", "peak_tps"):
            return float(getattr(self, name))
        values = [getattr(r, f"{name}_s") * 1000 for r in self.requests]  # latencies are reported in ms
        return statistics.fmean(values)


@dataclass(frozen=True)
class CaseResult:
    """Every run of one case (its pp and tg cell), with the server's own counters beside the client's."""

    pp_cell: Cell
    tg_cell: Cell
    runs: tuple[RunSample, ...]
    client_generated_tokens: int
    server_generated_tokens: float | None = None
    spec_acceptance: float | None = None

    def values(self, metric: str) -> list[float]:
        return [run.metric(metric) for run in self.runs]

    def summary(self, metric: str) -> dict[str, float]:
        values = self.values(metric)
        return {
            "mean": statistics.fmean(values),
            "std": statistics.pstdev(values),
            "median": statistics.median(values),
            "min": min(values),
            "max": max(values),
        }


# Where the next prompt starts on each server. A rerun or the pairs make a new PromptMaker for a server that has
# already served this night's prompts; starting again at 0 would repeat them, and with prefix caching on (vLLM's
# default) a repeated prompt can be answered from the cache instead of being prefilled.
_NEXT_OFFSET: dict[tuple[str, str], int] = {}


class PromptMaker:
    """Prompts whose chat request totals an exact token count, cut from the corpus with the server's tokenizer.

    Like llama-benchy's prompt adaptation, the chat template's own tokens are measured once and
    taken off the text, so a pp128 request carries 128 prompt tokens in all.
    """

    def __init__(self, client: OpenAIClient, model: str) -> None:
        self._client, self._model = client, model
        self._tokens = client.tokenize(model, corpus_text())
        self._server = (client.base_url, model)
        self._offset = _NEXT_OFFSET.get(self._server, 0)
        one_token = client.detokenize(model, self._tokens[:1])
        probe = client.chat(model, [{"role": "user", "content": one_token}], max_tokens=1)
        self.template_tokens = max(probe.prompt_tokens - 1, 0)

    def make(self, total: int) -> tuple[str, int]:
        """Text for a request of `total` prompt tokens and its own token count, from a new offset each time."""
        count = max(total - self.template_tokens, 1)
        if count > len(self._tokens):
            raise EngineError(f"the corpus has {len(self._tokens)} tokens; a {count}-token prompt needs more")
        if self._offset + count > len(self._tokens):
            self._offset = 0
        piece = self._tokens[self._offset : self._offset + count]
        self._offset += max(count // 3, 1)
        _NEXT_OFFSET[self._server] = self._offset
        return self._client.detokenize(self._model, piece), count


def latency_estimate(client: OpenAIClient) -> float:
    """llama-benchy's `api` latency mode: the mean time of a few GET /v1/models."""
    times = []
    for _ in range(LATENCY_PROBES):
        started = time.perf_counter()
        client.models()
        times.append(time.perf_counter() - started)
    return statistics.fmean(times)


def counted_prompt_tokens(text_tokens: int, server_tokens: int) -> int:
    """llama-benchy's prompt accounting: the server's count when within 20 % of the text's, else the text's.

    For short prompts the chat template's tokens push the server's count past 20 % (pp128: 128 against
    98 of text), so the community's pp t/s counts the text alone there; we count the same way to stay
    comparable, and keep the server's own count beside it.
    """
    return server_tokens if server_tokens > 0 and abs(server_tokens - text_tokens) < 0.2 * text_tokens else text_tokens


def stream_request(
    client: OpenAIClient, model: str, prompt: tuple[str, int], max_tokens: int, latency_s: float
) -> RequestSample:
    """One streamed chat request that generates exactly `max_tokens` tokens.

    No sampling parameters are sent, as llama-benchy sends none: the server's defaults apply, and
    sampling costs time (on the CPU profile greedy decoding was 16 % faster), so forcing greedy
    here would make our figures incomparable with the community's.
    """
    payload = {
        "model": model,
        "messages": [{"role": "user", "content": prompt[0]}],
        "max_tokens": max_tokens,
        "min_tokens": max_tokens,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
        "return_token_ids": True,
    }
    started = time.perf_counter()
    ttfr = ttft = None
    token_times: list[float] = []
    usage: dict[str, int] = {}
    for chunk in client.stream("/v1/chat/completions", payload):
        if chunk.data.get("usage"):
            usage = chunk.data["usage"]
        choices = chunk.data.get("choices") or []
        if not choices:
            continue
        ttfr = ttfr if ttfr is not None else chunk.at - started
        ids = choices[0].get("token_ids")
        count = len(ids) if ids is not None else (1 if chunk.text else 0)
        if count:
            ttft = ttft if ttft is not None else chunk.at - started
            token_times += [chunk.at] * count
    if ttfr is None or ttft is None or not token_times:
        raise EngineError("the stream carried no tokens")
    completion_tokens = int(usage.get("completion_tokens", len(token_times)))
    server_prompt = int(usage.get("prompt_tokens", 0))
    return RequestSample(
        counted_prompt_tokens(prompt[1], server_prompt),
        completion_tokens,
        ttfr,
        ttft,
        max(ttfr - latency_s, 1e-6),
        token_times[0],
        token_times[-1],
        tuple(token_times),
        server_prompt,
    )


def measure_run(
    client: OpenAIClient, model: str, case: tuple[Cell, Cell], *, prompts: PromptMaker, latency_s: float
) -> RunSample:
    """One run of a case: `concurrency` streamed requests started together."""
    pp_cell, tg_cell = case
    size = pp_cell.pp + pp_cell.depth  # the context at depth is processed as part of the prompt (no prefix caching)
    texts = [prompts.make(size) for _ in range(pp_cell.concurrency)]
    with ThreadPoolExecutor(max_workers=pp_cell.concurrency) as pool:
        done = list(pool.map(lambda text: stream_request(client, model, text, tg_cell.tg, latency_s), texts))
    return RunSample(tuple(done))


def measure_case(
    client: OpenAIClient, model: str, case: tuple[Cell, Cell], *, runs: int, prompts: PromptMaker, latency_s: float
) -> CaseResult:
    """A warm-up run, then `runs` measured runs; /metrics counters are read around the measured runs."""
    measure_run(client, model, case, prompts=prompts, latency_s=latency_s)  # warm-up, as llama-benchy does
    before = client.metrics()
    measured = tuple(measure_run(client, model, case, prompts=prompts, latency_s=latency_s) for _ in range(runs))
    after = client.metrics()

    def delta(name: str) -> float | None:
        first, last = metric_total(before, name), metric_total(after, name)
        return None if first is None or last is None else last - first

    accepted, drafted = delta(SPEC_ACCEPTED), delta(SPEC_DRAFTS)
    return CaseResult(
        case[0],
        case[1],
        measured,
        client_generated_tokens=sum(r.completion_tokens for run in measured for r in run.requests),
        server_generated_tokens=delta(GENERATED),
        spec_acceptance=accepted / drafted if accepted is not None and drafted else None,
    )


def case_spec(spec: BenchSpec, result: CaseResult) -> BenchSpec:
    """The spec that measures only the case of `result` again (a cell that tripped is rerun alone)."""
    return replace(
        spec,
        pp=(result.pp_cell.pp,),
        tg=(result.tg_cell.tg,),
        depth=(result.pp_cell.depth,),
        concurrency=(result.pp_cell.concurrency,),
    )


def run_bench(client: OpenAIClient, model: str, spec: BenchSpec, *, say: Say = quiet) -> list[CaseResult]:
    """Every case of the spec, measured in llama-benchy's order."""
    prompts = PromptMaker(client, model)
    latency = latency_estimate(client)
    results = []
    for case in spec.cases():
        say(f"bench: {case[0].name} / {case[1].name} ({spec.runs} runs + warm-up)")
        results.append(measure_case(client, model, case, runs=spec.runs, prompts=prompts, latency_s=latency))
    return results
