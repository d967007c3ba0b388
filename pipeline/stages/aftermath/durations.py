"""How long each step of the last good night took: the guide for tonight's ETA (`paths.state/durations.json`)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from pipeline.infra.cache_lock import exclusive
from pipeline.infra.files import write_atomically


class Durations:
    """Seconds per step (an entry id, or a stage such as `candidate`), as last measured."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._seconds = _read(path)

    def expected(self, step: str) -> float | None:
        return self._seconds.get(step)

    def expected_total(self, steps: Iterable[str]) -> float:
        """The sum over the steps with a record (0 when none has one)."""
        return sum(self._seconds.get(step, 0.0) for step in steps)

    def record(self, step: str, seconds: float) -> None:
        """Re-read under the file's lock, then write: steps another run recorded meanwhile are kept."""
        with exclusive(self._path):
            self._seconds = _read(self._path) | {step: round(seconds, 1)}
            write_atomically(self._path, json.dumps({"version": 1, "seconds": self._seconds}, indent=2, sort_keys=True))


def _read(path: Path) -> dict[str, float]:
    try:
        data = json.loads(path.read_text()) if path.exists() else {}
    except ValueError:  # a torn or hand-edited file only costs tonight its ETA
        data = {}
    return {str(k): float(v) for k, v in data.get("seconds", {}).items() if isinstance(v, int | float)}
