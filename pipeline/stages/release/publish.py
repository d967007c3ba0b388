"""Publish: a passing night's wheels, lock and evidence as a new dated release, resumable, verified, never 'latest'."""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from pipeline.errors import PublishRefused, SparkNightlyError, StoreContentError, TagTaken
from pipeline.infra.files import sha256_of, write_atomically
from pipeline.infra.releases import MAX_ASSET_BYTES, Asset, Release, ReleaseStore
from pipeline.infra.safe_files import read_regular, shown
from pipeline.places import RunDir
from pipeline.progress import Say, quiet
from pipeline.stages.build.build_record import BuildRecord

MANIFEST_VERSION = 1
INDEX_VERSION = 1
MANIFEST = "manifest.json"
_TAG_TRIES = 20
INDEX = "index.json"
_TAG = re.compile(r"^nightly-(\d{8})(?:\.(\d+))?$")


def _schema(name: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads(resources.files("pipeline.config").joinpath("schemas", name).read_text()))


MANIFEST_SCHEMA = _schema("manifest.schema.json")
INDEX_SCHEMA = _schema("index.schema.json")


@dataclass(frozen=True)
class Night:
    """What a night decided, as publishing needs it."""

    night: str  # YYYY-MM-DD
    run_id: str
    passed: bool
    manifest: Mapping[str, Any]  # built by the nightly: plan, lock, host, health, outcomes, links


def inspection_summary(run: RunDir) -> dict[str, Any] | None:
    """What the build, inspection and the lock said of a built night (build.json, inspect.json, lock-notes.json in
    its run directory): how each source was built and why; per wheel its status, the libraries absent on the target
    by design and its notes; the pins the lock replaced."""
    inspected = run.inspection
    if not inspected.exists():
        return None  # a runtime installed from pip: nothing was built or inspected
    report = json.loads(inspected.read_text())
    wheels = [
        {
            "wheel": w["wheel"],
            "status": w["status"],
            "absent_by_design": [lib["member"] for lib in w["libraries"] if lib["status"] == "absent"],
            "notes": w["notes"],
        }
        for w in report["wheels"]
    ]
    notes = run.lock_notes
    lock_notes = json.loads(notes.read_text())["notes"] if notes.exists() else []
    summary = {"wheels": wheels, "notes": report.get("notes", []), "lock_notes": lock_notes}
    if run.build_record.exists():
        builds = BuildRecord.read(run.build_record).builds
        summary["builds"] = [{"family": b.family, "kind": b.kind, "why": b.why, "cached": b.cached} for b in builds]
    return summary


def build_manifest(  # noqa: PLR0913 -- the manifest's fields, each by keyword
    *,
    night: str,
    run_id: str,
    profile: str,
    wheels: Sequence[Path],
    lock: Path,
    plan: Mapping[str, Any] | None,
    host: Mapping[str, Any],
    health: Mapping[str, Any] | None,
    entries: Sequence[Mapping[str, Any]],
    report: str | None = None,
    culprits: Mapping[str, Any] | None = None,
    inspection: Mapping[str, Any] | None = None,
    fixes: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The evidence a release carries (schema: config/schemas/manifest.schema.json), checked before it is used."""
    statuses = {e["status"] for e in entries}
    manifest = {
        "version": MANIFEST_VERSION,
        "night": night,
        "run_id": run_id,
        "profile": profile,
        "verdict": "PASS" if statuses <= {"PASS"} else "XFAIL",
        "wheels": [{"name": w.name, "size": w.stat().st_size, "sha256": sha256_of(w)} for w in wheels],
        "lock": {
            "name": lock.name,
            "sha256": sha256_of(lock),
            "files": sum(1 for line in lock.read_text().splitlines() if line.strip()),
        },
        "plan": dict(plan) if plan is not None else None,
        "host": dict(host),
        "health": dict(health) if health is not None else None,
        "entries": [dict(e) for e in entries],
        "report": report,
    }
    if culprits is not None:
        manifest["culprits"] = dict(culprits)
    if inspection is not None:
        manifest["inspection"] = dict(inspection)
    if fixes:
        manifest["fixes"] = [dict(f) for f in fixes]
    problems = sorted(MANIFEST_SCHEMA.iter_errors(manifest), key=str)
    if problems:
        raise SparkNightlyError(f"the manifest breaks its schema: {problems[0].message}")
    return manifest


def night_order(tag: str) -> tuple[str, int]:
    """Nights sort by date, then by rerun suffix; never by a version string."""
    match = _TAG.match(tag)
    if not match:
        return ("", 0)
    return (match[1], int(match[2] or 1))


def nightly_releases(releases: Sequence[Release], *, published_only: bool = True) -> list[Release]:
    """The nightly releases, oldest night first."""
    found = [r for r in releases if _TAG.match(r.tag) and not (published_only and r.draft)]
    return sorted(found, key=lambda r: night_order(r.tag))


def tag_for(night: str, taken: set[str]) -> str:
    """`nightly-YYYYMMDD`, or with `.2`, `.3` ... for a rerun: a tag is never reused (immutable releases)."""
    base = f"nightly-{night.replace('-', '')}"
    if base not in taken:
        return base
    suffix = 2
    while f"{base}.{suffix}" in taken:
        suffix += 1
    return f"{base}.{suffix}"


def _run_marker(run_id: str) -> str:
    return f"<!-- spark-nightly run {run_id} -->"


# The release body from the night's tag and the last published night (its tag and manifest), if any
NotesWriter = Callable[[str, "tuple[str, Mapping[str, Any]] | None"], str]


def publish_night(
    store: ReleaseStore,
    night: Night,
    files: Sequence[Path],
    *,
    say: Say = quiet,
    keep: bool = False,
    notes: NotesWriter | None = None,
) -> Release:
    """Create (or resume) the night's draft, upload and verify every asset, then publish it.

    A crash at any point is resumed by running again: the draft is found by its run marker, assets
    already uploaded with the right digest are kept, broken-off or mismatching ones are replaced.
    """
    if not night.passed:
        raise PublishRefused(f"night {night.night} (run {night.run_id}) did not pass: nothing is published")
    if problem := next(iter(sorted(MANIFEST_SCHEMA.iter_errors(dict(night.manifest)), key=str)), None):
        raise PublishRefused(f"the manifest breaks its schema ({problem.message}): fetch would refuse the night")
    for path in files:
        if path.stat().st_size >= MAX_ASSET_BYTES:
            raise PublishRefused(f"{path.name} is {path.stat().st_size} bytes: over GitHub's 2 GiB asset limit")
    releases = store.releases()
    mine = [r for r in releases if _run_marker(night.run_id) in r.body]
    if done := [r for r in mine if not r.draft]:
        say(f"publish: run {night.run_id} is already published as {done[0].tag}")
        return done[0]
    if mine:
        release = mine[0]
        say(f"publish: resuming the draft {release.tag}")
    else:
        previous = _last_published(store, releases) if notes is not None else None
        release = _create_draft(store, night, {r.tag for r in releases}, notes, previous)
        say(f"publish: draft {release.tag} created")
    with tempfile.TemporaryDirectory(prefix="spark-nightly-publish-") as scratch:
        manifest = Path(scratch) / MANIFEST
        write_atomically(manifest, json.dumps(dict(night.manifest), indent=2, sort_keys=True) + "\n")
        index = Path(scratch) / INDEX
        entries = _index_entries(store, releases, exclude=release.tag)
        entries.append(_index_entry(release.tag, night, sha256_of(manifest), keep))
        if problem := next(iter(INDEX_SCHEMA.iter_errors(_index(entries))), None):
            raise PublishRefused(f"the night's index would break its schema ({problem.message}): nothing uploaded")
        write_atomically(index, json.dumps(_index(entries), indent=2, sort_keys=True) + "\n")
        for path in [*files, manifest, index]:
            _upload_verified(store, release, path, say)
    published = store.publish(release)
    say(f"publish: {published.tag} published ({len(files) + 2} assets, prerelease, not 'latest')")
    return published


def _create_draft(
    store: ReleaseStore,
    night: Night,
    taken: set[str],
    notes: NotesWriter | None = None,
    previous: tuple[str, Mapping[str, Any]] | None = None,
) -> Release:
    for _ in range(_TAG_TRIES):
        tag = tag_for(night.night, taken)
        text = notes(tag, previous) if notes else f"spark-nightly {night.night}: tested wheels, lock and evidence.\n"
        body = f"{text}\n{_run_marker(night.run_id)}\n"
        try:
            return store.create_draft(tag, f"spark-nightly {night.night}", body)
        except TagTaken:
            taken.add(tag)  # deleted, but immutable releases never give a tag back
    raise SparkNightlyError(f"no free tag for {night.night} after {_TAG_TRIES} tries")


def _last_published(store: ReleaseStore, releases: Sequence[Release]) -> tuple[str, Mapping[str, Any]] | None:
    """The newest published night's tag and manifest, for what changed since it (None: none, or none readable)."""
    for release in reversed(nightly_releases(releases)):
        asset = next((a for a in release.assets if a.name == MANIFEST), None)
        if asset is None:
            continue
        with tempfile.TemporaryDirectory(prefix="spark-nightly-previous-") as scratch:
            store.download(release, asset, Path(scratch) / MANIFEST)
            try:
                return release.tag, parse_store_json(
                    Path(scratch) / MANIFEST, f"{MANIFEST} of {release.tag}", MANIFEST_SCHEMA
                )
            except SparkNightlyError:
                continue  # a damaged night is no baseline for the notes; fetch refuses it on its own
    return None


def _upload_verified(store: ReleaseStore, release: Release, path: Path, say: Say) -> None:
    local = f"sha256:{sha256_of(path)}"
    size = path.stat().st_size
    current = next((r for r in store.releases() if r.id == release.id), release)
    existing = next((a for a in current.assets if a.name == path.name), None)
    if existing is not None:
        if existing.state == "uploaded" and existing.size == size and existing.digest == local:
            say(f"  {path.name}: already uploaded")
            return
        say(f"  {path.name}: replacing a {existing.state} upload ({existing.size} bytes)")
        store.delete_asset(release, existing)
    asset = store.upload(release, path, path.name)
    remote = asset.digest or _digest_by_download(store, release, asset)
    if asset.size != size or remote != local:
        store.delete_asset(release, asset)
        raise SparkNightlyError(
            f"{path.name}: the store holds {asset.size} bytes {remote}, the file is {size} bytes {local}; "
            "deleted, run again to retry"
        )
    say(f"  {path.name}: uploaded and verified ({size} bytes)")


def _digest_by_download(store: ReleaseStore, release: Release, asset: Asset) -> str:
    with tempfile.TemporaryDirectory(prefix="spark-nightly-verify-") as scratch:
        copy = Path(scratch) / asset.name
        store.download(release, asset, copy)
        return f"sha256:{sha256_of(copy)}"


def _index(entries: list[dict[str, Any]]) -> dict[str, Any]:
    ordered = sorted(entries, key=lambda e: night_order(e["tag"]))
    return {"version": INDEX_VERSION, "latest": ordered[-1]["tag"] if ordered else None, "nights": ordered}


def _index_entry(tag: str, night: Night, manifest_sha256: str, keep: bool) -> dict[str, Any]:
    manifest = night.manifest
    outcomes = manifest.get("entries", [])
    summary: dict[str, int] = {}
    for outcome in outcomes:
        summary[outcome["status"]] = summary.get(outcome["status"], 0) + 1
    commits = {s["name"]: s["commit"] for s in (manifest.get("plan") or {}).get("sources", [])}
    return {
        "tag": tag,
        "night": night.night,
        "run_id": night.run_id,
        "commits": commits,
        "verdict": manifest.get("verdict", "PASS"),
        "summary": summary,
        "manifest_sha256": manifest_sha256,
        "keep": keep,
    }


def _index_entries(store: ReleaseStore, releases: Sequence[Release], *, exclude: str) -> list[dict[str, Any]]:
    """The nights listed by the newest published index (each night's release carries the index as of that night)."""
    published = [r for r in nightly_releases(releases) if r.tag != exclude]
    for release in reversed(published):
        asset = next((a for a in release.assets if a.name == INDEX), None)
        if asset is None:
            continue
        with tempfile.TemporaryDirectory(prefix="spark-nightly-index-") as scratch:
            store.download(release, asset, Path(scratch) / INDEX)
            data = parse_store_json(Path(scratch) / INDEX, f"{INDEX} of {release.tag}", INDEX_SCHEMA)
        if release.tag not in {entry["tag"] for entry in data["nights"]}:
            raise StoreContentError(f"{INDEX} of {release.tag} does not list {release.tag} itself")
        alive = {r.tag for r in published}
        return [entry for entry in data["nights"] if entry["tag"] in alive]
    return []


def parse_store_json(path: Path, what: str, schema: Draft202012Validator) -> dict[str, Any]:
    """A JSON document a release store served, held to its schema; StoreContentError naming it otherwise."""
    try:
        data = json.loads(read_regular(path).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise StoreContentError(f"{what} is not valid JSON ({shown(str(exc))})") from None
    problems = sorted(schema.iter_errors(data), key=lambda e: list(e.absolute_path))
    if problems:
        where = "/".join(str(part) for part in problems[0].absolute_path) or "(root)"
        raise StoreContentError(f"{what} breaks its schema at {where}: {shown(problems[0].message[:200])}")
    if not isinstance(data, dict):
        raise StoreContentError(f"{what} is not a JSON object")
    return data


def read_index(store: ReleaseStore) -> dict[str, Any]:
    """The newest published index (an empty one when nothing is published)."""
    releases = store.releases()
    entries = _index_entries(store, releases, exclude="")
    return _index(entries)


def retention_plan(index: Mapping[str, Any], keep_nights: int, keep_tags: Sequence[str] = ()) -> list[str]:
    """Tags to delete: all but the newest `keep_nights` nights and those marked (or named) to keep."""
    nights = sorted(index.get("nights", []), key=lambda e: night_order(e["tag"]))
    kept = {e["tag"] for e in nights[-keep_nights:]} if keep_nights > 0 else set()
    kept |= {e["tag"] for e in nights if e.get("keep")} | set(keep_tags)
    return [e["tag"] for e in nights if e["tag"] not in kept]


def apply_retention(
    store: ReleaseStore, keep_nights: int, keep_tags: Sequence[str] = (), *, dry_run: bool, say: Say = quiet
) -> list[str]:
    """Delete the releases (tags included) that retention does not keep; with dry_run, only say which."""
    doomed = retention_plan(read_index(store), keep_nights, keep_tags)
    by_tag = {r.tag: r for r in store.releases()}
    for tag in doomed:
        if dry_run:
            say(f"retention: would delete {tag}")
        elif tag in by_tag:
            store.delete_release(by_tag[tag])
            say(f"retention: deleted {tag} and its tag")
    return doomed
