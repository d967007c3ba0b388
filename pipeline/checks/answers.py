"""Expected answers and finite logprobs: the checks that need no history."""

from __future__ import annotations

import math
import re

from pipeline.checks import Verdict, failed, passed, skipped
from pipeline.config.golden_sets import Expectation
from pipeline.infra.openai_client import Generation

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def _numbers_in(text: str) -> list[float]:
    return [float(match.replace(",", "")) for match in _NUMBER.findall(text)]


def expectation_problems(text: str, expect: Expectation) -> list[str]:
    """Every condition of `expect` that `text` breaks, in words."""
    answer = text.strip()
    problems = []
    if expect.exact is not None and answer != expect.exact:
        problems.append(f"expected exactly {expect.exact!r}")
    problems += [f"does not contain {needle!r}" for needle in expect.contains if needle.lower() not in answer.lower()]
    problems += [f"contains {needle!r}" for needle in expect.not_contains if needle.lower() in answer.lower()]
    if expect.one_of and answer not in expect.one_of:
        problems.append(f"is none of {list(expect.one_of)}")
    if expect.regex is not None and not re.search(expect.regex, answer):
        problems.append(f"does not match /{expect.regex}/")
    if expect.number is not None:
        found = _numbers_in(answer)
        if not any(abs(value - expect.number) <= expect.tolerance for value in found):
            problems.append(f"has no number {expect.number:g} (+-{expect.tolerance:g}); found {found[:5]}")
    return problems


def check_answer(generation: Generation, expect: Expectation | None, prompt: str) -> Verdict:
    """The answer satisfies its golden expectation."""
    if expect is None:
        return skipped("answer", generation.prompt_id, "no expectation for this engine and dtype")
    problems = expectation_problems(generation.text, expect)
    if problems:
        return failed("answer", generation.prompt_id, "; ".join(problems), prompt=prompt, answer=generation.text)
    return passed("answer", generation.prompt_id, "as expected", prompt=prompt, answer=generation.text)


def check_finite_logprobs(generation: Generation) -> Verdict:
    """Every logprob of the chosen tokens and their alternatives is a finite number (NaN, inf, null fail)."""
    if generation.logprob_error:
        return failed(
            "logprobs",
            generation.prompt_id,
            "the server could not return the logprobs: they are not finite (NaN or inf)",
            server_said=generation.logprob_error,
            answer=generation.text[:200],
        )
    bad = []
    for index, (token, value) in enumerate(zip(generation.tokens, generation.logprobs, strict=False)):
        alternatives = list(generation.top[index].values()) if index < len(generation.top) else []
        if not all(v is not None and math.isfinite(v) for v in [value, *alternatives]):
            bad.append((index, token, value))
    if not generation.logprobs:
        return failed("logprobs", generation.prompt_id, "the server returned no logprobs", answer=generation.text)
    if bad:
        first = bad[0]
        return failed(
            "logprobs",
            generation.prompt_id,
            f"{len(bad)} of {len(generation.logprobs)} tokens have a non-finite logprob; "
            f"first at token {first[0]} ({first[1]!r}: {first[2]})",
            non_finite=len(bad),
            tokens=len(generation.logprobs),
            answer=generation.text[:200],
        )
    return passed("logprobs", generation.prompt_id, f"all {len(generation.logprobs)} logprobs finite")


def check_corrupted_counter(before: float | None, after: float | None) -> Verdict:
    """vLLM's own NaN counter (with VLLM_COMPUTE_NANS_IN_LOGITS=1) did not move during the golden run."""
    if before is None or after is None:
        return skipped(
            "nan counter",
            "vllm:corrupted_requests",
            "the server exports no vllm:corrupted_requests (set VLLM_COMPUTE_NANS_IN_LOGITS=1)",
        )
    if after > before:
        return failed(
            "nan counter",
            "vllm:corrupted_requests",
            f"{after - before:g} requests had NaN logits",
            before=before,
            after=after,
        )
    return passed("nan counter", "vllm:corrupted_requests", "no request had NaN logits", before=before, after=after)
