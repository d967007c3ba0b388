"""Agreement between two greedy generations: determinism, batch invariance, and drift from the last good night.

The token rule is the one vLLM's own CI uses against Hugging Face: identical tokens, or at the first
divergent position each side's token is within the other side's top-k alternatives. Drift adds a
logprob tolerance, because the same build on the same host gives bit-identical logprobs, so a
shift in the numbers is a change in the numerics even when the tokens survive it. The reference night's whole
answer is scored again under tonight's build; a night with no reference is compared with an independent judge.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.checks import Verdict, failed, passed
from pipeline.infra.openai_client import Generation, Scored

TOP_K = 5
# nats: mean |difference| of chosen-token logprobs over the shared prefix. The same build on the same host gives
# exactly 0; 2 % noise on every weight moved the CPU model's answers by 0.09-0.15 while keeping their tokens.
DRIFT_LOGPROB_TOLERANCE = 0.1
ANSWER_SHOWN = 160  # characters of a judged answer its evidence keeps: what it said, for whoever reads the alert


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


@dataclass(frozen=True)
class Shift:
    """How far one set of logprobs of a token sequence moved from another, token for token."""

    tokens: int
    mean_abs: float | None
    max_abs: float | None
    non_finite: int  # positions where one side has no finite value (NaN under one build)
    max_at: int | None = None  # the position of max_abs

    def evidence(self, prefix: str) -> dict[str, object]:
        out: dict[str, object] = {f"{prefix}_tokens": self.tokens, f"{prefix}_non_finite": self.non_finite}
        if self.mean_abs is not None:
            out |= {
                f"{prefix}_mean_abs_diff": round(self.mean_abs, 4),
                f"{prefix}_max_abs_diff": round(self.max_abs or 0, 4),
            }
        return out


def shift(ours: Sequence[float | None], theirs: Sequence[float | None]) -> Shift:
    """Token-for-token |difference| of two logprob sequences of the same tokens."""
    pairs = list(zip(ours, theirs, strict=False))
    finite = {
        i: abs(a - b) for i, (a, b) in enumerate(pairs) if a is not None and b is not None and math.isfinite(a - b)
    }
    largest = max(finite, key=finite.__getitem__, default=None)
    return Shift(
        len(pairs),
        sum(finite.values()) / len(finite) if finite else None,
        finite[largest] if largest is not None else None,
        len(pairs) - len(finite),
        largest,
    )


def check_drift(
    current: Generation,
    reference: Generation,
    rescored: Scored | None,
    *,
    tolerance: float = DRIFT_LOGPROB_TOLERANCE,
    reference_night: str = "",
) -> Verdict:
    """Tonight against the last good night, at the level of whole answers.

    The reference night's answer is scored again under tonight's build (teacher-forced, token for token), so a
    different answer is caught even where its first token was a near tie: the token rule alone stops there.
    """
    result = compare(current, reference)
    evidence = result.evidence() | {"reference_night": reference_night, "tolerance": tolerance}
    if (
        current.prompt_token_ids
        and reference.prompt_token_ids
        and current.prompt_token_ids != reference.prompt_token_ids
    ):
        evidence["prompt_rendering"] = "tonight renders the prompt to other token ids than the reference night"
    problems = []
    if not result.within_top_k:
        problems.append(
            f"token {result.first_divergence} is {result.ours!r}, the last good night had {result.theirs!r}, "
            f"and neither is in the other's top-{TOP_K}"
        )
    if rescored is None:
        # no ids to score (a server without return_token_ids): the shared prefix is all there is to compare
        moved, scope = result.mean_abs_logprob_diff, f"{result.compared} shared tokens"
    else:
        sequence = shift(rescored.logprobs, reference.logprobs[: len(rescored.logprobs)])
        evidence |= sequence.evidence("rescored")
        moved, scope = sequence.mean_abs, f"the reference night's {sequence.tokens} tokens scored under tonight's build"
        if sequence.non_finite:
            problems.append(f"{sequence.non_finite} of the reference night's tokens score non-finite tonight")
    if moved is not None and moved > tolerance:
        problems.append(f"logprobs moved by {moved:.3f} nats on average over {scope} (tolerance {tolerance:g})")
    if problems:
        return failed("drift", current.prompt_id, "; ".join(problems), **evidence)
    note = "tokens identical" if result.identical else f"diverged at token {result.first_divergence} within top-{TOP_K}"
    return passed("drift", current.prompt_id, f"{note}; {scope} within {tolerance:g} nats", **evidence)


def check_judged(current: Generation, judged: Scored, *, judge: str, tolerance: float, margin: float) -> Verdict:
    """A night with no reference: tonight's tokens scored by an independent judge on the same weights.

    The judge must give tonight's tokens the logprobs tonight gave them (within `tolerance` nats on average)
    and would have chosen each of them itself (its best is at most `margin` nats above tonight's token).
    """
    ours = current.logprobs[: len(judged.logprobs)]
    moved = shift(ours, judged.logprobs)
    evidence = moved.evidence("judge") | {"judge": judge, "tolerance": tolerance, "margin": margin}
    evidence |= {"answer": current.text[:ANSWER_SHOWN]}
    if (at := moved.max_at) is not None:  # where the judge differed most: the token and both logprobs
        evidence |= {
            "judge_largest_at": at,
            "judge_largest_token": current.tokens[at] if at < len(current.tokens) else "?",
            "judge_largest_served": round(ours[at] or 0.0, 4),
            "judge_largest_judged": round(judged.logprobs[at] or 0.0, 4),
        }
    unchosen = [
        i
        for i, (own, best) in enumerate(zip(judged.logprobs, judged.best, strict=False))
        if own is not None and best is not None and math.isfinite(own) and math.isfinite(best) and best - own > margin
    ]
    problems = []
    if moved.non_finite:
        problems.append(f"{moved.non_finite} of {moved.tokens} tokens have no finite logprob on one side")
    if moved.mean_abs is not None and moved.mean_abs > tolerance:
        problems.append(
            f"logprobs differ from {judge} by {moved.mean_abs:.3f} nats on average over {moved.tokens} tokens "
            f"(tolerance {tolerance:g})"
        )
    if unchosen:
        first = unchosen[0]
        token = current.tokens[first] if first < len(current.tokens) else "?"
        evidence |= {"judge_would_not_choose": len(unchosen), "first_unchosen": first, "first_unchosen_token": token}
        problems.append(
            f"{judge} would not have chosen {len(unchosen)} of {moved.tokens} tokens; the first is token {first} "
            f"({token!r})"
        )
    if problems:
        return failed("drift", current.prompt_id, "no reference; " + "; ".join(problems), **evidence)
    return passed("drift", current.prompt_id, f"no reference; {judge} agrees on all {moved.tokens} tokens", **evidence)


def unjudged(current: Generation, why: str) -> Verdict:
    """Neither a reference nor a judge: the night cannot say whether the numerics moved, and records nothing."""
    return Verdict("drift", current.prompt_id, "INCONCLUSIVE", f"not judged: {why}")
