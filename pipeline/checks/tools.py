"""Tool calling and reasoning output, for entries that configure a tool-call or reasoning parser."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pipeline.checks import Verdict, failed, passed

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TOOL_PROMPT = "What is the weather in Paris right now? Use the tool."


def check_tool_call(response: Mapping[str, Any]) -> Verdict:
    """The answer is a parsed call of the offered tool with valid JSON arguments naming the city."""
    message = (response.get("choices") or [{}])[0].get("message") or {}
    calls = message.get("tool_calls") or []
    if not calls:
        content = str(message.get("content") or "")[:300]
        return failed("tool call", "get_weather", "no parsed tool call in the answer", content=content)
    function = calls[0].get("function") or {}
    try:
        arguments = json.loads(function.get("arguments") or "")
    except ValueError as exc:
        return failed(
            "tool call", "get_weather", f"arguments are not valid JSON: {exc}", arguments=function.get("arguments")
        )
    if function.get("name") != "get_weather" or not isinstance(arguments, dict) or "city" not in arguments:
        return failed(
            "tool call", "get_weather", f"called {function.get('name')!r} with {arguments!r}", arguments=arguments
        )
    return passed("tool call", "get_weather", f"parsed call with {arguments}", arguments=arguments)


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
