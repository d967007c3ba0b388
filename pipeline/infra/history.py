"""The performance history: an embedded SQLite database, one row per healthy sample, with a versioned schema.

Only healthy measurements enter it: numbers from a throttled or loaded host would teach the
change detector that a sick night is normal. Each row keeps its run, night, host, commits, the
health facts it was measured under and the verdict its cell got that night: the baseline is made
of accepted nights only, so a regressed night never becomes the new normal.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import HistoryError
from pipeline.status import Status

SCHEMA_VERSION = 2
# SQLite locks the file while one run writes; another (a bench beside a night) waits this long, never corrupts it
LOCK_WAIT_S = 120.0
# Verdicts whose nights make the baseline. "legacy" marks rows kept before verdicts were (schema 1), which were
# the baseline then: read back as PASS.
ACCEPTED = frozenset({Status.PASS, Status.XFAIL})
LEGACY = "legacy"
_ACCEPTED_ROWS = (*sorted(status.value for status in ACCEPTED), LEGACY)  # as the rows spell them
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS samples (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    night TEXT NOT NULL,
    hardware TEXT NOT NULL,
    host TEXT NOT NULL,
    entry TEXT NOT NULL,
    cell TEXT NOT NULL,
    metric TEXT NOT NULL,
    value REAL NOT NULL,
    build TEXT NOT NULL,
    commits TEXT NOT NULL,
    health TEXT NOT NULL,
    verdict TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS samples_series ON samples (hardware, entry, cell, metric, night);
"""


@dataclass(frozen=True)
class Sample:
    """One healthy measurement to keep."""

    run_id: str
    night: str
    hardware: str
    host: str
    entry: str
    cell: str
    metric: str
    value: float
    build: str = "candidate"  # or "last-good" for the paired runs of a confirmation
    commits: Mapping[str, str] = field(default_factory=dict)
    health: Mapping[str, Any] = field(default_factory=dict)
    verdict: Status = Status.PASS  # the cell's status that night; only accepted nights make the baseline


@dataclass(frozen=True)
class Night:
    """The samples one night kept for one series."""

    night: str
    run_id: str
    values: tuple[float, ...]
    verdict: Status = Status.PASS


class History:
    """The history database at `path` (created on first use)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with closing(sqlite3.connect(self.path, timeout=LOCK_WAIT_S)) as connection, connection:
            connection.executescript(_SCHEMA)
            row = connection.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is None:
                connection.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            elif int(row[0]) == 1:
                _migrate_from_1(connection)
            elif int(row[0]) != SCHEMA_VERSION:
                raise HistoryError(
                    f"{self.path} has schema version {row[0]}, this spark-nightly reads {SCHEMA_VERSION}"
                )
            yield connection

    def record(self, samples: Sequence[Sample]) -> int:
        """Keep these samples, all in one transaction; returns how many."""
        rows = [
            (
                s.run_id,
                s.night,
                s.hardware,
                s.host,
                s.entry,
                s.cell,
                s.metric,
                float(s.value),
                s.build,
                json.dumps(dict(s.commits), sort_keys=True),
                json.dumps(dict(s.health), sort_keys=True, default=str),
                Status(s.verdict).value,
            )
            for s in samples
        ]
        with self._connect() as connection:
            connection.executemany(
                "INSERT INTO samples (run_id, night, hardware, host, entry, cell, metric, value, build, commits,"
                " health, verdict) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
        return len(rows)

    def nights(  # noqa: PLR0913 -- one query's filters, each by keyword
        self,
        *,
        hardware: str,
        entry: str,
        cell: str,
        metric: str,
        host: str | None = None,
        build: str = "candidate",
        before: str | None = None,
        before_run: str | None = None,
        limit: int = 60,
        accepted_only: bool = False,
    ) -> list[Night]:
        """The latest `limit` nights of one series (oldest first), optionally for one host, before a night (with
        `before_run`, that night's earlier runs too: a night run twice), and only the nights whose verdict accepted
        the build (the baseline)."""
        query = (
            "SELECT night, run_id, value, verdict FROM samples"
            " WHERE hardware = ? AND entry = ? AND cell = ? AND metric = ? AND build = ?"
        )
        args: list[Any] = [hardware, entry, cell, metric, build]
        if accepted_only:
            query += f" AND verdict IN ({', '.join('?' * len(_ACCEPTED_ROWS))})"
            args += _ACCEPTED_ROWS
        if host is not None:
            query += " AND host = ?"
            args.append(host)
        if before is not None and before_run is not None:
            query += " AND (night < ? OR (night = ? AND run_id < ?))"
            args += [before, before, before_run]
        elif before is not None:
            query += " AND night < ?"
            args.append(before)
        with self._connect() as connection:
            rows = connection.execute(query + " ORDER BY night, run_id, id", args).fetchall()
        grouped: dict[tuple[str, str], list[float]] = {}
        verdicts: dict[tuple[str, str], Status] = {}
        for night, run_id, value, verdict in rows:
            grouped.setdefault((night, run_id), []).append(float(value))
            verdicts[(night, run_id)] = Status.PASS if verdict == LEGACY else Status(verdict)
        nights = [Night(n, run, tuple(values), verdicts[(n, run)]) for (n, run), values in grouped.items()]
        return nights[-limit:]


def _migrate_from_1(connection: sqlite3.Connection) -> None:
    """Schema 1 had no verdicts: its rows were the baseline, so they stay in it as "legacy"."""
    connection.execute("ALTER TABLE samples ADD COLUMN verdict TEXT NOT NULL DEFAULT 'legacy'")
    connection.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
