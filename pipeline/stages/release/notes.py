"""A published night's release body, for the people who read it: what changed since the last published night, the
matrix with each entry's verdict and headline numbers, what is absent by design, and how to install or roll back."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pipeline.outcome import cells_of

# How many commits lie between two of a source's commits (its mirror knows), or None where it cannot tell
CommitCounter = Callable[[str, str, str], int | None]
SHORT = 12


def release_notes(
    tag: str,
    manifest: Mapping[str, Any],
    previous: tuple[str, Mapping[str, Any]] | None,
    *,
    count: CommitCounter | None = None,
) -> str:
    """The body of the night's release (Markdown), from its manifest and the last published night's."""
    lines = [
        f"## spark-nightly {manifest['night']}: {manifest['verdict']} on the {manifest['profile']} profile",
        "",
        "Wheels that passed every check of the night, their lock with sha256 hashes, and the evidence "
        "(`manifest.json`: commits, hashes, every entry's outcome and numbers).",
        "",
        *_changes(manifest, previous, count),
        *_fixes(manifest),
        *_matrix(manifest),
        *_absent(manifest),
        *_install(tag),
    ]
    return "\n".join(lines).rstrip() + "\n"


def _changes(
    manifest: Mapping[str, Any], previous: tuple[str, Mapping[str, Any]] | None, count: CommitCounter | None
) -> list[str]:
    sources = (manifest.get("plan") or {}).get("sources", [])
    if not sources:
        return []  # a runtime installed from pip: nothing was resolved or built
    before = {s["name"]: s for s in ((previous[1].get("plan") or {}).get("sources", []) if previous else [])}
    heading = f"### What changed since {previous[0]}" if previous else "### What this night built"
    lines = [heading, ""]
    built = {b["family"]: b for b in (manifest.get("inspection") or {}).get("builds", [])}
    for source in sources:
        lines.append(f"- {_source_line(source, before.get(source['name']), count)}")
        if (how := built.get(source["name"])) is not None:
            lines.append(f"  - built: {how['why']}" + (" (from the cache)" if how["cached"] else ""))
        lines += [f"  - {line}" for line in _pull_requests(source)]
    if previous is None:
        lines.append("- the first published night: nothing earlier to compare with")
    return [*lines, ""]


def _fixes(manifest: Mapping[str, Any]) -> list[str]:
    """The regressions this night fixed: what each was blamed on, and what changed since it opened."""
    fixes = manifest.get("fixes") or []
    if not fixes:
        return []
    lines = ["### Fixed tonight", ""]
    for fix in fixes:
        lines.append(f"- {fix['alert']} (failing since {fix['opened']})")
        if fix.get("blamed"):
            lines.append(f"  - blamed on: {fix['blamed']}")
        lines.append(f"  - fixed by: {'; '.join(fix['fixed_by'])}")
    return [*lines, ""]


def _source_line(source: Mapping[str, Any], before: Mapping[str, Any] | None, count: CommitCounter | None) -> str:
    name, repo = source["name"], str(source.get("repo", ""))
    main = source.get("main_commit", source["commit"])
    if before is None:
        return f"{name}: main at {_commit(repo, main)}"
    old = before.get("main_commit", before["commit"])
    if old == main:
        return f"{name}: main unchanged at {_commit(repo, main)}"
    commits = count(repo, old, main) if count is not None and repo else None
    how_many = f"{commits} commits" if commits is not None else "commits not counted (no mirror here)"
    compare = f" ([compare]({_web(repo)}/compare/{old}...{main}))" if _web(repo) else ""
    return f"{name}: main {old[:SHORT]} → {main[:SHORT]}, {how_many}{compare}"


def _pull_requests(source: Mapping[str, Any]) -> list[str]:
    lines = []
    for pr in source.get("pull_requests", []):
        head = str(pr.get("head", ""))[:SHORT]
        if pr.get("status") == "grafted":
            lines.append(f"PR #{pr['number']} grafted at {head}" + (" (pinned)" if pr.get("pinned") else ""))
        else:
            lines.append(f"PR #{pr['number']} {pr.get('status', 'left out')}: {pr.get('reason', '')}".rstrip(": "))
    return lines


def _matrix(manifest: Mapping[str, Any]) -> list[str]:
    lines = ["### The matrix", "", "| entry | verdict | headline numbers |", "|---|---|---|"]
    for entry in manifest.get("entries", []):
        numbers = _headline(entry.get("numbers") or {})
        reason = f" ({entry['reason']})" if entry.get("status") != "PASS" and entry.get("reason") else ""
        lines.append(f"| {entry['id']} | {entry['status']}{_cell_text(reason)} | {numbers or '-'} |")
    return [*lines, ""]


def _headline(numbers: Mapping[str, Any]) -> str:
    """Each cell's tokens/s against its reference; the pairs' B/A where the night paired it with the last build."""
    parts = []
    for cell, found in sorted(cells_of(numbers).items()):
        value, ref = found.deciding, found.ref
        if value is None:
            continue
        text = f"{cell} {value:g} t/s"
        if ref:
            text += f" (ref {ref:g}, {100 * (value / ref - 1):+.1f} %)"
        if found.rerun_value is not None and found.value is not None:
            text += f", measured again (first {found.value:g})"
        if found.b_over_a is not None:
            text += f", B/A {found.b_over_a:.3f} over {found.pairs if found.pairs is not None else '?'} pairs"
        parts.append(text)
    return _cell_text("; ".join(parts))


def _absent(manifest: Mapping[str, Any]) -> list[str]:
    wheels: Sequence[Mapping[str, Any]] = (manifest.get("inspection") or {}).get("wheels", [])
    absent = [(w["wheel"], member) for w in wheels for member in w.get("absent_by_design", [])]
    if not absent:
        return []
    lines = ["### Absent by design", "", "Libraries upstream builds only for other GPUs; no entry of the matrix loads"]
    lines[-1] += " them on this profile (inspection counts them, never refuses the wheel for them):"
    return [*lines, "", *(f"- `{member}` in {wheel}" for wheel, member in absent), ""]


def _install(tag: str) -> list[str]:
    return [
        "### Install, or roll back",
        "",
        "```sh",
        f"spark-nightly fetch --night {tag} --dest nights    # every file checked against manifest.json",
        f"spark-nightly install --from nights/{tag} --venv .venv-vllm    # exactly the lock, nothing resolved",
        f"spark-nightly image --night {tag} --tag vllm-spark:{tag}    # or a runtime image in one step",
        "```",
        "",
        "To roll back, name an earlier night the same way: `spark-nightly list` shows them with their verdicts.",
    ]


def _commit(repo: str, sha: str) -> str:
    web = _web(repo)
    return f"[{sha[:SHORT]}]({web}/commit/{sha})" if web else sha[:SHORT]


def _web(repo: str) -> str:
    """The web address of a GitHub repository's URL, "" for others."""
    if not repo.startswith("https://github.com/"):
        return ""
    return repo.removesuffix(".git").rstrip("/")


def _cell_text(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")
