"""Resolve: pin each source's ref and selected PRs to commits, graft the PRs onto main, and write the BuildPlan."""

from __future__ import annotations

import contextlib
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from pipeline.errors import ConfigError, ConfigIssue, ProcessError
from pipeline.infra import git as gitlib
from pipeline.infra.git import SHA_RE, Git
from pipeline.progress import Say, quiet
from pipeline.stages.build.build_plan import BuildPlan, PullRequestPlan, SourcePlan

GraftStatus = Literal["grafted", "skipped", "dropped"]
# Asked of each PR with its family and the paths it changes: why the night cannot take it, or None.
Refusal = Callable[[str, Sequence[str]], str | None]

# A conflict confined to these keeps main's side: tests and docs never change what the wheel does.
_NON_CODE_DIRS = frozenset({"tests", "test", "docs", "doc"})
_NON_CODE_SUFFIXES = frozenset({".md", ".rst"})
_PR_URL = re.compile(r"^https?://[^/]+/(?P<repo>[^/]+/[^/]+)/pull/(?P<number>\d+)/?$")


@dataclass(frozen=True)
class Source:
    """What the settings ask for one source."""

    name: str
    repo: str
    ref: str
    prs: tuple[str, ...]
    settings_key: str  # e.g. sources.vllm.prs, for error messages


@dataclass(frozen=True)
class PullRequest:
    """One selected PR, optionally pinned to a head commit."""

    number: int
    pinned_head: str | None


def parse_pull_request(spec: str, source: Source) -> PullRequest:
    """`123`, `#123`, a PR URL of the source's repository, each optionally followed by `@<40-hex head>`."""
    text, _, pin = spec.strip().partition("@")
    pin = pin.strip().lower()

    def bad(why: str) -> ConfigError:
        return ConfigError([ConfigIssue(source.settings_key, 0, 0, "", f"{spec!r}: {why}")])

    if pin and not SHA_RE.match(pin):
        raise bad("a pinned head must be a full 40-character commit SHA")
    if match := _PR_URL.match(text):
        if _repo_slug(match["repo"]) != _repo_slug(source.repo):
            raise bad(f"this PR belongs to {match['repo']}, not to {source.repo}")
        return PullRequest(int(match["number"]), pin or None)
    number = text.removeprefix("#")
    if not number.isdigit() or int(number) == 0:
        raise bad("write a PR as a number, #number or its URL, optionally with @<head sha>")
    return PullRequest(int(number), pin or None)


def _repo_slug(url: str) -> str:
    path = url.rstrip("/").removesuffix(".git")
    return "/".join(path.split("/")[-2:]).lower()


def is_non_code(path: str) -> bool:
    """True for files under a tests or docs folder, and for prose files anywhere."""
    pure = PurePosixPath(path)
    return bool(_NON_CODE_DIRS.intersection(pure.parts[:-1])) or pure.suffix in _NON_CODE_SUFFIXES


def resolve_sources(
    sources: Sequence[Source],
    *,
    cache_dir: Path,
    work_dir: Path,
    created: str,
    refuse: Refusal | None = None,
    say: Say = quiet,
) -> BuildPlan:
    """Fetch each source once into its mirror, pin every commit, graft the PRs (but those `refuse` names a reason
    for: dropped with it), and return the plan."""
    requests = {source.name: [parse_pull_request(spec, source) for spec in source.prs] for source in sources}
    work_dir = work_dir.absolute()  # git runs in the mirror: a relative worktree path would be the mirror's
    return BuildPlan(
        created=created,
        sources=tuple(
            _resolve_one(source, requests[source.name], cache_dir=cache_dir, work_dir=work_dir, refuse=refuse, say=say)
            for source in sources
        ),
    )


def _resolve_one(
    source: Source, prs: list[PullRequest], *, cache_dir: Path, work_dir: Path, refuse: Refusal | None, say: Say
) -> SourcePlan:
    mirror = gitlib.ensure_mirror(source.repo, cache_dir)
    base_is_commit = bool(SHA_RE.match(source.ref))
    base_ref = source.ref if source.ref.startswith("refs/") else f"refs/heads/{source.ref}"
    wanted = ([] if base_is_commit else [base_ref]) + [f"refs/pull/{pr.number}/head" for pr in prs]
    say(f"{source.name}: asking {source.repo} for {source.ref} and {len(prs)} PR head(s)")
    found = gitlib.remote_refs(mirror, wanted) if wanted else {}
    if not base_is_commit and base_ref not in found:
        key = source.settings_key.removesuffix(".prs") + ".ref"
        raise ConfigError([ConfigIssue(key, 0, 0, "", f"{source.repo} has no {base_ref}: name a branch, tag or SHA")])
    main_sha = source.ref if base_is_commit else found[base_ref]
    before = mirror.object_count()
    refspecs = [f"+{ref}:refs/spark-nightly/{ref.removeprefix('refs/')}" for ref in wanted if ref in found]
    gitlib.fetch(mirror, refspecs + ([main_sha] if base_is_commit else []), work_dir / f"fetch-{source.name}.log")
    # A pinned head the PR has since moved past by a force-push is no longer reachable from its current head.
    for pin in {pr.pinned_head for pr in prs if pr.pinned_head and not mirror.has_commit(pr.pinned_head)}:
        with contextlib.suppress(ProcessError):  # judged per PR below: that one is dropped, the night goes on
            gitlib.fetch(mirror, [pin], work_dir / f"fetch-{source.name}-{pin[:12]}.log")
    say(f"{source.name}: {source.ref} is {main_sha[:12]}; the fetch added {mirror.object_count() - before} objects")
    date = mirror("show", "-s", "--format=%cI", main_sha)
    results, head = _graft_all(
        mirror,
        prs,
        main_sha,
        found,
        work_dir / f"graft-{source.name}",
        date=date,
        refusal=_asker(refuse, source.name),
        say=say,
    )
    mirror("update-ref", f"refs/spark-nightly/builds/{head}", head)  # keeps the graft from any gc
    return SourcePlan(
        name=source.name,
        repo=source.repo,
        ref=source.ref,
        main_commit=main_sha,
        main_date=date,
        commit=head,
        tree=mirror("rev-parse", f"{head}^{{tree}}"),
        pull_requests=tuple(results),
    )


def _graft_all(
    mirror: Git,
    prs: list[PullRequest],
    main_sha: str,
    found: dict[str, str],
    worktree: Path,
    *,
    date: str,
    refusal: Callable[[Sequence[str]], str | None] | None,
    say: Say,
) -> tuple[list[PullRequestPlan], str]:
    """Each PR grafted in turn on main in a checkout of its own, and the commit they make; main itself when there is
    no PR (a checkout of vLLM's tree, about 4 s of a night on the CPU runner, would graft nothing)."""
    if not prs:
        return [], main_sha
    shutil.rmtree(worktree, ignore_errors=True)
    tree = gitlib.add_worktree(mirror, worktree, main_sha)
    try:
        results = [_graft(tree, mirror, pr, main_sha, found, date=date, refusal=refusal, say=say) for pr in prs]
        return results, tree("rev-parse", "HEAD")
    finally:
        gitlib.remove_worktree(mirror, worktree)


def _asker(refuse: Refusal | None, family: str) -> Callable[[Sequence[str]], str | None] | None:
    return None if refuse is None else (lambda changed: refuse(family, changed))


def _graft(
    tree: Git,
    mirror: Git,
    pr: PullRequest,
    main_sha: str,
    found: dict[str, str],
    *,
    date: str,
    refusal: Callable[[Sequence[str]], str | None] | None = None,
    say: Say,
) -> PullRequestPlan:
    current = found.get(f"refs/pull/{pr.number}/head")
    head = pr.pinned_head or current

    def outcome(status: GraftStatus, reason: str, merge_base: str = "", kept: tuple[str, ...] = ()) -> PullRequestPlan:
        say(f"  #{pr.number}: {status}: {reason}")
        return PullRequestPlan(
            pr.number, head or "", current or "", bool(pr.pinned_head), merge_base, status, reason, kept
        )

    if head is None:
        return outcome("dropped", "the repository has no such pull request")
    if not mirror.has_commit(head):
        return outcome("dropped", f"pinned head {head[:12]} cannot be fetched")
    if mirror.is_ancestor(head, main_sha):
        return outcome("skipped", f"head {head[:12]} is already contained in main")
    merge_base = mirror("merge-base", main_sha, head)
    if refusal is not None and (why := refusal(mirror.paths("diff", "--name-only", merge_base, head))):
        return outcome("dropped", why, merge_base)
    # The PR as one change from its merge-base: cherry-picking that replays exactly its diff, three-way.
    squashed = mirror.commit_as_us(
        "commit-tree", f"{head}^{{tree}}", "-p", merge_base, "-m", f"#{pr.number} at {head}", date=date
    )
    moved = current if pr.pinned_head and current and current != head else ""
    pinned_note = f" (pinned; the PR's head is now {moved[:12]})" if moved else ""
    kept: tuple[str, ...] = ()
    if not tree.succeeds("cherry-pick", "--no-commit", squashed):
        conflicted = tuple(tree.paths("diff", "--name-only", "--diff-filter=U"))
        code = [path for path in conflicted if not is_non_code(path)]
        if code or not conflicted:
            _abandon(tree)
            why = f"conflicts in code: {', '.join(code)}" if code else "the three-way merge failed"
            return outcome("dropped", why + pinned_note, merge_base)
        for path in conflicted:
            _keep_main_side(tree, path)
        kept = conflicted
    tree("cherry-pick", "--quit", check=False)
    if tree.succeeds("diff", "--cached", "--quiet", "HEAD"):
        _abandon(tree)
        return outcome("skipped", "its changes are already in main (empty diff after the merge)", merge_base)
    message = f"spark-nightly: graft #{pr.number} at {head} (merge-base {merge_base})"
    tree.commit_as_us("commit", "--quiet", "--no-verify", "-m", message, date=date)
    kept_note = f"; conflicts in tests/docs kept main's side: {', '.join(kept)}" if kept else ""
    return outcome("grafted", f"head {head[:12]} onto main{pinned_note}{kept_note}", merge_base, kept)


def _keep_main_side(tree: Git, path: str) -> None:
    if tree.succeeds("cat-file", "-e", f"HEAD:{path}"):
        tree("checkout", "HEAD", "--", path)
    else:
        tree("rm", "--quiet", "--force", "--", path)


def _abandon(tree: Git) -> None:
    tree("cherry-pick", "--quit", check=False)
    tree("reset", "--quiet", "--hard", "HEAD")
    tree("clean", "--quiet", "-fd")
