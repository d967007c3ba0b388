"""What boot pairs in turns have taught about each cell on this host: its boot spread, undecided evidence, A's boots.

Kept in `paths.state/pairs.json`, written atomically under its lock, keyed by host and series:
- the boot spread: the squared deviations of each night's boot pair differences around that night's mean, and their
  degrees of freedom (a night of n boot pairs adds n - 1), so the runner's own spread replaces the file's prior as
  its pairs accumulate (detect/evidence.py's records and rule, kept here as JSON);
- the carried evidence: the differences of undecided nights against one A (see detect/sequential.py), cleared
  by a decision;
- A's boots: what each boot of the cell's current A measured in those pairs (its runs), the latest few, so a night
  that serves A itself is judged against the boots of it on this host, not only against the accepted nights (whose
  one boot each may have been a fast one).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.detect.evidence import Carried, SpreadSoFar
from pipeline.infra.cache_lock import exclusive
from pipeline.infra.confirmed import read_book
from pipeline.infra.files import write_atomically

BOOK_VERSION = 1


@dataclass(frozen=True)
class ABoot:
    """One boot of A in a boot pair: the night and run it was made in, and the metric of each of its runs."""

    night: str
    run_id: str
    values: tuple[float, ...]


class PairBook:
    """Reads and writes the boot spread and the carried evidence of each (host, series)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _load(self) -> dict[str, Any]:
        return read_book(self.path, {"version": BOOK_VERSION, "cells": {}})

    def spread(self, host: str, key: str) -> SpreadSoFar:
        cell = self._load()["cells"].get(f"{host}|{key}", {})
        return SpreadSoFar(**cell["spread"]) if "spread" in cell else SpreadSoFar()

    def carried(self, host: str, key: str) -> Carried | None:
        cell = self._load()["cells"].get(f"{host}|{key}", {})
        found = cell.get("carried")
        if not found:
            return None
        return Carried(str(found["a"]), tuple(found["differences"]), tuple(found["nights"]))

    def a_boots(self, host: str, key: str, a: str) -> list[ABoot]:
        """The kept boots of build `a` as the cell's A on this host, oldest first (none when A has moved since)."""
        cell = self._load()["cells"].get(f"{host}|{key}", {})
        found = cell.get("a_boots")
        if not found or found["a"] != a:
            return []
        return [ABoot(str(night), str(run_id), tuple(values)) for night, run_id, values in found["boots"]]

    def record(
        self,
        host: str,
        key: str,
        differences: Sequence[float],
        carry: Carried | None,
        *,
        a: str | None = None,
        a_boots: Sequence[ABoot] = (),
        keep: int = 0,
    ) -> None:
        """Tonight's boot pair differences join the spread; the carried evidence becomes `carry` (None clears it);
        tonight's boots of A (build `a`) join the ones kept of it, the latest `keep`, replacing an earlier A's."""
        with exclusive(self.path):
            data = self._load()
            cell = data["cells"].setdefault(f"{host}|{key}", {})
            cell["spread"] = vars(self.spread(host, key).plus(differences))
            if a is not None and a_boots and keep > 0:
                kept = [*self.a_boots(host, key, a), *a_boots][-keep:]
                cell["a_boots"] = {"a": a, "boots": [[b.night, b.run_id, list(b.values)] for b in kept]}
            if carry is None:
                cell.pop("carried", None)
            else:
                cell["carried"] = {"a": carry.a, "differences": list(carry.differences), "nights": list(carry.nights)}
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(self.path, json.dumps(data, indent=2, sort_keys=True) + "\n")
