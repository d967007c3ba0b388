"""Progress lines for people watching a run: a callback stages take, printing to stderr by default."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

Say = Callable[[str], None]


def quiet(message: str) -> None:
    """Say nothing (tests, library use)."""


def to_stderr(message: str) -> None:
    """One timestamped line on stderr, flushed at once so CI logs show it live."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)
