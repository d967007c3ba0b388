"""Suspect changes: the commits of main since the last good night (with a compare link), and tonight's subsets.

The last good night's commits are kept in `paths.state/last_good.json` (LastGoodNight: written here when a built
night passes, read here for every use), so a failing night can name the range `last good..tonight` of every source
that moved.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import HistoryError
from pipeline.infra.files import read_versioned, write_atomically
from pipeline.infra.git import Git, mirror_dir
from pipeline.stages.aftermath.culprit import PullRef
from pipeline.stages.build.build_plan import BuildPlan
from pipeline.stages.build.resolve import Source

_GITHUB = re.compile(r"^(?:https://github\.com/|git@github\.com:)(?P<slug>[^/]+/[^/]+?)(?:\.git)?/?$")
_SUBJECTS_SHOWN = 5


@dataclass(frozen=True)
class CommitRange:
    """main's commits of one source between the last good night and tonight."""

    source: str
    old: str
    new: str
    count: int | None  # None when the old commit is not in the mirror (history rewritten)
    subjects: tuple[str, ...]
    compare_url: str | None

    def describe(self) -> str:
        if self.old == self.new:
            return f"{self.source} main unchanged since the last good night ({self.new[:12]})"
        size = f"{self.count} commit(s)" if self.count is not None else "an unknown number of commits"
        text = f"{self.source} main {self.old[:12]}..{self.new[:12]} ({size})"
        if self.compare_url:
            text += f": {self.compare_url}"
        if self.subjects:
            more = (
                f"; and {self.count - len(self.subjects)} more"
                if self.count and self.count > len(self.subjects)
                else ""
            )
            text += " [" + "; ".join(self.subjects) + more + "]"
        return text


def github_page(repo: str) -> str | None:
    """The github.com page of a repository URL; None for a repository hosted elsewhere."""
    match = _GITHUB.match(repo)
    return f"https://github.com/{match['slug']}" if match else None


def compare_url(repo: str, old: str, new: str) -> str | None:
    """GitHub's compare page of two commits."""
    page = github_page(repo)
    return f"{page}/compare/{old}...{new}" if page else None


def pull_url(repo: str, number: int) -> str | None:
    page = github_page(repo)
    return f"{page}/pull/{number}" if page else None


def commit_range(mirror: Git, source: str, repo: str, old: str, new: str) -> CommitRange:
    if old == new or not mirror.has_commit(old):
        return CommitRange(source, old, new, 0 if old == new else None, (), compare_url(repo, old, new))
    count = int(mirror("rev-list", "--count", f"{old}..{new}"))
    subjects = mirror("log", "--format=%h %s", f"-{_SUBJECTS_SHOWN}", f"{old}..{new}").splitlines()
    return CommitRange(source, old, new, count, tuple(subjects), compare_url(repo, old, new))


LAST_GOOD_VERSION = 1


@dataclass(frozen=True)
class GoodCommits:
    """One source as the last good night built it: its main and the commit built (main, or a graft on it)."""

    repo: str
    main_commit: str
    commit: str


@dataclass(frozen=True)
class LastGoodNight:
    """The last built night that passed: its date and each source's commits."""

    night: str
    sources: Mapping[str, GoodCommits]

    @staticmethod
    def of(plan: BuildPlan, night: str) -> LastGoodNight:
        return LastGoodNight(night, {s.name: GoodCommits(s.repo, s.main_commit, s.commit) for s in plan.sources})

    def write(self, path: Path) -> None:
        sources = {name: vars(good) for name, good in self.sources.items()}
        data = {"version": LAST_GOOD_VERSION, "night": self.night, "sources": sources}
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, json.dumps(data, indent=2, sort_keys=True) + "\n")

    @staticmethod
    def read(path: Path) -> LastGoodNight | None:
        """The record, or None where no built night has passed yet; a damaged one is said with its file."""
        if not path.exists():
            return None
        try:
            data = read_versioned(path, LAST_GOOD_VERSION)
            sources = {
                str(name): GoodCommits(str(s["repo"]), str(s["main_commit"]), str(s["commit"]))
                for name, s in data["sources"].items()
            }
            return LastGoodNight(str(data["night"]), sources)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise HistoryError(
                f"{path}: not a last good night's record ({type(exc).__name__}: {exc}); remove it and the next "
                "built night that passes writes it again"
            ) from exc


def record_last_good(path: Path, plan: BuildPlan, night: str) -> None:
    """Remember tonight's commits as the last good ones (called only when a built night passes)."""
    LastGoodNight.of(plan, night).write(path)


def ranges_since_last_good(path: Path, plan: BuildPlan, cache_dir: Path) -> tuple[str | None, list[CommitRange]]:
    """(the last good night, each source's range since then); no record gives (None, [])."""
    last = LastGoodNight.read(path)
    if last is None:
        return None, []
    ranges = []
    for source in plan.sources:
        before = last.sources.get(source.name)
        if before is None:
            continue
        mirror = Git(mirror_dir(cache_dir, source.repo))
        ranges.append(commit_range(mirror, source.name, source.repo, before.main_commit, source.main_commit))
    return last.night, ranges


def describe_main_suspects(path: Path, plan: BuildPlan, cache_dir: Path) -> str:
    night, ranges = ranges_since_last_good(path, plan, cache_dir)
    if night is None:
        return "main's commits since the last good night (no good night recorded yet)"
    return f"since the last good night {night}: " + "; ".join(r.describe() for r in ranges)


def grafted_prs(plan: BuildPlan) -> list[PullRef]:
    return [PullRef(s.name, number) for s in plan.sources for number in s.grafted]


def subset_sources(plan: BuildPlan, keep: Iterable[PullRef], template: Iterable[Source]) -> list[Source]:
    """Tonight's sources pinned to tonight's main commits, with only `keep` of the grafted PRs at tonight's heads.

    Resolving these again gives exactly tonight's commits minus the PRs left out: nothing upstream can move.
    """
    kept = set(keep)
    by_name = {s.name: s for s in template}
    sources = []
    for planned in plan.sources:
        asked = by_name[planned.name]
        specs = tuple(
            f"{pr.number}@{pr.head}"
            for pr in planned.pull_requests
            if pr.status == "grafted" and PullRef(planned.name, pr.number) in kept
        )
        sources.append(Source(planned.name, planned.repo, planned.main_commit, specs, asked.settings_key))
    return sources
