"""The golden stage's feature requests, driven by the entry's serve options: a forced and an optional tool call
where a tool-call parser is on, reasoning where a reasoning parser is, a JSON-schema response always, an image
prompt where the entry takes images. A request the server answers with an error is that feature's FAIL, saying what
came back."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from pipeline.checks import Verdict, failed, skipped
from pipeline.checks.features import (
    CAPITAL_SCHEMA,
    IMAGE_PROMPT,
    JSON_PROMPT,
    STRICT_WEATHER_TOOL,
    check_forced_call,
    check_image,
    check_json_schema,
    check_optional_call,
    red_square_png,
)
from pipeline.checks.tools import check_reasoning
from pipeline.config.matrix import ModelEntry
from pipeline.errors import EngineError
from pipeline.infra.openai_client import OpenAIClient

TOOL_PROMPT = "What is the weather in Paris right now? Use the tool."
NAMED = {"type": "function", "function": {"name": "get_weather"}}


def feature_checks(client: OpenAIClient, entry: ModelEntry) -> list[Verdict]:
    """Every feature the entry enables, asked of the running server and judged."""
    model = entry.served_model_name
    ask = _Asker(client, model)
    verdicts: list[Verdict] = []
    if "tool_call_parser" in entry.serve:
        for how, choice in (("required", "required"), ("named", NAMED)):
            verdicts.append(
                ask(
                    "forced tool call",
                    f"get_weather ({how})",
                    TOOL_PROMPT,
                    96,  # the call takes 25-45 tokens (the grammar allows JSON's whitespace), then ends
                    partial(check_forced_call, how=how),
                    tools=[STRICT_WEATHER_TOOL],
                    tool_choice=choice,
                )
            )
        if entry.serve.get("enable_auto_tool_choice"):
            auto = ask(
                "optional tool call",
                "get_weather (auto)",
                TOOL_PROMPT,
                24,  # a call ends sooner; an answer in words is judged on its start
                check_optional_call,
                tools=[STRICT_WEATHER_TOOL],
                tool_choice="auto",
            )
            verdicts.append(auto)
        else:
            verdicts.append(skipped("optional tool call", model, "enable_auto_tool_choice is off"))
    else:
        verdicts.append(skipped("forced tool call", model, "no tool_call_parser configured"))
    if "reasoning_parser" in entry.serve:
        verdicts.append(ask("reasoning", "reasoning parser", "Why is the sky blue?", 1024, check_reasoning))
    else:
        verdicts.append(skipped("reasoning", model, "no reasoning_parser configured"))
    schema = {"type": "json_schema", "json_schema": {"name": "capital", "schema": CAPITAL_SCHEMA, "strict": True}}
    verdicts.append(ask("JSON schema", "capital", JSON_PROMPT, 64, check_json_schema, response_format=schema))
    if "image" in entry.modalities:
        content: list[dict[str, Any]] = [
            {"type": "image_url", "image_url": {"url": red_square_png()}},
            {"type": "text", "text": IMAGE_PROMPT},
        ]
        verdicts.append(ask("image", "red square", content, 16, check_image))
    return verdicts


class _Asker:
    """One chat request per feature; an HTTP error answered (a refusal, or a 500 when the request broke the server's
    own handling) is the feature's FAIL with the server's words; a server that cannot be reached raises."""

    def __init__(self, client: OpenAIClient, model: str) -> None:
        self.client = client
        self.model = model

    def __call__(
        self,
        check: str,
        subject: str,
        content: str | list[dict[str, Any]],
        max_tokens: int,
        judge: Callable[[Mapping[str, Any]], Verdict],
        **extra: Any,
    ) -> Verdict:
        messages: list[Mapping[str, Any]] = [{"role": "user", "content": content}]
        try:
            completion = self.client.chat(self.model, messages, max_tokens=max_tokens, **extra)
        except EngineError as exc:
            if " answered " not in str(exc):
                raise
            return failed(check, subject, f"the request failed: {exc}")
        return judge(completion.raw)
