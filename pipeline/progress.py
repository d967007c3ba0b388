"""Progress for people watching a run: timestamped lines, a live status line on a terminal, folded groups on Actions.

Stages take a `Say` callback (one line of text). The nightly wraps its long steps in `Progress.step`:
on a terminal a status line under the log shows the step, its current stage, the time spent and the
time left (from the same step's duration last night); on GitHub Actions each step is a `::group::`
so the log folds; anywhere else a step says when it starts, with its expected duration, and ends.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Literal, TextIO

Say = Callable[[str], None]
Mode = Literal["tty", "actions", "plain"]
_TICK_S = 1.0


def quiet(message: str) -> None:
    """Say nothing (tests, library use)."""


def to_stderr(message: str) -> None:
    """One timestamped line on stderr, flushed at once so CI logs show it live."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def clock_text(seconds: float) -> str:
    """`42s`, `3:07`, `1:02:03`."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}" if minutes else f"{secs}s"


def plural(count: int, noun: str) -> str:
    """`1 boot pair`, `2 boot pairs`: a count and its noun as messages say them."""
    return f"{count} {noun}{'s' if count != 1 else ''}"


def detect_mode(stream: TextIO) -> Mode:
    if os.environ.get("GITHUB_ACTIONS") == "true":
        return "actions"
    return "tty" if stream.isatty() else "plain"


class Progress:
    """Says lines and shows where a long run stands; safe to call from the status line's ticker thread."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        mode: Mode | None = None,
        clock: Callable[[], float] = time.monotonic,
        stamp: Callable[[], str] = lambda: time.strftime("%H:%M:%S"),
        tick_s: float = _TICK_S,
    ) -> None:
        self._stream = stream or sys.stderr
        self.mode = mode or detect_mode(self._stream)
        self._clock, self._stamp, self._tick_s = clock, stamp, tick_s
        self._lock = threading.Lock()
        self._title = ""
        self._stage = ""
        self._started = 0.0
        self._expected: float | None = None
        self._status_shown = False

    def say(self, message: str) -> None:
        with self._lock:
            self._clear_status()
            self._stream.write(f"[{self._stamp()}] {message}\n")
            self._draw_status()
            self._stream.flush()

    def stage(self, name: str) -> None:
        """The current stage inside a step (shown on the status line, and said)."""
        self._stage = name
        self.say(f"{self._title}: {name}" if self._title else name)

    def status_line(self) -> str:
        elapsed = self._clock() - self._started
        parts = [self._title + (f" · {self._stage}" if self._stage else ""), f"elapsed {clock_text(elapsed)}"]
        if self._expected is not None:
            left = self._expected - elapsed
            parts.append(f"ETA {clock_text(left)}" if left > 0 else f"over last night's {clock_text(self._expected)}")
        return " · ".join(parts)

    @contextmanager
    def step(self, title: str, expected_s: float | None = None) -> Iterator[None]:
        """One long step: folded on Actions, with a live status line on a terminal."""
        self._title, self._stage, self._expected, self._started = title, "", expected_s, self._clock()
        about = f" (last time {clock_text(expected_s)})" if expected_s is not None else ""
        if self.mode == "actions":
            self._write(f"::group::{title}\n")
        else:
            self.say(f"{title}: started{about}")
        done = threading.Event()
        ticker = threading.Thread(target=self._tick, args=(done,), daemon=True) if self.mode == "tty" else None
        if ticker is not None:
            ticker.start()
        try:
            yield
        finally:
            done.set()
            if ticker is not None:
                ticker.join()
            elapsed = clock_text(self._clock() - self._started)
            with self._lock:
                self._clear_status()
                self._title = ""
            if self.mode == "actions":
                self._write(f"::endgroup::\n[{self._stamp()}] {title}: {elapsed}\n")
            else:
                self.say(f"{title}: done in {elapsed}")

    def _tick(self, done: threading.Event) -> None:
        while not done.wait(self._tick_s):
            with self._lock:
                self._clear_status()
                self._draw_status()
                self._stream.flush()

    def _draw_status(self) -> None:
        if self.mode == "tty" and self._title:
            self._stream.write(f"\r\033[K{self.status_line()}")
            self._status_shown = True

    def _clear_status(self) -> None:
        if self._status_shown:
            self._stream.write("\r\033[K")
            self._status_shown = False

    def _write(self, text: str) -> None:
        with self._lock:
            self._stream.write(text)
            self._stream.flush()
