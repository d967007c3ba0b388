"""GitHub Actions expressions (`${{ ... }}`), evaluated by the documented rules: literals, contexts with property
access and `.*` filters, `!`, `==`/`!=` (strings compared ignoring case, other types coerced to numbers), `&&`/`||`
returning an operand, and the functions the workflows use."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_TOKEN = re.compile(
    r"\s*(?:(?P<number>-?\d+(?:\.\d+)?)|'(?P<string>(?:[^']|'')*)'|(?P<op>==|!=|<=|>=|&&|\|\||[!<>()\[\],.*])"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_-]*))"
)
_EMBEDDED = re.compile(r"\$\{\{(.*?)\}\}", re.S)


class ExpressionError(ValueError):
    """An expression the runner would refuse."""


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str


def _tokens(text: str) -> list[_Token]:
    found, position = [], 0
    while position < len(text.rstrip()):
        match = _TOKEN.match(text, position)
        if match is None:
            raise ExpressionError(f"cannot read {text[position:]!r} in {text!r}")
        kind = match.lastgroup or ""
        found.append(_Token(kind, match.group(kind)))
        position = match.end()
    return found


def truthy(value: Any) -> bool:
    return value not in (None, False, 0, "") and not (isinstance(value, float) and math.isnan(value))


def as_string(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)


def _as_number(value: Any) -> float:
    if value is None or value == "":
        return 0.0
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return float("nan")
    return float("nan")


def _equal(left: Any, right: Any) -> bool:
    if isinstance(left, str) and isinstance(right, str):
        return left.lower() == right.lower()
    if type(left) is type(right) or isinstance(left, dict | list) or isinstance(right, dict | list):
        return bool(left == right)
    return _as_number(left) == _as_number(right)


class Evaluator:
    """Evaluates against `contexts` (github, env, inputs, vars, secrets, needs, steps, matrix, strategy, job status
    functions in `status`)."""

    def __init__(self, contexts: Mapping[str, Any], status: Mapping[str, Callable[[], bool]]) -> None:
        self.contexts = contexts
        self.functions: dict[str, Callable[..., Any]] = {
            **{name: (lambda fn=fn: fn()) for name, fn in status.items()},
            "fromJSON": lambda text: json.loads(as_string(text)),
            "toJSON": lambda value: json.dumps(value, indent=2),
            "contains": _contains,
            "startsWith": lambda a, b: as_string(a).lower().startswith(as_string(b).lower()),
            "format": _format,
        }

    def evaluate(self, expression: str) -> Any:
        self._tokens = _tokens(expression)
        self._at = 0
        value = self._or()
        if self._at != len(self._tokens):
            raise ExpressionError(f"unexpected {self._tokens[self._at].text!r} in {expression!r}")
        return value

    def interpolate(self, text: str) -> str:
        """A string with embedded `${{ }}` expressions, each replaced by its value as a string."""
        return _EMBEDDED.sub(lambda m: as_string(self.evaluate(m.group(1))), text)

    def value_of(self, text: Any) -> Any:
        """A YAML value: a lone `${{ }}` keeps its type (a list from fromJSON), anything else is interpolated."""
        if not isinstance(text, str):
            return text
        lone = _EMBEDDED.fullmatch(text.strip())
        return self.evaluate(lone.group(1)) if lone else self.interpolate(text)

    def _peek(self) -> str | None:
        return self._tokens[self._at].text if self._at < len(self._tokens) else None

    def _take(self, expected: str | None = None) -> _Token:
        if self._at >= len(self._tokens):
            raise ExpressionError("the expression ends too early")
        token = self._tokens[self._at]
        if expected is not None and token.text != expected:
            raise ExpressionError(f"expected {expected!r}, found {token.text!r}")
        self._at += 1
        return token

    def _or(self) -> Any:
        value = self._and()
        while self._peek() == "||":
            self._take()
            right = self._and()
            value = value if truthy(value) else right
        return value

    def _and(self) -> Any:
        value = self._comparison()
        while self._peek() == "&&":
            self._take()
            right = self._comparison()
            value = right if truthy(value) else value
        return value

    def _comparison(self) -> Any:
        left = self._unary()
        operator = self._peek()
        if operator in {"==", "!=", "<", ">", "<=", ">="}:
            self._take()
            right = self._unary()
            if operator in {"==", "!="}:
                return _equal(left, right) == (operator == "==")
            a, b = _as_number(left), _as_number(right)
            return {"<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[operator]
        return left

    def _unary(self) -> Any:
        if self._peek() == "!":
            self._take()
            return not truthy(self._unary())
        return self._primary()

    def _primary(self) -> Any:
        token = self._take()
        if token.text == "(":
            value = self._or()
            self._take(")")
            return value
        if token.kind == "number":
            return float(token.text) if "." in token.text else int(token.text)
        if token.kind == "string":
            return token.text.replace("''", "'")
        if token.kind != "name":
            raise ExpressionError(f"unexpected {token.text!r}")
        if token.text in {"true", "false", "null"}:
            return {"true": True, "false": False, "null": None}[token.text]
        if self._peek() == "(":
            return self._call(token.text)
        if token.text not in self.contexts:
            raise ExpressionError(f"unknown context {token.text!r}")
        return self._properties(self.contexts[token.text])

    def _call(self, name: str) -> Any:
        if name not in self.functions:
            raise ExpressionError(f"unknown function {name}()")
        self._take("(")
        arguments = []
        while self._peek() != ")":
            arguments.append(self._or())
            if self._peek() == ",":
                self._take()
        self._take(")")
        return self._properties(self.functions[name](*arguments))

    def _properties(self, value: Any) -> Any:
        while self._peek() in {".", "["}:
            if self._take().text == "[":
                key = self._or()
                self._take("]")
                value = _member(value, as_string(key))
            elif self._peek() == "*":
                self._take()
                value = list(value.values()) if isinstance(value, dict) else list(value or [])
            else:
                name = self._take().text
                value = [_member(v, name) for v in value] if isinstance(value, list) else _member(value, name)
        return value


def _member(value: Any, name: str) -> Any:
    if isinstance(value, list) and name.isdigit():
        return value[int(name)] if int(name) < len(value) else None
    if isinstance(value, dict):
        for key, found in value.items():  # property names ignore case
            if str(key).lower() == name.lower():
                return found
    return None


def _contains(haystack: Any, needle: Any) -> bool:
    if isinstance(haystack, list):
        return any(_equal(item, needle) for item in haystack)
    return as_string(needle).lower() in as_string(haystack).lower()


def _format(template: Any, *arguments: Any) -> str:
    return re.sub(r"\{(\d+)\}", lambda m: as_string(arguments[int(m.group(1))]), as_string(template))


def has_status_function(expression: str) -> bool:
    """A job or step `if` without one of these is implicitly `success() && (...)`."""
    return re.search(r"\b(success|failure|always|cancelled)\s*\(", expression) is not None
