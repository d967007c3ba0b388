"""Reasoning output, for entries that configure a reasoning parser: reasoning and answer separated."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.checks import Verdict, failed, passed


def check_reasoning(response: Mapping[str, Any]) -> Verdict:
    """A reasoning parser separates the reasoning from the answer: both are present."""
    message = (response.get("choices") or [{}])[0].get("message") or {}
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    content = message.get("content")
    if not reasoning:
        return failed(
            "reasoning", "reasoning parser", "no reasoning field in the answer", content=str(content or "")[:300]
        )
    if not content:
        return failed("reasoning", "reasoning parser", "reasoning but no final answer", reasoning=str(reasoning)[:300])
    return passed(
        "reasoning",
        "reasoning parser",
        "reasoning and answer separated",
        reasoning_chars=len(str(reasoning)),
        answer=str(content)[:200],
    )
