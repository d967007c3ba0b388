"""The last confirmed good build (A) of each benchmark cell: what it is, where it is kept, when it became A.

A is the build whose pairs last accepted it for that cell (or the cell's first accepted build), never
merely the last one published: a regression that slips past the screen once must not become its own
reference.
The book lives in `paths.state/confirmed.json`, written atomically; a build stays in it (and its
runtime or image must be kept) for as long as one cell still names it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from pipeline.errors import HistoryError
from pipeline.infra.cache_lock import exclusive
from pipeline.infra.files import write_atomically

BOOK_VERSION = 1
BuildKind = Literal["runtime", "image"]


@dataclass(frozen=True)
class BuildRef:
    """One build that can be served again: a locked local runtime (CPU profile) or a runtime image tag (Spark)."""

    id: str  # the runtime's content key plus its lock digest, or the image tag (itself named by the lock digest)
    kind: BuildKind
    ref: str  # the runtime's folder, or the image tag
    lock_sha256: str
    wheels: Mapping[str, str] = field(default_factory=dict)  # wheel file name -> sha256 (built nights)
    commits: Mapping[str, str] = field(default_factory=dict)
    night: str = ""

    def describe(self) -> str:
        made = f" of {self.night}" if self.night else ""
        return f"{self.kind} {self.id}{made}"

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> BuildRef:
        return BuildRef(
            str(data["id"]),
            "image" if data["kind"] == "image" else "runtime",
            str(data["ref"]),
            str(data["lock_sha256"]),
            dict(data.get("wheels") or {}),
            dict(data.get("commits") or {}),
            str(data.get("night", "")),
        )


@dataclass(frozen=True)
class Acceptance:
    """Why a cell's A is what it is."""

    build: str
    night: str
    run_id: str
    how: str  # "pairs (B/A ...)" or "the first accepted night"


@dataclass(frozen=True)
class LastConfirmed:
    """A cell's last confirmed build (A), and how it was accepted (None for a build named by `bench --pair-with`)."""

    build: BuildRef
    acceptance: Acceptance | None = None

    def describe(self) -> str:
        why = f", accepted {self.acceptance.night} by {self.acceptance.how}" if self.acceptance is not None else ""
        return f"{self.build.describe()}{why}"


def series_key(hardware: str, entry: str, cell: str, metric: str) -> str:
    return f"{hardware}|{entry}|{cell}|{metric}"


def read_book(path: Path, empty: dict[str, Any]) -> dict[str, Any]:
    """A versioned JSON book of the state folder (`empty` before its first write, and the version it must carry)."""
    if not path.exists():
        return empty
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except ValueError as exc:
        raise HistoryError(f"{path} is not valid JSON ({exc}); restore it from a backup or delete it") from exc
    if data.get("version") != empty["version"]:
        raise HistoryError(f"{path} has version {data.get('version')}, this spark-nightly reads {empty['version']}")
    return data


class ConfirmedBook:
    """Reads and moves the A of each cell; every change is written at once, so a crash loses nothing."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _load(self) -> dict[str, Any]:
        return read_book(self.path, {"version": BOOK_VERSION, "builds": {}, "cells": {}})

    def _save(self, data: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path, json.dumps(data, indent=2, sort_keys=True) + "\n")

    def last_good(self, key: str) -> LastConfirmed | None:
        """The cell's A and why, or None before any build was accepted for it."""
        data = self._load()
        cell = data["cells"].get(key)
        if cell is None:
            return None
        return LastConfirmed(BuildRef.from_json(data["builds"][cell["build"]]), Acceptance(**cell))

    def newest_for_entry(self, hardware: str, entry: str) -> BuildRef | None:
        """The most recently accepted A of any of an entry's cells: a build trusted to serve that entry."""
        data = self._load()
        prefix = series_key(hardware, entry, "", "").rsplit("|", 2)[0] + "|"
        cells = sorted((c for k, c in data["cells"].items() if k.startswith(prefix)), key=lambda c: c["night"])
        return BuildRef.from_json(data["builds"][cells[-1]["build"]]) if cells else None

    def builds(self) -> list[BuildRef]:
        """Every build some cell's A is: what pairs may boot on any later night."""
        return [BuildRef.from_json(b) for b in self._load()["builds"].values()]

    def accept(self, key: str, build: BuildRef, *, night: str, run_id: str, how: str) -> None:
        """Tonight's build becomes the cell's A; builds no cell names any more are forgotten.

        Read, changed and written under the book's lock: a bench beside a night (or two shards on one host) each
        keep their cells."""
        with exclusive(self.path):
            data = self._load()
            data["builds"][build.id] = asdict(build)
            data["cells"][key] = asdict(Acceptance(build.id, night, run_id, how))
            named = {cell["build"] for cell in data["cells"].values()}
            data["builds"] = {bid: b for bid, b in data["builds"].items() if bid in named}
            self._save(data)
