"""The user side: fetch a night's tested files with every sha256 checked, and install exactly its lock."""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.config.matrix import Profile
from pipeline.errors import SparkNightlyError, StoreContentError, TamperedAsset, UsageError
from pipeline.infra import procs
from pipeline.infra.files import sha256_of
from pipeline.infra.image import write_context
from pipeline.infra.releases import Asset, Release, ReleaseStore
from pipeline.infra.runtime import download_locked, lock_directory, pip_locked
from pipeline.infra.safe_files import UnsafeName, check_name, is_regular_file, real_folder, shown, write_into
from pipeline.progress import Say, quiet
from pipeline.stages.release.publish import MANIFEST, MANIFEST_SCHEMA, nightly_releases, parse_store_json, read_index
from pipeline.stages.release.verify import LOCK, verify_fetched


@dataclass(frozen=True)
class Fetched:
    """A night on disk: its manifest, the lock and every wheel, all verified."""

    tag: str
    folder: Path
    manifest: dict[str, Any]
    lock: Path
    wheels: tuple[Path, ...]


def choose_release(store: ReleaseStore, night: str, index: dict[str, Any] | None = None) -> Release:
    """`latest` (the index's pointer), a date YYYY-MM-DD (its last rerun), or a tag."""
    published = nightly_releases(store.releases())
    if not published:
        raise SparkNightlyError("the release store has no published night")
    if night == "latest":
        wanted = (index or read_index(store))["latest"]
        if wanted is None:
            raise StoreContentError("no published release carries index.json: the store was not written by publish")
        match = [r for r in published if r.tag == wanted]
    elif night.startswith("nightly-"):
        match = [r for r in published if r.tag == night]
    else:
        match = [r for r in published if r.tag.split(".")[0] == f"nightly-{night.replace('-', '')}"]
    if not match:
        raise SparkNightlyError(f"no published night {shown(night)}; spark-nightly list shows them")
    return match[-1]


def fetch_night(store: ReleaseStore, night: str, dest: Path, *, say: Say = quiet) -> Fetched:
    """Download the manifest, the lock and the wheels of one night; refuse (and remove) any file that mismatches.

    Every name the store or the manifest gives must be one plain file name, and every file is written under a
    name of its own first, so nothing lands outside `dest/TAG` and no link already there is written through.
    """
    index = read_index(store)
    release = choose_release(store, night, index)
    listed = next((e for e in index["nights"] if e["tag"] == release.tag), None)
    if listed is None:
        raise StoreContentError(
            f"{release.tag} is published but the newest index does not list it, so its manifest cannot be checked"
        )
    try:
        folder = real_folder(dest / check_name(release.tag, "release tag"), "the night's folder")
    except UnsafeName as exc:
        raise StoreContentError(str(exc)) from None
    except OSError as exc:  # --dest names a file, or a folder we may not write
        raise UsageError(f"--dest {dest}: {exc.strerror}; name a folder you can write") from None
    assets = {a.name: a for a in release.assets}
    if MANIFEST not in assets:
        raise SparkNightlyError(f"{release.tag} has no {MANIFEST}: not a spark-nightly release")
    _fetch_verified(store, release, assets[MANIFEST], folder, digest=listed["manifest_sha256"], by="the index")
    manifest = parse_store_json(folder / MANIFEST, f"{MANIFEST} of {release.tag}", MANIFEST_SCHEMA)
    expected = {w["name"]: w["sha256"] for w in manifest["wheels"]} | {LOCK: manifest["lock"]["sha256"]}
    for name, digest in sorted(expected.items()):
        if name not in assets:
            raise SparkNightlyError(f"{release.tag} lacks {shown(name)}, which its manifest lists")
        _fetch_verified(store, release, assets[name], folder, digest=digest, by="the manifest")
        say(f"fetch: {name} verified")
    wheels = tuple(folder / w["name"] for w in manifest["wheels"])
    return Fetched(release.tag, folder, manifest, folder / LOCK, wheels)


def _fetch_verified(store: ReleaseStore, release: Release, asset: Asset, folder: Path, *, digest: str, by: str) -> None:
    """`folder/NAME` holding exactly `digest`: a verified copy is kept, anything else (a link included) replaced by
    a download checked before it takes the name; a mismatching download is removed with whatever held the name."""
    try:
        name = check_name(asset.name, "asset name")
    except UnsafeName as exc:
        raise StoreContentError(f"{release.tag}: {exc}") from None
    target = folder / name
    if is_regular_file(target) and sha256_of(target) == digest:
        return

    def download_checked(incoming: Path) -> None:
        store.download(release, asset, incoming)
        actual = sha256_of(incoming)
        if actual != digest:
            target.unlink(missing_ok=True)
            raise TamperedAsset(
                f"{name} of {release.tag} has sha256 {actual}, {by} says {digest}; the file was removed"
            )

    write_into(folder, name, download_checked)


def install(fetched: Path, venv: Path, log_dir: Path, *, say: Say = quiet) -> None:
    """A venv holding exactly the lock: hashes required, no dependency resolution, our wheels from the folder; the
    lock and the wheels are checked against the manifest first."""
    verified = verify_fetched(fetched)
    say(f"install: {fetched} verified ({len(verified.wheels)} wheel(s), {len(verified.lines)} locked files)")
    say(f"install: creating {venv}")
    procs.run([sys.executable, "-m", "venv", str(venv)], log_dir / "install-venv.log", timeout_s=300)
    say(f"install: installing {fetched / LOCK} with hashes required")
    pip_locked(str(venv / "bin" / "python"), "install", fetched, log_dir / "install.log")


def write_image_context(fetched: Path, out: Path, profile: Profile) -> Path:
    """A Dockerfile and its context for a fetched night: every locked file (hashes checked) and the lock, installed
    with --no-index; returns the Dockerfile. The lock and the wheels are checked against the manifest first."""
    verify_fetched(fetched)
    (out / "wheels").mkdir(parents=True, exist_ok=True)
    download_locked(fetched, out / "wheels", out)  # the image installs with --no-index: every locked file goes in
    shutil.copy2(fetched / LOCK, out / LOCK)
    return write_context(out, profile, lock_directory(out / "wheels", ()))
