"""Git through its command line: mirrors kept between nights, worktrees, and the few plumbing calls grafting needs."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import ProcessError
from pipeline.infra import procs
from pipeline.places import CacheDir

_QUICK_S = 120.0
_FETCH_S = 3600.0  # a first clone of vLLM moves a few hundred MB
_FETCH_SILENCE_S = 600.0
SHA_RE = re.compile(r"^[0-9a-f]{40}$")

# Grafts are commits we make; a fixed identity and the base commit's date make the same inputs give the same SHA.
_IDENTITY = {"GIT_AUTHOR_NAME": "spark-nightly", "GIT_AUTHOR_EMAIL": "spark-nightly@localhost"}


def _environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env |= {"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "GIT_ADVICE": "0"}  # never wait on a prompt; parseable text
    return env | dict(extra or {})


@dataclass(frozen=True)
class Git:
    """One repository (bare mirror or worktree)."""

    path: Path

    def __call__(self, *args: str, env: Mapping[str, str] | None = None, check: bool = True) -> str:
        return procs.capture(
            ["git", "-C", str(self.path), *args], timeout_s=_QUICK_S, env=_environment(env), check=check
        ).strip()

    def paths(self, command: str, *args: str) -> list[str]:
        """A listing of paths (`diff --name-only`, `ls-tree`) exactly as git stores them: asked with -z and split on
        NUL. Without -z git quotes a path with non-ASCII or '"' characters ('"csrc/k\\303\\251rnel.cu"'), which
        then starts with no prefix a rule knows: a native source read as Python."""
        return [path for path in self(command, "-z", *args).split("\0") if path]

    def succeeds(self, *args: str) -> bool:
        try:
            self(*args)
        except ProcessError:
            return False
        return True

    def has_commit(self, sha: str) -> bool:
        return self.succeeds("cat-file", "-e", f"{sha}^{{commit}}")

    def is_ancestor(self, older: str, newer: str) -> bool:
        return self.succeeds("merge-base", "--is-ancestor", older, newer)

    def object_count(self) -> int:
        """Loose plus packed objects: what a fetch added, read before and after."""
        fields = dict(line.split(": ", 1) for line in self("count-objects", "-v").splitlines())
        return int(fields["count"]) + int(fields["in-pack"])

    def commit_as_us(self, *args: str, date: str) -> str:
        """Run a committing command with the fixed identity and date; returns its output."""
        dated = _IDENTITY | {
            "GIT_COMMITTER_NAME": _IDENTITY["GIT_AUTHOR_NAME"],
            "GIT_COMMITTER_EMAIL": _IDENTITY["GIT_AUTHOR_EMAIL"],
            "GIT_AUTHOR_DATE": date,
            "GIT_COMMITTER_DATE": date,
        }
        return self(*args, env=dated)


def mirror_dir(cache_dir: Path, url: str) -> Path:
    """Where the mirror of `url` lives: readable, and unique per URL."""
    tail = re.sub(r"[^A-Za-z0-9._-]+", "-", url.rstrip("/").removesuffix(".git"))[-48:].strip("-.")
    return CacheDir(cache_dir).mirrors / f"{tail}-{hashlib.sha256(url.encode()).hexdigest()[:8]}.git"


def ensure_mirror(url: str, cache_dir: Path) -> Git:
    """The bare mirror of `url`, made on first use and kept between nights so a fetch moves only new objects."""
    path = mirror_dir(cache_dir, url)
    if not (path / "HEAD").exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        procs.capture(["git", "init", "--quiet", "--bare", str(path)], timeout_s=_QUICK_S, env=_environment())
    git = Git(path)
    git("config", "remote.origin.url", url)  # follow a changed URL in the settings
    git("config", "gc.auto", "0")  # no surprise repacking mid-night; the refs we keep are listed under refs/
    return git


def remote_refs(git: Git, names: Sequence[str]) -> dict[str, str]:
    """SHA of each ref the remote has among `names` (missing ones are simply absent): one round trip."""
    out = procs.capture(
        ["git", "-C", str(git.path), "ls-remote", "origin", *names], timeout_s=_QUICK_S * 2, env=_environment()
    )
    refs: dict[str, str] = {}
    for line in out.splitlines():
        sha, _, ref = line.partition("\t")
        refs[ref] = sha
    return refs


def fetch(git: Git, refspecs: Sequence[str], log_path: Path) -> None:
    """One fetch for every refspec, logged; only objects the mirror lacks cross the network."""
    procs.run(
        ["git", "-C", str(git.path), "fetch", "--no-tags", "--progress", "origin", *refspecs],
        log_path,
        timeout_s=_FETCH_S,
        inactivity_s=_FETCH_SILENCE_S,
        env=_environment(),
    )


def add_worktree(git: Git, where: Path, commit: str) -> Git:
    """A detached checkout of `commit`; remove it with remove_worktree."""
    git("worktree", "prune")  # a crash may have left a stale registration at the same place
    git("worktree", "add", "--quiet", "--force", "--detach", str(where), commit)
    return Git(where)


def remove_worktree(git: Git, where: Path) -> None:
    git("worktree", "remove", "--force", str(where), check=False)
    git("worktree", "prune")


def commits_between(cache_dir: Path, url: str, older: str, newer: str) -> int | None:
    """How many commits `newer` has that `older` has not, by the mirror of `url` (None: no mirror, or either commit
    unknown to it)."""
    path = mirror_dir(cache_dir, url)
    if not (path / "HEAD").exists():
        return None
    try:
        return int(Git(path)("rev-list", "--count", f"{older}..{newer}"))
    except (ProcessError, ValueError):
        return None
