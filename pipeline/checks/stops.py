"""Stops: an answer that should finish ends with the model's own stop, within its budget, without inventing a turn.

A model that never emits its end-of-turn token still answers the first words right; what gives it
away is that every answer runs to max_tokens and goes on as the next speaker ("user\\n...").
"""

from __future__ import annotations

import re

from pipeline.checks import Verdict, failed, passed, skipped
from pipeline.infra.openai_client import Generation

# The start of a new turn written out as text: chat-template markers, or a role name alone on a line
# ("user\n", "Assistant:"), as small models produce when their end-of-turn token is never chosen.
_INVENTED_TURN = re.compile(
    r"<\|im_start\|>|<\|im_end\|>|<\|start_header_id\|>|<\|eot_id\|>|<\|endoftext\|>|</s>|<\|user\|>|<\|assistant\|>"
    r"|(?:^|\n)[ \t]*(?:user|assistant|system|human)[ \t]*(?::|\n)",
    re.IGNORECASE,
)


def invented_turn(text: str) -> str | None:
    """The first place where the text starts a new turn of the conversation, quoted, or None."""
    match = _INVENTED_TURN.search(text)
    if match is None:
        return None
    return text[max(0, match.start() - 20) : match.end() + 30]


def check_stop(generation: Generation, *, should_stop: bool, max_tokens: int) -> Verdict:
    """A prompt that should finish ends with finish_reason "stop" within max_tokens and writes no new turn."""
    if not should_stop:
        return skipped("stop", generation.prompt_id, "this prompt is not expected to finish within its budget")
    evidence = {
        "finish_reason": generation.finish_reason,
        "tokens": len(generation.tokens),
        "max_tokens": max_tokens,
        "answer": generation.text[:300],
    }
    problems = []
    if generation.finish_reason != "stop":
        problems.append(
            f"ran to max_tokens ({len(generation.tokens)} of {max_tokens} tokens, finish_reason "
            f"{generation.finish_reason!r}) instead of stopping"
        )
    turn = invented_turn(generation.text)
    if turn is not None:
        problems.append(f"invents a new turn: {turn!r}")
    if problems:
        return failed("stop", generation.prompt_id, "; ".join(problems), **evidence)
    return passed("stop", generation.prompt_id, f"stopped after {len(generation.tokens)} tokens", **evidence)
