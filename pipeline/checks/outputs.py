"""Recorded outputs of one generation: text, tokens, their logprobs and top alternatives, as checks consume them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.infra.openai_client import Completion


@dataclass(frozen=True)
class Generation:
    """One greedy answer as the checks see it (and as the drift store keeps it)."""

    prompt_id: str
    text: str
    tokens: tuple[str, ...] = ()
    logprobs: tuple[float | None, ...] = ()
    top: tuple[Mapping[str, float | None], ...] = ()
    finish_reason: str | None = None
    logprob_error: str | None = None  # the server refused to return logprobs (NaN or inf in JSON)

    @classmethod
    def from_completion(cls, prompt_id: str, completion: Completion) -> Generation:
        return cls(
            prompt_id=prompt_id,
            text=completion.text,
            tokens=tuple(t.token for t in completion.logprobs),
            logprobs=tuple(t.logprob for t in completion.logprobs),
            top=tuple(dict(t.top) for t in completion.logprobs),
            finish_reason=completion.finish_reason,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt_id": self.prompt_id,
            "text": self.text,
            "tokens": list(self.tokens),
            "logprobs": list(self.logprobs),
            "top": [dict(t) for t in self.top],
            "finish_reason": self.finish_reason,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Generation:
        return cls(
            raw["prompt_id"],
            raw["text"],
            tuple(raw["tokens"]),
            tuple(raw["logprobs"]),
            tuple(dict(t) for t in raw["top"]),
            raw.get("finish_reason"),
        )

    def window(self, start: int, stop: int | None = None) -> Generation:
        """The same generation cut to tokens [start:stop] (text rebuilt from those tokens)."""
        tokens = self.tokens[start:stop]
        return Generation(
            self.prompt_id, "".join(tokens), tokens, self.logprobs[start:stop], self.top[start:stop], self.finish_reason
        )


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None
