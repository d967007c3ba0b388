"""Golden prompt sets: prompts with what a correct answer must satisfy, keyed by engine and dtype."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal


@dataclass(frozen=True)
class Expectation:
    """What an answer must satisfy; every given condition must hold."""

    exact: str | None = None
    contains: tuple[str, ...] = ()
    not_contains: tuple[str, ...] = ()
    one_of: tuple[str, ...] = ()
    regex: str | None = None
    number: float | None = None
    tolerance: float = 0.0


@dataclass(frozen=True)
class GoldenPrompt:
    """One prompt with its expectations."""

    id: str
    prompt: str
    max_tokens: int
    api: Literal["chat", "completion"] = "chat"
    system: str | None = None
    expect: Expectation | None = None
    expect_by: Mapping[str, Expectation] = field(default_factory=dict)
    stops: bool | None = None  # None: chat answers must stop, completions may run to max_tokens

    @property
    def should_stop(self) -> bool:
        return self.api == "chat" if self.stops is None else self.stops

    def expectation_for(self, engine: str, dtype: str) -> Expectation | None:
        """The expectation keyed by `engine/dtype`, falling back to the general one."""
        return self.expect_by.get(f"{engine}/{dtype}", self.expect)


@dataclass(frozen=True)
class LongDecode:
    """One long greedy generation whose tail is checked like its head."""

    prompt: str
    max_tokens: int
    window: int = 64


@dataclass(frozen=True)
class GoldenSet:
    """A named set of golden prompts plus generated canaries and an optional long decode."""

    name: str
    prompts: tuple[GoldenPrompt, ...]
    canaries: Mapping[str, int] = field(default_factory=dict)
    canary_seed: int = 0
    canary_max_tokens: int = 64
    long_decode: LongDecode | None = None
    drift_tolerance: float | None = None
    description: str = ""


def _expectation(raw: Mapping[str, Any]) -> Expectation:
    contains = raw.get("contains", ())
    number = raw.get("number")
    return Expectation(
        exact=raw.get("exact"),
        contains=(contains,) if isinstance(contains, str) else tuple(contains),
        not_contains=tuple(raw.get("not_contains", ())),
        one_of=tuple(raw.get("one_of", ())),
        regex=raw.get("regex"),
        number=None if number is None else float(number["value"]),
        tolerance=0.0 if number is None else float(number.get("tolerance", 0.0)),
    )


def build_golden(name: str, data: Mapping[str, Any]) -> GoldenSet:
    """A GoldenSet from schema-valid data."""
    prompts = tuple(
        GoldenPrompt(
            id=raw["id"],
            prompt=raw["prompt"],
            max_tokens=raw["max_tokens"],
            api=raw.get("api", "chat"),
            system=raw.get("system"),
            expect=_expectation(raw["expect"]) if "expect" in raw else None,
            expect_by=MappingProxyType({k: _expectation(v) for k, v in raw.get("expect_by", {}).items()}),
            stops=raw.get("stops"),
        )
        for raw in data["prompts"]
    )
    canaries = dict(data.get("canaries", {}))
    seed, canary_max_tokens = canaries.pop("seed", 0), canaries.pop("max_tokens", 64)
    long = data.get("long_decode")
    return GoldenSet(
        name,
        prompts,
        MappingProxyType(canaries),
        seed,
        canary_max_tokens,
        LongDecode(long["prompt"], long["max_tokens"], long.get("window", 64)) if long else None,
        data.get("drift_tolerance"),
        data.get("description", ""),
    )
