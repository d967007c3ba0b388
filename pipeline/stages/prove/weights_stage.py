"""The weights stage: before any entry runs, its weights are in the cache (Hub repositories at their pinned commit,
package weights converted), every file verified, and each file's sha256 kept for the release manifest."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pipeline.config.matrix import ModelEntry
from pipeline.errors import EngineError, SparkNightlyError
from pipeline.infra import hub
from pipeline.infra.cache_lock import exclusive
from pipeline.infra.weights import MANIFEST, ensure_package_weights
from pipeline.infra.workshop import Workshop
from pipeline.places import CacheDir
from pipeline.progress import Say, quiet
from pipeline.stages.prove.boot import hf_cache


@dataclass(frozen=True)
class EntryWeights:
    """One entry's weights as the stage left them: every file's sha256, or the problem that keeps it from serving."""

    entry: str
    source: str  # hub | package
    files: Mapping[str, str] = field(default_factory=dict)  # file name -> sha256
    repo: str = ""
    revision: str = ""  # the commit served
    package: str = ""
    problem: str = ""  # set: the entry cannot be served, and ends ABORTED at the weights stage
    duration_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """As the release manifest records it."""
        data: dict[str, Any] = {"source": self.source, "files": dict(sorted(self.files.items()))}
        if self.repo:
            data |= {"repo": self.repo, "revision": self.revision}
        if self.package:
            data["package"] = self.package
        return data


def prepare_weights(
    entries: Iterable[ModelEntry],
    shop: Workshop,
    log_dir: Path,
    *,
    offline: bool | None = None,
    endpoint: str | None = None,
) -> dict[str, EntryWeights]:
    """Each entry's weights made ready and verified; one entry's problem is its own, never the night's crash.

    `offline` (default: HF_HUB_OFFLINE) uses a complete cache as it is and never reaches the Hub, found at
    `endpoint` (default: huggingface_hub's). Weights from a local path are served as they are, unrecorded."""
    say, cache_dir = shop.say, shop.cache_dir
    forbidden = shop.supply.offline or (hub.offline() if offline is None else offline)
    ready: dict[str, EntryWeights] = {}
    for entry in entries:
        if entry.weights.source == "path":
            continue
        started = time.monotonic()
        try:
            if entry.weights.source == "hub":
                weights = hub_weights(entry, cache_dir, say=say, offline=forbidden, endpoint=endpoint)
            else:
                weights = package_weights(entry, shop, log_dir)
        except SparkNightlyError as exc:
            say(f"weights {entry.id}: cannot be served: {exc}")
            weights = EntryWeights(entry.id, entry.weights.source, problem=str(exc))
        ready[entry.id] = replace(weights, duration_s=time.monotonic() - started)
    return ready


def hub_weights(
    entry: ModelEntry, cache_dir: Path, *, say: Say = quiet, offline: bool = False, endpoint: str | None = None
) -> EntryWeights:
    """The entry's repository at its revision in the cache that launches mount, downloaded once, verified each time."""
    cache = hub.hub_dir(hf_cache(cache_dir))
    shown = f"{entry.model}@{entry.revision or 'main'}"
    with exclusive(CacheDir(cache_dir).hub_locks / hub.repo_folder(cache, entry.model).name):
        try:
            snapshot = hub.verify(cache, entry.model, entry.revision, ignore=entry.weights.ignore)
        except EngineError as lacking:
            if offline:
                raise EngineError(
                    f"{lacking}, and the Hub is off (HF_HUB_OFFLINE): run once with network, or fill the cache with "
                    f"`hf download {entry.model} --revision {entry.revision or 'main'} --cache-dir {cache}`"
                ) from None
            say(f"weights {entry.id}: downloading {shown} into {cache} ({lacking})")
            started = time.monotonic()
            hub.download(cache, entry.model, entry.revision, ignore=entry.weights.ignore, endpoint=endpoint)
            snapshot = hub.verify(cache, entry.model, entry.revision, ignore=entry.weights.ignore)
            say(f"weights {entry.id}: downloaded {shown} in {time.monotonic() - started:.0f} s")
    commit = f" (commit {snapshot.commit})" if snapshot.commit != entry.revision else ""
    say(f"weights {entry.id}: {shown} verified, {len(snapshot.files)} files{commit}")
    return EntryWeights(entry.id, "hub", snapshot.files, repo=entry.model, revision=snapshot.commit)


def served_folder(entry: ModelEntry, cache_dir: Path) -> Path | None:
    """Where a Hub entry's pinned snapshot lies in the cache (its server reports only the repository id), for the
    identity check's file hashes; None for other entries, whose served root is their folder."""
    if entry.weights.source != "hub" or not entry.revision:
        return None
    return hub.snapshot_folder(hub.hub_dir(hf_cache(cache_dir)), entry.model, entry.revision)


def package_weights(entry: ModelEntry, shop: Workshop, log_dir: Path) -> EntryWeights:
    """A package entry's converted folder (made once, verified on every use) and the hashes its manifest lists."""
    folder = ensure_package_weights(entry, shop, log_dir)
    files = json.loads((folder / MANIFEST).read_text())["files"]
    return EntryWeights(entry.id, "package", files, package=entry.weights.package or "")
