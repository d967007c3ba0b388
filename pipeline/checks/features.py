"""The serving features agents use, judged from the answers: a forced tool call whose arguments validate against the
tool's schema, an optional call the model may choose, a JSON-schema response, an image prompt's answer.

A forced call and a JSON-schema response are made by guided decoding (the grammar, not the model's skill), so they
hold on any model: a build whose grammar is ignored, or whose tool parser finds no call, fails here.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from collections.abc import Mapping
from typing import Any

import jsonschema

from pipeline.checks import Verdict, failed, passed

WEATHER_PARAMETERS = {
    "type": "object",
    "properties": {"city": {"type": "string", "minLength": 1}},
    "required": ["city"],
    "additionalProperties": False,
}
# strict: the arguments follow the schema by grammar (OpenAI's meaning, and vLLM's --tool-strict-level auto)
STRICT_WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city",
        "strict": True,
        "parameters": WEATHER_PARAMETERS,
    },
}
CAPITAL_SCHEMA = {
    "type": "object",
    "properties": {"country": {"type": "string"}, "capital": {"type": "string"}},
    "required": ["country", "capital"],
    "additionalProperties": False,
}
JSON_PROMPT = "What is the capital of France? Answer in JSON with the country and its capital."
IMAGE_PROMPT = "What colour is this image? Answer with one word."
IMAGE_COLOUR = "red"


def _message(response: Mapping[str, Any]) -> Mapping[str, Any]:
    message: Mapping[str, Any] = (response.get("choices") or [{}])[0].get("message") or {}
    return message


def check_forced_call(response: Mapping[str, Any], how: str) -> Verdict:
    """`tool_choice` required or named: exactly a parsed call of get_weather whose arguments validate."""
    subject = f"get_weather ({how})"
    message = _message(response)
    calls = message.get("tool_calls") or []
    if not calls:
        content = str(message.get("content") or "")[:300]
        return failed("forced tool call", subject, f"no parsed tool call; the answer was {content!r}", content=content)
    function = calls[0].get("function") or {}
    raw = function.get("arguments") or ""
    if function.get("name") != "get_weather":
        return failed("forced tool call", subject, f"called {function.get('name')!r}, not get_weather", arguments=raw)
    problem = _schema_problem(raw, WEATHER_PARAMETERS)
    if problem:
        return failed("forced tool call", subject, f"arguments {raw!r} {problem}", arguments=raw)
    return passed("forced tool call", subject, f"get_weather({raw}) validates against its schema", arguments=raw)


def check_optional_call(response: Mapping[str, Any]) -> Verdict:
    """`tool_choice` auto: the model may call or answer; a call must parse and validate, an answer must not be a
    call the parser missed (tool-call markup left in the content)."""
    message = _message(response)
    calls = message.get("tool_calls") or []
    content = str(message.get("content") or "")
    if calls:
        function = calls[0].get("function") or {}
        raw = function.get("arguments") or ""
        problem = _schema_problem(raw, WEATHER_PARAMETERS) if function.get("name") == "get_weather" else "unknown tool"
        if problem:
            return failed("optional tool call", "get_weather (auto)", f"{function.get('name')}({raw!r}) {problem}")
        return passed("optional tool call", "get_weather (auto)", f"called get_weather({raw})", arguments=raw)
    if any(mark in content for mark in ("<tool_call>", '"name": "get_weather"', "<function=")):
        return failed(
            "optional tool call", "get_weather (auto)", f"a call the parser missed: {content[:300]!r}", content=content
        )
    if not content.strip():
        return failed("optional tool call", "get_weather (auto)", "neither a call nor an answer came back")
    return passed("optional tool call", "get_weather (auto)", "answered without a call", answer=content[:200])


def check_json_schema(response: Mapping[str, Any]) -> Verdict:
    """`response_format` json_schema: the answer parses and validates against the schema asked for."""
    content = str(_message(response).get("content") or "")
    problem = _schema_problem(content, CAPITAL_SCHEMA)
    if problem:
        return failed("JSON schema", "capital", f"the answer {content[:300]!r} {problem}", content=content[:300])
    return passed("JSON schema", "capital", f"{content.strip()} validates against the schema", content=content[:300])


def check_image(response: Mapping[str, Any]) -> Verdict:
    """The image prompt: a red square, named as red."""
    content = str(_message(response).get("content") or "")
    if IMAGE_COLOUR not in content.lower():
        return failed("image", "red square", f"the answer {content[:300]!r} does not say {IMAGE_COLOUR}")
    return passed("image", "red square", f"answered {content.strip()[:100]!r}")


def _schema_problem(raw: str, schema: Mapping[str, Any]) -> str:
    """Why `raw` is not a JSON document of `schema` ("" when it is)."""
    try:
        document = json.loads(raw)
    except ValueError as exc:
        return f"is not JSON ({exc})"
    try:
        jsonschema.validate(document, schema)
    except jsonschema.ValidationError as exc:
        return f"does not validate: {exc.message}"
    return ""


def red_square_png(size: int = 64) -> str:
    """A data URL of a solid red PNG: an image whose right answer no model can argue with."""
    row = b"\x00" + b"\xff\x00\x00" * size  # filter byte, then RGB pixels
    raw = zlib.compress(row * size)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", raw) + chunk(b"IEND", b"")
    return "data:image/png;base64," + base64.b64encode(png).decode()
