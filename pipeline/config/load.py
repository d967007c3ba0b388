"""Load a YAML file with the line and column of every value, and check it against a JSON Schema.

PyYAML composes the node tree (which keeps marks); we construct the Python values ourselves so
that every JSON path keeps its position, duplicate keys are reported instead of silently
overwritten, and alias expansion is bounded (a "billion laughs" file is refused, not expanded).
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, cast

import jsonschema
import yaml
from jsonschema.exceptions import ValidationError, best_match

from pipeline.errors import ConfigError, ConfigIssue

MAX_FILE_BYTES = 1024 * 1024
MAX_NODES = 100_000
MAX_DEPTH = 64

JsonPath = tuple[str | int, ...]

_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_COLLECTION_TAGS = {"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"}


def format_path(path: Sequence[str | int]) -> str:
    """Render a JSON path as `models[2].serve.max_model_len`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


@dataclass(frozen=True)
class Document:
    """A loaded YAML file: its data and the position of every value and key."""

    file: str
    data: Any
    positions: Mapping[JsonPath, tuple[int, int]] = field(default_factory=dict)
    key_positions: Mapping[JsonPath, tuple[int, int]] = field(default_factory=dict)

    def locate(self, path: Sequence[str | int], *, key: bool = False) -> tuple[int, int]:
        """Line and column of the value at `path` (or of its key), else of its nearest parent."""
        current: JsonPath = tuple(path)
        if key and current in self.key_positions:
            return self.key_positions[current]
        while current:
            if current in self.positions:
                return self.positions[current]
            current = current[:-1]
        return self.positions.get((), (1, 1))

    def issue(self, path: Sequence[str | int], message: str, *, key: bool = False) -> ConfigIssue:
        """A ConfigIssue pointing at `path` in this document."""
        line, column = self.locate(path, key=key)
        return ConfigIssue(self.file, line, column, format_path(path), message)


class _Builder:
    """Turns a composed node tree into plain Python values, recording positions."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.positions: dict[JsonPath, tuple[int, int]] = {}
        self.key_positions: dict[JsonPath, tuple[int, int]] = {}
        self.issues: list[ConfigIssue] = []
        self.nodes_seen = 0
        self._scalars = yaml.constructor.SafeConstructor()

    def build(self, node: yaml.Node, path: JsonPath, depth: int = 0) -> Any:
        self.nodes_seen += 1
        if self.nodes_seen > MAX_NODES:
            raise _TooLargeError(
                node,
                path,
                f"more than {MAX_NODES} values after expanding aliases "
                "(an alias bomb?); write the values out or use fewer anchors",
            )
        if depth > MAX_DEPTH:
            raise _TooLargeError(node, path, f"nested deeper than {MAX_DEPTH} levels (a recursive alias?)")
        self.positions.setdefault(path, _position(node))
        if isinstance(node, yaml.CollectionNode) and node.tag not in _COLLECTION_TAGS:
            self.issues.append(self._issue(node, path, f"unknown tag {node.tag!r}: configuration is plain YAML"))
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path, depth)
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, (*path, i), depth + 1) for i, item in enumerate(node.value)]
        if node.tag == _TIMESTAMP_TAG:
            return str(node.value)  # keep dates as the text the maintainer wrote
        return self._scalar(node, path)

    def _scalar(self, node: yaml.Node, path: JsonPath) -> Any:
        """A plain scalar; a tag PyYAML's safe loader does not know (`!env`) or a NaN or infinity is an issue."""
        try:
            value = self._scalars.construct_object(node)
        except yaml.YAMLError:
            self.issues.append(self._issue(node, path, f"unknown tag {node.tag!r}: configuration is plain YAML"))
            return None
        except ValueError as exc:  # an integer of thousands of digits, past Python's conversion limit
            self.issues.append(self._issue(node, path, f"not a usable value ({str(exc)[:80]})"))
            return None
        if isinstance(value, float) and not math.isfinite(value):
            self.issues.append(self._issue(node, path, f"{node.value} is not a finite number; write a number"))
        return value

    def _mapping(self, node: yaml.MappingNode, path: JsonPath, depth: int) -> dict[str, Any]:
        result: dict[str, Any] = {}
        merged: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                merged.update(self._merge_sources(value_node, path, depth))
                continue
            key = self._scalar(key_node, path) if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, str):
                self.issues.append(self._issue(key_node, path, "keys must be plain strings"))
                continue
            if key in result:
                line, _ = self.key_positions[(*path, key)]
                self.issues.append(self._issue(key_node, (*path, key), f"duplicate key (first defined on line {line})"))
                continue
            self.key_positions[(*path, key)] = _position(key_node)
            result[key] = self.build(value_node, (*path, key), depth + 1)
        for key, value in merged.items():
            result.setdefault(key, value)
        return result

    def _merge_sources(self, node: yaml.Node, path: JsonPath, depth: int) -> dict[str, Any]:
        sources = node.value if isinstance(node, yaml.SequenceNode) else [node]
        merged: dict[str, Any] = {}
        for source in sources:
            value = self.build(source, path, depth + 1)
            if isinstance(value, dict):
                for key, item in value.items():
                    merged.setdefault(key, item)
            else:
                self.issues.append(self._issue(source, path, "'<<' merges only mappings"))
        return merged

    def _issue(self, node: yaml.Node, path: JsonPath, message: str) -> ConfigIssue:
        line, column = _position(node)
        return ConfigIssue(self.file, line, column, format_path(path), message)


class _TooLargeError(Exception):
    def __init__(self, node: yaml.Node, path: JsonPath, message: str) -> None:
        super().__init__(message)
        self.node = node
        self.path = path


def _position(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


def display_name(path: Path) -> str:
    """The file name as the user should read it: relative to the working directory when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def read_text(path: Path, name: str) -> str:
    """The file's text, or a ConfigError for a missing, oversized or non-UTF-8 file."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError([ConfigIssue(name, 1, 1, "", "file not found; create it or fix the path")]) from None
    except OSError as exc:
        raise ConfigError([ConfigIssue(name, 1, 1, "", f"cannot read the file ({exc.strerror})")]) from None
    if len(raw) > MAX_FILE_BYTES:
        message = (
            f"file is {len(raw):,} bytes, over the {MAX_FILE_BYTES:,}-byte limit for a "
            "configuration file; split it or remove what is not configuration"
        )
        raise ConfigError([ConfigIssue(name, 1, 1, "", message)])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        message = f"not valid UTF-8 (byte 0x{raw[exc.start]:02x}); save the file as UTF-8"
        raise ConfigError([ConfigIssue(name, line, column, "", message)]) from None


def parse_yaml(text: str, name: str) -> Document:
    """Parse YAML text into a Document, or raise ConfigError with every position known."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        raise ConfigError([_syntax_issue(exc, name)]) from None
    except yaml.reader.ReaderError as exc:  # a NUL or another character YAML does not allow
        line, column = _line_and_column(text, exc.position)
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        message = f"character {code:#06x} is not allowed in YAML; remove it"
        raise ConfigError([ConfigIssue(name, line, column, "", message)]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([ConfigIssue(name, 1, 1, "", f"invalid YAML: {exc}")]) from None
    except RecursionError:  # the composer recurses once per level: a file nested hundreds deep
        message = f"nested deeper than {MAX_DEPTH} levels; configuration is never that deep"
        raise ConfigError([ConfigIssue(name, 1, 1, "", message)]) from None
    if root is None:
        raise ConfigError([ConfigIssue(name, 1, 1, "", "file is empty; it needs at least `version: 1`")])
    builder = _Builder(name)
    try:
        data = builder.build(root, ())
    except _TooLargeError as exc:
        line, column = _position(exc.node)
        where = format_path(exc.path[:6]) + ("[...]" if len(exc.path) > 6 else "")  # a loop's path never ends
        raise ConfigError([ConfigIssue(name, line, column, where, str(exc))]) from None
    if builder.issues:
        raise ConfigError(builder.issues)
    return Document(name, data, builder.positions, builder.key_positions)


def _line_and_column(text: str, position: int) -> tuple[int, int]:
    line = text.count("\n", 0, position) + 1
    return line, position - (text.rfind("\n", 0, position) + 1) + 1


def _syntax_issue(exc: yaml.MarkedYAMLError, name: str) -> ConfigIssue:
    mark = exc.problem_mark or exc.context_mark
    line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
    problem = exc.problem or "invalid YAML"
    if "'\\t'" in problem:
        return ConfigIssue(name, line, column, "", "tab character where YAML needs spaces; indent with spaces")
    context = f" {exc.context}" if exc.context else ""
    return ConfigIssue(name, line, column, "", f"invalid YAML: {problem}{context}")


@cache
def schema(name: str) -> dict[str, Any]:
    """A JSON Schema shipped in pipeline/config/schemas/."""
    text = resources.files("pipeline.config").joinpath("schemas", f"{name}.schema.json").read_text("utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def schema_issues(doc: Document, schema_document: Mapping[str, Any]) -> list[ConfigIssue]:
    """Every violation of `schema_document` in `doc`, located and worded for a person."""
    validator = jsonschema.Draft202012Validator(
        schema_document, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    return [issue for error in validator.iter_errors(doc.data) for issue in _explain(doc, error)]


def load(path: Path, schema_name: str) -> Document:
    """Read, parse and schema-check one configuration file."""
    name = display_name(path)
    doc = parse_yaml(read_text(path, name), name)
    issues = schema_issues(doc, schema(schema_name))
    if issues:
        raise ConfigError(issues)
    return doc


def _explain(doc: Document, error: ValidationError) -> Iterator[ConfigIssue]:
    path = tuple(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        yield from _unknown_keys(doc, path, error)
        return
    if error.validator in ("oneOf", "anyOf") and error.context:
        # prefer the branch the value was meant for: one whose type it already has
        typed = [e for e in error.context if e.validator != "type"]
        yield from _explain(doc, best_match(typed or error.context))
        return
    yield doc.issue(path, _wording(error))


def _schema_of(error: ValidationError) -> Mapping[str, Any]:
    return error.schema if isinstance(error.schema, Mapping) else {}


def _unknown_keys(doc: Document, path: JsonPath, error: ValidationError) -> Iterator[ConfigIssue]:
    known = sorted(_schema_of(error).get("properties", {}))
    patterns = _schema_of(error).get("patternProperties", {})
    instance: Mapping[str, Any] = cast(Any, error.instance)
    for key in instance:
        if key in known or any(re.search(p, key) for p in patterns):
            continue
        yield doc.issue((*path, key), f"unknown key; {suggest(key, known)}", key=True)


def suggest(word: str, choices: Sequence[str]) -> str:
    """'did you mean X?' for the nearest choice, else the list of choices."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    if close:
        return f"did you mean '{close[0]}'?"
    if not choices:
        return "none is defined yet"
    listed = ", ".join(f"'{c}'" for c in choices)
    return f"expected one of {listed}"


_JSON_TYPES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "object": "a mapping",
    "array": "a list",
    "null": "nothing",
}


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if value is None:
        return "nothing (null)"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {value!r}"


def _wording(error: ValidationError) -> str:
    """A short, human message for one schema error."""
    validator, expected, instance = error.validator, cast(Any, error.validator_value), error.instance
    if validator == "type":
        kinds = [expected] if isinstance(expected, str) else list(expected)
        names = [_JSON_TYPES.get(k, k) for k in kinds]
        wanted = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
        return f"expected {wanted}, got {_type_name(instance)}"
    if validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else str(expected)
        return f"missing required key '{missing}'"
    if validator == "enum":
        choices = [str(c) for c in expected]
        return f"{instance!r} is not allowed; {suggest(str(instance), choices)}"
    if validator == "const":
        return f"must be {expected!r}, got {instance!r}"
    if validator == "pattern":
        described = _schema_of(error).get("description")
        return f"{instance!r} is not valid" + (f": {described}" if described else f" (must match {expected})")
    if validator in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        return error.message
    if validator == "minItems":
        return f"needs at least {expected} item{'s' if expected != 1 else ''}"
    if validator == "minLength":
        return "must not be empty"
    if validator == "uniqueItems":
        return "items must be unique"
    return error.message
