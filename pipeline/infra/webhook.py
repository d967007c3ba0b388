"""A chat webhook (Slack- or Discord-compatible) behind one class: JSON posts with bounded retries, the URL kept secret.

The URL of an incoming webhook is its own credential, so it never appears in a message: errors name what was being
delivered and the HTTP status only, and httpx's request log line has the URL masked while a post is under way.
A 429 or a 5xx waits `Retry-After` when given (Slack and Discord both send it), else backs off exponentially; a
timeout or a dropped connection backs off too; any other answer outside 2xx fails at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from pipeline.errors import WebhookError
from pipeline.progress import Say, quiet

_ATTEMPTS = 5
_BACKOFF_S = 1.0
_MAX_WAIT_S = 120.0
_TIMEOUT_S = 30.0
_MASK = "<webhook>"


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


class Webhook:
    """One incoming webhook; `transport` is the seam for tests that answer without a socket."""

    def __init__(
        self,
        url: str,
        *,
        say: Say = quiet,
        sleep: Callable[[float], None] = _sleep,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        try:
            scheme = httpx.URL(url).scheme
        except httpx.InvalidURL:
            scheme = ""
        if scheme not in {"https", "http"}:
            raise WebhookError("alert.webhook_url is not an http(s) URL")  # never quoted: the value is a secret
        self._url = url
        self._say = say
        self._sleep = sleep
        self._transport = transport

    def post(self, payload: dict[str, Any], *, what: str) -> None:
        """POST `payload` as JSON; `what` names it in progress lines and errors."""
        with _masked(self._url), httpx.Client(transport=self._transport, timeout=_TIMEOUT_S) as client:
            for attempt in range(1, _ATTEMPTS + 1):
                problem, wait = self._attempt(client, payload, attempt)
                if problem is None:
                    return
                if wait is None or attempt == _ATTEMPTS:
                    raise WebhookError(f"webhook: cannot deliver {what}: {problem} (attempt {attempt}/{_ATTEMPTS})")
                self._say(f"webhook: {what}: {problem}; retrying in {wait:.0f} s ({attempt}/{_ATTEMPTS - 1})")
                self._sleep(wait)
        raise AssertionError("unreachable")

    def _attempt(self, client: httpx.Client, payload: dict[str, Any], attempt: int) -> tuple[str | None, float | None]:
        """(None, None) when delivered, else what went wrong and how long to wait (None: retrying cannot help)."""
        backoff = _BACKOFF_S * 2.0 ** (attempt - 1)
        try:
            response = client.post(self._url, json=payload)
        except (httpx.TransportError, httpx.InvalidURL) as exc:
            # the exception's text may quote the URL: only its class is shown
            transient = isinstance(exc, httpx.TimeoutException | httpx.NetworkError | httpx.RemoteProtocolError)
            return type(exc).__name__, backoff if transient else None
        if response.is_success:
            return None, None
        problem = f"HTTP {response.status_code} {response.reason_phrase}".strip()
        if response.status_code == 429 or response.is_server_error:
            return problem, _retry_after(response.headers.get("retry-after"), backoff)
        return problem, None


def _retry_after(header: str | None, backoff: float) -> float:
    try:
        return min(max(float(header), 0.0), _MAX_WAIT_S) if header is not None else backoff
    except ValueError:  # an HTTP date: rare enough that the back-off serves
        return backoff


class _MaskURL(logging.Filter):
    def __init__(self, url: str) -> None:
        super().__init__()
        # httpx logs the URL as it normalised it, which may differ from the configured text
        self._forms = sorted({url, str(httpx.URL(url))}, key=len, reverse=True)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if any(form in message for form in self._forms):
            for form in self._forms:
                message = message.replace(form, _MASK)
            record.msg, record.args = message, None
        return True


@contextmanager
def _masked(url: str) -> Iterator[None]:
    """httpx logs every request's full URL at INFO; for a webhook that line would carry the secret."""
    logger = logging.getLogger("httpx")
    mask = _MaskURL(url)
    logger.addFilter(mask)
    try:
        yield
    finally:
        logger.removeFilter(mask)
