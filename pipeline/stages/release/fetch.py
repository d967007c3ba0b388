"""The user side: fetch a night's tested files with every sha256 checked, and install exactly its lock."""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.config.matrix import Profile
from pipeline.errors import SparkNightlyError, TamperedAsset
from pipeline.infra import procs
from pipeline.infra.image import render_dockerfile
from pipeline.infra.releases import Release, ReleaseStore
from pipeline.infra.runtime import lock_directory, sha256_of
from pipeline.progress import Say, quiet
from pipeline.stages.release.publish import MANIFEST, nightly_releases, read_index

LOCK = "lock.txt"
_INSTALL_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class Fetched:
    """A night on disk: its manifest, the lock and every wheel, all verified."""

    tag: str
    folder: Path
    manifest: dict[str, Any]
    lock: Path
    wheels: tuple[Path, ...]


def choose_release(store: ReleaseStore, night: str) -> Release:
    """`latest` (the index's pointer), a date YYYY-MM-DD (its last rerun), or a tag."""
    published = nightly_releases(store.releases())
    if not published:
        raise SparkNightlyError("the release store has no published night")
    if night == "latest":
        wanted = read_index(store)["latest"]
        return next(r for r in published if r.tag == wanted)
    if night.startswith("nightly-"):
        match = [r for r in published if r.tag == night]
    else:
        match = [r for r in published if r.tag.split(".")[0] == f"nightly-{night.replace('-', '')}"]
    if not match:
        raise SparkNightlyError(f"no published night {night}; spark-nightly list shows them")
    return match[-1]


def fetch_night(store: ReleaseStore, night: str, dest: Path, *, say: Say = quiet) -> Fetched:
    """Download the manifest, the lock and the wheels of one night; refuse (and remove) any file that mismatches."""
    release = choose_release(store, night)
    folder = dest / release.tag
    folder.mkdir(parents=True, exist_ok=True)
    assets = {a.name: a for a in release.assets}
    if MANIFEST not in assets:
        raise SparkNightlyError(f"{release.tag} has no {MANIFEST}: not a spark-nightly release")
    store.download(release, assets[MANIFEST], folder / MANIFEST)
    _check_manifest_digest(store, release, folder / MANIFEST)
    manifest = json.loads((folder / MANIFEST).read_text())
    expected = {w["name"]: w["sha256"] for w in manifest["wheels"]} | {LOCK: manifest["lock"]["sha256"]}
    for name, digest in sorted(expected.items()):
        if name not in assets:
            raise SparkNightlyError(f"{release.tag} lacks {name}, which its manifest lists")
        target = folder / name
        if not (target.exists() and sha256_of(target) == digest):
            store.download(release, assets[name], target)
        actual = sha256_of(target)
        if actual != digest:
            target.unlink()
            raise TamperedAsset(
                f"{name} of {release.tag} has sha256 {actual}, the manifest says {digest}; the file was removed"
            )
        say(f"fetch: {name} verified")
    wheels = tuple(folder / w["name"] for w in manifest["wheels"])
    return Fetched(release.tag, folder, manifest, folder / LOCK, wheels)


def _check_manifest_digest(store: ReleaseStore, release: Release, manifest: Path) -> None:
    entry = next((e for e in read_index(store)["nights"] if e["tag"] == release.tag), None)
    if entry is not None and entry["manifest_sha256"] != sha256_of(manifest):
        manifest.unlink()
        raise TamperedAsset(f"{MANIFEST} of {release.tag} does not match the digest the index records")


def install(fetched: Path, venv: Path, log_dir: Path, *, say: Say = quiet) -> None:
    """A venv holding exactly the lock: hashes required, no dependency resolution, our wheels from the folder."""
    if not (fetched / LOCK).exists():
        raise SparkNightlyError(f"{fetched / LOCK} is missing: run spark-nightly fetch first")
    say(f"install: creating {venv}")
    procs.run([sys.executable, "-m", "venv", str(venv)], log_dir / "install-venv.log", timeout_s=300)
    say(f"install: installing {fetched / LOCK} with hashes required")
    _pip_locked(str(venv / "bin" / "python"), "install", fetched, log_dir / "install.log")


def download_locked(fetched: Path, dest: Path, log_dir: Path) -> None:
    """Every file of the lock in `dest` (ours from the fetched folder, the rest from their index), hashes checked."""
    _pip_locked(sys.executable, "download", fetched, log_dir / "download-locked.log", "--dest", str(dest))


def _pip_locked(python: str, action: str, fetched: Path, log: Path, *extra: str) -> None:
    """`pip install|download` of exactly the lock: hashes required, no dependency resolution."""
    argv = [python, "-m", "pip", action, "--quiet", "--no-deps", "--require-hashes", "--find-links", str(fetched)]
    procs.run([*argv, *extra, "-r", str(fetched / LOCK)], log, timeout_s=_INSTALL_TIMEOUT_S, inactivity_s=900)


def write_image_context(fetched: Path, out: Path, profile: Profile) -> Path:
    """A Dockerfile and its context for a fetched night: every locked file (hashes checked) and the lock, installed
    with --no-index; returns the Dockerfile."""
    (out / "wheels").mkdir(parents=True, exist_ok=True)
    download_locked(fetched, out / "wheels", out)  # the image installs with --no-index: every locked file goes in
    shutil.copy2(fetched / LOCK, out / LOCK)
    dockerfile = out / "Dockerfile"
    dockerfile.write_text(render_dockerfile(profile, lock_directory(out / "wheels", ())))
    return dockerfile
