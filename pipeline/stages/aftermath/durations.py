"""How long each step of the last good night took: the guide for tonight's ETA (`paths.state/durations.json`)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from pipeline.infra.runtime import write_atomically


class Durations:
    """Seconds per step (an entry id, or a stage such as `candidate`), as last measured."""

    def __init__(self, path: Path) -> None:
        self._path = path
        try:
            data = json.loads(path.read_text()) if path.exists() else {}
        except ValueError:  # a torn or hand-edited file only costs tonight its ETA
            data = {}
        self._seconds: dict[str, float] = {
            str(k): float(v) for k, v in data.get("seconds", {}).items() if isinstance(v, int | float)
        }

    def expected(self, step: str) -> float | None:
        return self._seconds.get(step)

    def expected_total(self, steps: Iterable[str]) -> float:
        """The sum over the steps with a record (0 when none has one)."""
        return sum(self._seconds.get(step, 0.0) for step in steps)

    def record(self, step: str, seconds: float) -> None:
        self._seconds[step] = round(seconds, 1)
        self._path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self._path, json.dumps({"version": 1, "seconds": self._seconds}, indent=2, sort_keys=True))
