"""GitHub's own OpenAPI description as a contract: match a request to its operation, validate bodies both ways,
and build schema-valid responses (every required property filled) for the stand-in to overlay its state on."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

SPEC = Path(__file__).parents[1] / "data" / "github-api" / "releases-issues.openapi.json"


@dataclass(frozen=True)
class Operation:
    """One operation of the description, with its path template compiled."""

    method: str
    template: str
    pattern: re.Pattern[str]
    spec: dict[str, Any]

    @property
    def operation_id(self) -> str:
        return str(self.spec["operationId"])

    def request_schema(self, media: str = "application/json") -> dict[str, Any] | None:
        content = self.spec.get("requestBody", {}).get("content", {})
        return json_schema(content[media]["schema"]) if media in content else None

    def response_schema(self, status: int) -> dict[str, Any] | None:
        response = self.spec.get("responses", {}).get(str(status))
        if response is None:
            return None
        content = response.get("content", {})
        return json_schema(content["application/json"]["schema"]) if "application/json" in content else {}

    def documented(self, status: int) -> bool:
        return str(status) in self.spec.get("responses", {})


@cache
def _spec() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SPEC.read_text())
    return data


@cache
def operations() -> tuple[Operation, ...]:
    found = []
    for template, methods in _spec()["paths"].items():
        # {ref} of git refs spans slashes (tags/v1); every other parameter is one segment
        regex = re.sub(r"\{ref\}", r"(?P<ref>.+)", template)
        regex = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", regex)
        for method, spec in methods.items():
            found.append(Operation(method.upper(), template, re.compile(f"^{regex}$"), spec))
    # literal paths before templated ones: /releases/latest is not /releases/{release_id}
    return tuple(sorted(found, key=lambda o: o.template.count("{")))


def match(method: str, path: str) -> tuple[Operation, dict[str, str]] | None:
    for operation in operations():
        if operation.method == method and (hit := operation.pattern.match(path)):
            return operation, hit.groupdict()
    return None


def json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI 3.0 to JSON Schema 2020-12: `nullable` becomes a null type (and a null in any enum)."""
    schema = copy.deepcopy(schema)
    return _convert(schema)


def _convert(node: Any, *, names: bool = False) -> Any:
    if isinstance(node, list):
        return [_convert(item) for item in node]
    if not isinstance(node, dict):
        return node
    if names:  # the keys of `properties` are property names, never keywords
        return {name: _convert(sub) for name, sub in node.items()}
    out = {
        key: _convert(value, names=key in {"properties", "patternProperties"})
        for key, value in node.items()
        if key not in {"example", "examples"}
    }
    if out.pop("nullable", False):
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
        if "type" in out:
            out["type"] = [out["type"], "null"] if isinstance(out["type"], str) else [*out["type"], "null"]
        else:
            return {"anyOf": [out, {"type": "null"}]}
    return out


def validate(schema: dict[str, Any], value: Any, *, where: str) -> list[str]:
    """Every way `value` breaks `schema`, as readable lines."""
    validator = Draft202012Validator(schema)
    return [
        f"{where}: {'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in validator.iter_errors(value)
    ]


def synthesize(schema: dict[str, Any], overlay: Any = None, *, every_property: bool = False) -> Any:
    """A value that satisfies `schema`, with `overlay`'s values taking precedence wherever it gives one.

    `every_property` fills the optional properties of the top object too: clients such as github3.py read
    some keys that GitHub always sends but the description does not require.
    """
    if overlay is not None and not isinstance(overlay, dict):
        return overlay
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = [o for o in schema[key] if o.get("type") != "null"]
            return synthesize(options[0], overlay) if options else None
    if "allOf" in schema:
        merged: dict[str, Any] = {"type": "object", "properties": {}, "required": []}
        for part in schema["allOf"]:
            merged["properties"] |= part.get("properties", {})
            merged["required"] += part.get("required", [])
        return synthesize(merged, overlay)
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if "object" in kinds or "properties" in schema:
        result = {}
        given = overlay or {}
        names = list(schema.get("properties", {})) if every_property else schema.get("required", [])
        for name in names:
            result[name] = synthesize(schema.get("properties", {}).get(name, {}), given.get(name))
        for name, value in given.items():
            if name not in result:
                result[name] = value
        return result
    if "enum" in schema:
        return next(v for v in schema["enum"] if v is not None)
    if "null" in kinds and len(kinds) == 2 and overlay is None:
        return None
    if "array" in kinds:
        return []
    if "integer" in kinds:
        return 1
    if "number" in kinds:
        return 1.0
    if "boolean" in kinds:
        return False
    if schema.get("format") == "date-time":
        return "2026-11-21T00:00:00Z"
    if schema.get("format") == "uri":
        return "https://github.invalid/x"
    if "string" in kinds:
        return "x"
    return None
