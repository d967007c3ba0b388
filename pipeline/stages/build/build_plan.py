"""The BuildPlan: every commit a night builds, as versioned JSON; nothing after resolve reads a branch name."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import SparkNightlyError
from pipeline.infra.files import write_atomically

PLAN_VERSION = 1


@dataclass(frozen=True)
class PullRequestPlan:
    """What became of one selected PR."""

    number: int
    head: str  # the commit grafted (the pin when pinned)
    current_head: str  # the PR's head on the remote tonight ("" when it has none)
    pinned: bool
    merge_base: str
    status: str  # grafted | skipped | dropped
    reason: str
    kept_main_side: tuple[str, ...] = ()  # test/doc files whose conflict kept main's version


@dataclass(frozen=True)
class SourcePlan:
    """One source pinned: main's commit and the commit built (main plus grafts)."""

    name: str
    repo: str
    ref: str  # as asked; informational only
    main_commit: str
    main_date: str
    commit: str
    tree: str
    pull_requests: tuple[PullRequestPlan, ...]

    @property
    def grafted(self) -> tuple[int, ...]:
        return tuple(pr.number for pr in self.pull_requests if pr.status == "grafted")

    @property
    def dropped(self) -> tuple[PullRequestPlan, ...]:
        return tuple(pr for pr in self.pull_requests if pr.status == "dropped")


@dataclass(frozen=True)
class BuildPlan:
    """Every source of one night, pinned."""

    created: str  # ISO date-time (UTC) of the resolve; the night's date comes from here
    sources: tuple[SourcePlan, ...]

    def source(self, name: str) -> SourcePlan:
        for source in self.sources:
            if source.name == name:
                return source
        raise SparkNightlyError(f"the build plan has no source {name!r}")

    def to_json(self) -> str:
        return json.dumps({"version": PLAN_VERSION} | asdict(self), indent=2, sort_keys=True) + "\n"

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, self.to_json())

    @staticmethod
    def load(path: Path) -> BuildPlan:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise SparkNightlyError(f"cannot read the build plan {path}: {exc}") from None
        if data.get("version") != PLAN_VERSION:
            raise SparkNightlyError(f"{path}: build plan version {data.get('version')}, expected {PLAN_VERSION}")
        return BuildPlan(created=data["created"], sources=tuple(_source(s) for s in data["sources"]))


def _source(data: dict[str, Any]) -> SourcePlan:
    prs = tuple(
        PullRequestPlan(**(pr | {"kept_main_side": tuple(pr["kept_main_side"])})) for pr in data["pull_requests"]
    )
    return SourcePlan(**(data | {"pull_requests": prs}))
