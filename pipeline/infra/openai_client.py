"""An OpenAI-compatible HTTP client (httpx): models, chat, completions, streaming with timestamps, /metrics."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from pipeline.errors import EngineError, NonFiniteLogprobsError


@dataclass(frozen=True)
class ServedModel:
    """One entry of /v1/models."""

    id: str
    max_model_len: int | None
    root: str | None


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token with its logprob and the top alternatives (None where the server sent null)."""

    token: str
    logprob: float | None
    top: Mapping[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Scored:
    """A fixed token sequence scored teacher-forced: each token's logprob and the best logprob at its position."""

    logprobs: tuple[float | None, ...]
    best: tuple[float | None, ...]


@dataclass(frozen=True)
class Completion:
    """A finished, non-streamed answer."""

    text: str
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    logprobs: tuple[TokenLogprob, ...] = ()
    raw: Mapping[str, Any] = field(default_factory=dict)
    token_ids: tuple[int, ...] = ()  # with return_token_ids (vLLM): the generated ids and the rendered prompt's
    prompt_token_ids: tuple[int, ...] = ()


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
    token_ids: tuple[int, ...] = ()  # what a judge or tomorrow's build scores again, token for token
    prompt_token_ids: tuple[int, ...] = ()

    @classmethod
    def from_completion(cls, prompt_id: str, completion: Completion) -> Generation:
        return cls(
            prompt_id=prompt_id,
            text=completion.text,
            tokens=tuple(t.token for t in completion.logprobs),
            logprobs=tuple(t.logprob for t in completion.logprobs),
            top=tuple(dict(t.top) for t in completion.logprobs),
            finish_reason=completion.finish_reason,
            token_ids=completion.token_ids,
            prompt_token_ids=completion.prompt_token_ids,
        )

    @property
    def scored_ids(self) -> tuple[int, ...]:
        """The generated ids that have a logprob (a stop token the server drops from logprobs is left out)."""
        return self.token_ids[: len(self.logprobs)]

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt_id": self.prompt_id,
            "text": self.text,
            "tokens": list(self.tokens),
            "logprobs": list(self.logprobs),
            "top": [dict(t) for t in self.top],
            "finish_reason": self.finish_reason,
            "token_ids": list(self.token_ids),
            "prompt_token_ids": list(self.prompt_token_ids),
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
            token_ids=tuple(raw.get("token_ids", ())),
            prompt_token_ids=tuple(raw.get("prompt_token_ids", ())),
        )

    def window(self, start: int, stop: int | None = None) -> Generation:
        """The same generation cut to tokens [start:stop] (text rebuilt from those tokens)."""
        tokens = self.tokens[start:stop]
        return Generation(
            self.prompt_id,
            "".join(tokens),
            tokens,
            self.logprobs[start:stop],
            self.top[start:stop],
            self.finish_reason,
            token_ids=self.token_ids[start:stop],
        )


@dataclass(frozen=True)
class StreamChunk:
    """One server-sent event of a streamed answer, with the time it arrived (time.perf_counter)."""

    at: float
    data: Mapping[str, Any]

    @property
    def text(self) -> str:
        choices = self.data.get("choices") or []
        if not choices:
            return ""
        choice = choices[0]
        delta = choice.get("delta") or {}
        return str(
            delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or choice.get("text") or ""
        )


@dataclass(frozen=True)
class MetricSample:
    """One Prometheus sample: name, labels, value."""

    name: str
    labels: Mapping[str, str]
    value: float


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str) -> list[MetricSample]:
    """Parse Prometheus text exposition into samples (comments and malformed lines skipped)."""
    samples = []
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match or line.startswith("#"):
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        labels = dict(_LABEL.findall(match.group(2) or ""))
        samples.append(MetricSample(match.group(1), labels, value))
    return samples


def metric_total(samples: Sequence[MetricSample], name: str) -> float | None:
    """The sum of a metric over its label sets, or None when the server does not export it."""
    values = [s.value for s in samples if s.name == name]
    return sum(values) if values else None


_NON_FINITE = "Out of range float values are not JSON compliant"


class OpenAIClient:
    """A client for one server; pass an httpx.Client to inject a transport or change timeouts."""

    def __init__(
        self,
        base_url: str,
        *,
        client: httpx.Client | None = None,
        timeout_s: float = 120.0,
        api_key: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = client or httpx.Client(timeout=httpx.Timeout(timeout_s, connect=5.0), headers=headers)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> OpenAIClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def models(self, *, timeout_s: float | None = None) -> list[ServedModel]:
        """What /v1/models serves; `timeout_s` bounds this request alone (a readiness probe's, shorter than a
        completion's)."""
        body = self._get_json("/v1/models", **({} if timeout_s is None else {"timeout": timeout_s}))
        return [ServedModel(str(m["id"]), m.get("max_model_len"), m.get("root")) for m in body.get("data", [])]

    def tokenize(self, model: str, text: str) -> list[int]:
        """Token ids of plain text, by the server's own tokenizer (vLLM's /tokenize)."""
        body = self._post_json("/tokenize", {"model": model, "prompt": text, "add_special_tokens": False})
        return [int(t) for t in body["tokens"]]

    def detokenize(self, model: str, tokens: Sequence[int]) -> str:
        """Text of token ids, by the server's own tokenizer (vLLM's /detokenize)."""
        return str(self._post_json("/detokenize", {"model": model, "tokens": list(tokens)})["prompt"])

    def metrics(self) -> list[MetricSample]:
        response = self._request("GET", "/metrics")
        return parse_metrics(response.text)

    def chat(
        self,
        model: str,
        messages: Sequence[Mapping[str, str]],
        *,
        max_tokens: int,
        temperature: float = 0.0,
        top_logprobs: int | None = None,
        **extra: Any,
    ) -> Completion:
        payload: dict[str, Any] = {
            "model": model,
            "messages": list(messages),
            "max_tokens": max_tokens,
            "temperature": temperature,
            **extra,
        }
        if top_logprobs is not None:
            payload |= {"logprobs": True, "top_logprobs": top_logprobs}
        body = self._post_json("/v1/chat/completions", payload)
        choice = body["choices"][0]
        content = choice.get("logprobs", {}) or {}
        tokens = tuple(_token_logprob(t) for t in content.get("content") or [])
        return _completion(str(choice["message"].get("content") or ""), choice, body, tokens, body)

    def complete(
        self,
        model: str,
        prompt: str,
        *,
        max_tokens: int,
        temperature: float = 0.0,
        logprobs: int | None = None,
        **extra: Any,
    ) -> Completion:
        payload: dict[str, Any] = {
            "model": model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": temperature,
            **extra,
        }
        if logprobs is not None:
            payload["logprobs"] = logprobs
        body = self._post_json("/v1/completions", payload)
        choice = body["choices"][0]
        lp = choice.get("logprobs") or {}
        tops = lp.get("top_logprobs") or [{} for _ in lp.get("tokens") or []]
        tokens = tuple(
            TokenLogprob(tok, value, dict(top or {}))
            for tok, value, top in zip(lp.get("tokens") or [], lp.get("token_logprobs") or [], tops, strict=False)
        )
        return _completion(str(choice.get("text") or ""), choice, body, tokens, choice)

    def score(self, model: str, token_ids: Sequence[int], start: int) -> Scored:
        """token_ids[start:] scored teacher-forced, each given the ids before it (vLLM's prompt_logprobs).

        Nothing generated matters: one token is asked for because the server needs a request to run.
        """
        payload = {
            "model": model,
            "prompt": list(token_ids),
            "max_tokens": 1,
            "temperature": 0.0,
            "prompt_logprobs": 1,  # the scored token's own logprob and the position's best
        }
        choice = self._post_json("/v1/completions", payload)["choices"][0]
        positions = choice.get("prompt_logprobs") or []
        if len(positions) != len(token_ids):
            raise EngineError(f"asked to score {len(token_ids)} tokens, the server scored {len(positions)}")
        pairs = [scored_position(p, token) for p, token in zip(positions[start:], token_ids[start:], strict=True)]
        return Scored(tuple(own for own, _ in pairs), tuple(best for _, best in pairs))

    def stream(self, path: str, payload: Mapping[str, Any]) -> Iterator[StreamChunk]:
        """POST with stream=true; yield each event with its arrival time, until `data: [DONE]`."""
        body = dict(payload) | {"stream": True}
        try:
            with self._http.stream("POST", self.base_url + path, json=body) as response:
                if response.status_code != 200:
                    response.read()
                    raise EngineError(f"POST {path} answered {response.status_code}: {response.text[:300]}")
                for line in response.iter_lines():
                    at = time.perf_counter()
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    yield StreamChunk(at, json.loads(data))
        except httpx.HTTPError as exc:
            raise EngineError(f"POST {path} failed: {type(exc).__name__}: {exc}") from None
        raise EngineError(f"POST {path}: the stream ended without data: [DONE]")

    def _get_json(self, path: str, **kwargs: Any) -> dict[str, Any]:
        result: dict[str, Any] = self._request("GET", path, **kwargs).json()
        return result

    def _post_json(self, path: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._request("POST", path, json=payload).json()
        return result

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, self.base_url + path, **kwargs)
        except httpx.HTTPError as exc:
            raise EngineError(f"{method} {path} failed: {type(exc).__name__}: {exc}") from None
        if response.status_code != 200:
            message = f"{method} {path} answered {response.status_code}: {response.text[:300]}"
            if _NON_FINITE in response.text:
                raise NonFiniteLogprobsError(message)
            raise EngineError(message)
        return response


def _token_logprob(raw: Mapping[str, Any]) -> TokenLogprob:
    top = {alt["token"]: alt.get("logprob") for alt in raw.get("top_logprobs") or []}
    return TokenLogprob(raw["token"], raw.get("logprob"), top)


def scored_position(position: Mapping[str, Any] | None, token: int) -> tuple[float | None, float | None]:
    """One position of prompt_logprobs ({"<id>": {"logprob": ...}, ...}): the token's logprob and the best one."""
    if not position:
        return None, None
    values = {key: entry.get("logprob") for key, entry in position.items() if isinstance(entry, Mapping)}
    own = values.get(str(token))
    present = [float(v) for v in values.values() if v is not None]
    return (float(own) if own is not None else None), (max(present) if present else None)


def _completion(
    text: str,
    choice: Mapping[str, Any],
    body: Mapping[str, Any],
    tokens: tuple[TokenLogprob, ...],
    prompt_holder: Mapping[str, Any],
) -> Completion:
    """`prompt_holder` is where the server put prompt_token_ids: the body for chat, the choice for completions."""
    usage = body.get("usage") or {}
    return Completion(
        text,
        choice.get("finish_reason"),
        int(usage.get("prompt_tokens", 0)),
        int(usage.get("completion_tokens", 0)),
        tokens,
        body,
        tuple(int(i) for i in choice.get("token_ids") or ()),
        tuple(int(i) for i in prompt_holder.get("prompt_token_ids") or ()),
    )
