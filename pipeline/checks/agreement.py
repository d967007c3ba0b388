"""Agreement between two greedy generations: determinism, batch invariance, and drift from the last good night.

The token rule is the one vLLM's own CI uses against Hugging Face: identical tokens, or at the first
divergent position each side's token is within the other side's top-k alternatives. Drift adds a
logprob tolerance, because the same build on the same host gives bit-identical logprobs, so a
shift in the numbers is a change in the numerics even when the tokens survive it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipeline.checks import Verdict, failed, passed
from pipeline.infra.openai_client import Generation

TOP_K = 5
# nats: mean |difference| of chosen-token logprobs over the shared prefix. The same build on the same host gives
# exactly 0; 2 % noise on every weight moved the CPU model's answers by 0.09-0.15 while keeping their tokens.
DRIFT_LOGPROB_TOLERANCE = 0.1


@dataclass(frozen=True)
class Comparison:
    """How two generations of the same prompt relate."""

    identical: bool
    compared: int
    first_divergence: int | None
    ours: str | None
    theirs: str | None
    within_top_k: bool
    mean_abs_logprob_diff: float | None
    max_abs_logprob_diff: float | None

    def evidence(self) -> dict[str, object]:
        out: dict[str, object] = {"tokens_compared": self.compared}
        if self.first_divergence is not None:
            out |= {
                "first_divergence": self.first_divergence,
                "token": self.ours,
                "reference_token": self.theirs,
                f"within_top_{TOP_K}": self.within_top_k,
            }
        if self.mean_abs_logprob_diff is not None:
            out |= {
                "mean_abs_logprob_diff": round(self.mean_abs_logprob_diff, 4),
                "max_abs_logprob_diff": round(self.max_abs_logprob_diff or 0.0, 4),
            }
        return out


def compare(ours: Generation, theirs: Generation, top_k: int = TOP_K) -> Comparison:
    """Compare token by token; at the first difference, apply the top-k rule in both directions."""
    length = min(len(ours.tokens), len(theirs.tokens))
    divergence = next((i for i in range(length) if ours.tokens[i] != theirs.tokens[i]), None)
    if divergence is None and len(ours.tokens) != len(theirs.tokens):
        divergence = length  # one stopped earlier: the difference is at the shorter one's end
    shared = length if divergence is None else divergence
    diffs = [
        abs(a - b)
        for a, b in zip(ours.logprobs[:shared], theirs.logprobs[:shared], strict=False)
        if a is not None and b is not None and math.isfinite(a) and math.isfinite(b)
    ]
    within = True
    our_token = their_token = None
    if divergence is not None:
        our_token = ours.tokens[divergence] if divergence < len(ours.tokens) else "<end>"
        their_token = theirs.tokens[divergence] if divergence < len(theirs.tokens) else "<end>"
        within = _in_top(our_token, theirs, divergence, top_k) and _in_top(their_token, ours, divergence, top_k)
    return Comparison(
        divergence is None,
        shared,
        divergence,
        our_token,
        their_token,
        within,
        sum(diffs) / len(diffs) if diffs else None,
        max(diffs) if diffs else None,
    )


def _in_top(token: str, other: Generation, index: int, top_k: int) -> bool:
    if index >= len(other.top):
        return False
    ranked = sorted(other.top[index].items(), key=lambda kv: -(kv[1] if kv[1] is not None else -math.inf))
    return token in [t for t, _ in ranked[:top_k]]


def check_determinism(first: Generation, second: Generation) -> Verdict:
    """The same greedy prompt twice gives the same tokens."""
    result = compare(first, second)
    if result.identical:
        return passed("determinism", first.prompt_id, f"{result.compared} tokens identical twice", **result.evidence())
    return failed(
        "determinism",
        first.prompt_id,
        f"the second run diverged at token {result.first_divergence}: {result.ours!r} vs {result.theirs!r}",
        **result.evidence(),
    )


def check_batch_invariance(alone: Generation, batched: Generation) -> Verdict:
    """A prompt sent alone and inside a batch agrees: equal tokens, or the first divergence within top-k."""
    result = compare(batched, alone)
    if result.identical:
        return passed("batch invariance", alone.prompt_id, f"{result.compared} tokens identical", **result.evidence())
    if result.within_top_k:
        return passed(
            "batch invariance",
            alone.prompt_id,
            f"diverged at token {result.first_divergence} within the other's top-{TOP_K}",
            **result.evidence(),
        )
    return failed(
        "batch invariance",
        alone.prompt_id,
        f"batched run chose {result.ours!r} at token {result.first_divergence}, not in the single run's "
        f"top-{TOP_K} (single run: {result.theirs!r})",
        **result.evidence(),
    )


def check_drift(
    current: Generation,
    reference: Generation | None,
    *,
    tolerance: float = DRIFT_LOGPROB_TOLERANCE,
    reference_night: str = "",
) -> Verdict:
    """Tonight against the last good night: the token rule, then the logprob tolerance on the shared prefix."""
    if reference is None:
        return passed("drift", current.prompt_id, "no reference yet: tonight's output becomes the reference")
    result = compare(current, reference)
    evidence = result.evidence() | {"reference_night": reference_night, "tolerance": tolerance}
    if not result.within_top_k:
        return failed(
            "drift",
            current.prompt_id,
            f"token {result.first_divergence} is {result.ours!r}, the last good night had {result.theirs!r}, "
            f"and neither is in the other's top-{TOP_K}",
            **evidence,
        )
    if result.mean_abs_logprob_diff is not None and result.mean_abs_logprob_diff > tolerance:
        return failed(
            "drift",
            current.prompt_id,
            f"logprobs moved by {result.mean_abs_logprob_diff:.3f} nats on average over {result.compared} "
            f"shared tokens (tolerance {tolerance:g})",
            **evidence,
        )
    note = "tokens identical" if result.identical else f"diverged at token {result.first_divergence} within top-{TOP_K}"
    return passed("drift", current.prompt_id, f"{note}; logprobs within {tolerance:g} nats", **evidence)
