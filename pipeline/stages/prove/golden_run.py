"""Golden: ask a server the golden prompts and canaries, greedily, and judge the outputs with every check."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from pipeline.checks import Verdict, skipped
from pipeline.checks.agreement import DRIFT_LOGPROB_TOLERANCE, check_batch_invariance, check_determinism, check_drift
from pipeline.checks.answers import check_answer, check_corrupted_counter, check_finite_logprobs
from pipeline.checks.garbage import check_garbage, check_long_decode, text_stats
from pipeline.checks.identity import check_identity, model_config
from pipeline.checks.tools import TOOL_PROMPT, WEATHER_TOOL, check_reasoning, check_tool_call
from pipeline.config import canaries
from pipeline.config.golden_sets import GoldenPrompt, GoldenSet
from pipeline.config.matrix import ModelEntry
from pipeline.errors import NonFiniteLogprobsError
from pipeline.infra.openai_client import Completion, Generation, OpenAIClient, metric_total
from pipeline.infra.references import References
from pipeline.progress import Say, quiet

TOP_LOGPROBS = 5
CORRUPTED_METRIC = "vllm:corrupted_requests_total"


@dataclass(frozen=True)
class GoldenResult:
    """Every verdict, the outputs (to record as tomorrow's reference), and what it cost."""

    verdicts: tuple[Verdict, ...]
    generations: tuple[Generation, ...]
    tokens_generated: int
    duration_s: float

    @property
    def passed(self) -> bool:
        return all(v.passed for v in self.verdicts)

    @property
    def failures(self) -> list[Verdict]:
        return [v for v in self.verdicts if not v.passed]


def all_prompts(golden: GoldenSet) -> tuple[GoldenPrompt, ...]:
    """The set's own prompts, then its generated canaries."""
    return golden.prompts + canaries.generate(dict(golden.canaries), golden.canary_seed, golden.canary_max_tokens)


def ask(client: OpenAIClient, model: str, prompt: GoldenPrompt, **extra: Any) -> Generation:
    """One greedy request with top logprobs, chat or completion as the prompt says.

    When the server cannot serialise its logprobs (NaN or infinity), the answer is asked again
    without them and the generation carries the server's refusal as evidence for the logprobs check.
    """
    try:
        return Generation.from_completion(prompt.id, _request(client, model, prompt, with_logprobs=True, **extra))
    except NonFiniteLogprobsError as exc:
        completion = _request(client, model, prompt, with_logprobs=False, **extra)
        return replace(Generation.from_completion(prompt.id, completion), logprob_error=str(exc))


def _request(
    client: OpenAIClient, model: str, prompt: GoldenPrompt, *, with_logprobs: bool, **extra: Any
) -> Completion:
    top = TOP_LOGPROBS if with_logprobs else None
    if prompt.api == "completion":
        return client.complete(model, prompt.prompt, max_tokens=prompt.max_tokens, logprobs=top, **extra)
    messages = ([{"role": "system", "content": prompt.system}] if prompt.system else []) + [
        {"role": "user", "content": prompt.prompt}
    ]
    return client.chat(model, messages, max_tokens=prompt.max_tokens, top_logprobs=top, **extra)


def run_golden(
    client: OpenAIClient,
    entry: ModelEntry,
    golden: GoldenSet,
    *,
    model_ref: str,
    references: References | None,
    say: Say = quiet,
) -> GoldenResult:
    """All checks of the golden stage against one running server."""
    started = time.monotonic()
    model = entry.served_model_name
    prompts = all_prompts(golden)
    verdicts: list[Verdict] = [
        check_identity(
            client.models(),
            name=model,
            max_model_len=entry.serve.get("max_model_len"),
            model_ref=model_ref,
            config=model_config(model_ref),
            expected=entry.identity,
        )
    ]
    corrupted_before = metric_total(client.metrics(), CORRUPTED_METRIC)
    say(f"golden: {len(prompts)} prompts, one at a time")
    alone = [ask(client, model, prompt) for prompt in prompts]
    for prompt, generation in zip(prompts, alone, strict=True):
        verdicts += _judge(prompt, generation, entry, references, golden.drift_tolerance or DRIFT_LOGPROB_TOLERANCE)
    say("golden: determinism and batch invariance")
    verdicts.append(check_determinism(alone[0], ask(client, model, prompts[0])))
    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        batched = list(pool.map(lambda p: ask(client, model, p), prompts))
    verdicts += [check_batch_invariance(a, b) for a, b in zip(alone, batched, strict=True)]
    extra_tokens = sum(len(g.tokens) for g in batched) + len(alone[0].tokens)
    if golden.long_decode is not None:
        long = golden.long_decode
        say(f"golden: long decode of {long.max_tokens} tokens")
        long_prompt = GoldenPrompt("long-decode", long.prompt, long.max_tokens)
        generation = ask(client, model, long_prompt, ignore_eos=True)  # run to the length asked, past any stop token
        verdicts += [check_long_decode(generation, long.window), check_finite_logprobs(generation)]
        extra_tokens += len(generation.tokens)
    verdicts += _parser_checks(client, entry)
    verdicts.append(check_corrupted_counter(corrupted_before, metric_total(client.metrics(), CORRUPTED_METRIC)))
    tokens = sum(len(g.tokens) for g in alone) + extra_tokens
    return GoldenResult(tuple(verdicts), tuple(alone), tokens, time.monotonic() - started)


def _judge(
    prompt: GoldenPrompt,
    generation: Generation,
    entry: ModelEntry,
    references: References | None,
    drift_tolerance: float,
) -> list[Verdict]:
    reference = references.outputs.get(prompt.id) if references else None
    reference_logprob = text_stats(reference.text, reference.logprobs).mean_logprob if reference else None
    return [
        check_answer(generation, prompt.expectation_for(entry.engine, entry.dtype), prompt.prompt),
        check_finite_logprobs(generation),
        check_garbage(generation, reference_logprob=reference_logprob),
        check_drift(
            generation, reference, tolerance=drift_tolerance, reference_night=references.night if references else ""
        ),
    ]


def _parser_checks(client: OpenAIClient, entry: ModelEntry) -> list[Verdict]:
    """Tool calling and reasoning, only where the entry configures those parsers."""
    model = entry.served_model_name
    results: list[Verdict] = []
    checks: Sequence[tuple[str, str, Callable[[Mapping[str, Any]], Verdict], dict[str, Any]]] = (
        ("tool_call_parser", "tool call", check_tool_call, {"tools": [WEATHER_TOOL], "tool_choice": "auto"}),
        ("reasoning_parser", "reasoning", check_reasoning, {}),
    )
    for option, name, check, extra in checks:
        if option not in entry.serve:
            results.append(skipped(name, model, f"no {option} configured"))
            continue
        completion = client.chat(
            model,
            [{"role": "user", "content": TOOL_PROMPT if extra else "Why is the sky blue?"}],
            max_tokens=1024,
            **extra,
        )
        results.append(check(completion.raw))
    return results
