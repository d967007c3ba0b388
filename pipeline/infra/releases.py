"""Release stores behind one interface, and the local one: a folder laid out like GitHub releases.

A store holds releases (draft or published, each with a tag) and their assets (name, size, sha256
digest, state). The local store is the embedded default; infra/github.py speaks to GitHub behind
the same interface, and both pass the same contract tests.
"""

from __future__ import annotations

import json
import shutil
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Protocol

from pipeline.errors import ReleaseStoreError, StoreContentError, TagTaken
from pipeline.infra.files import sha256_of, write_atomically
from pipeline.infra.safe_files import (
    UnsafeName,
    check_name,
    is_regular_file,
    open_regular,
    read_regular,
    refuse_links,
    shown,
)

MAX_ASSET_BYTES = 2 * 1024**3  # GitHub refuses release assets of 2 GiB or more


@dataclass(frozen=True)
class Asset:
    """One file of a release; `digest` is "sha256:<hex>" once the store knows it."""

    id: int
    name: str
    size: int
    digest: str | None
    state: str  # "uploaded" when complete; "starter" or "open" when an upload broke off


@dataclass(frozen=True)
class Release:
    """One release: a tag, draft until published, never the repository's 'latest' for a nightly."""

    id: int
    tag: str
    name: str
    body: str
    draft: bool
    prerelease: bool
    assets: tuple[Asset, ...] = ()


class ReleaseStore(Protocol):
    """What publishing, fetching and retention need from a place that keeps releases."""

    def releases(self) -> list[Release]:
        """Every release, drafts included (only the repository's maintainers see drafts)."""
        ...

    def create_draft(self, tag: str, name: str, body: str) -> Release: ...

    def upload(self, release: Release, path: Path, name: str) -> Asset: ...

    def delete_asset(self, release: Release, asset: Asset) -> None: ...

    def download(self, release: Release, asset: Asset, dest: Path) -> None: ...

    def publish(self, release: Release) -> Release:
        """Make a draft public as a prerelease that is never marked latest."""
        ...

    def delete_release(self, release: Release) -> None:
        """Delete the release and its tag."""
        ...


_RELEASE_FIELDS = {"id": int, "tag": str, "name": str, "body": str, "draft": bool, "prerelease": bool}


@contextmanager
def _unsafe_as_store_error() -> Iterator[None]:
    try:
        yield
    except (UnsafeName, OSError) as exc:
        raise StoreContentError(f"the local release store: {exc}") from None


def find(store: ReleaseStore, tag: str) -> Release | None:
    return next((r for r in store.releases() if r.tag == tag), None)


class LocalReleaseStore:
    """`<root>/<tag>/release.json` plus `<root>/<tag>/assets/<name>`; an upload lands under a temporary name first."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def releases(self) -> list[Release]:
        if not self.root.is_dir():
            return []
        found = [
            self._read(folder)
            for folder in sorted(self.root.iterdir())
            if folder.is_symlink() or (folder / "release.json").exists()
        ]
        return sorted(found, key=lambda r: r.id, reverse=True)  # newest first, as GitHub lists them

    def create_draft(self, tag: str, name: str, body: str) -> Release:
        folder = self.root / tag
        if (folder / "release.json").exists():
            raise TagTaken(f"tag {tag} already has a release: a tag is never reused")
        with _unsafe_as_store_error():
            check_name(tag, "release tag")
            refuse_links(self.root, folder, folder / "assets")  # a release is written inside the store only
        (folder / "assets").mkdir(parents=True, exist_ok=True)
        release = Release(self._next_id(), tag, name, body, draft=True, prerelease=True)
        self._write(folder, release)
        return release

    def upload(self, release: Release, path: Path, name: str) -> Asset:
        size = path.stat().st_size
        if size >= MAX_ASSET_BYTES:
            raise ReleaseStoreError(f"{name} is {size} bytes; release assets must stay under 2 GiB")
        current = self._current(release)
        if not current.draft:
            raise ReleaseStoreError(f"release {release.tag} is published: its assets are immutable")
        if any(a.name == name for a in current.assets):
            raise ReleaseStoreError(f"release {release.tag} already has an asset named {name}")
        assets = self._asset_path(release.tag, name).parent
        partial = assets / f".{name}.part"  # seen as a 'starter' asset if the upload breaks off
        shutil.copyfile(path, partial)
        partial.replace(assets / name)
        return self._asset(assets / name)

    def delete_asset(self, release: Release, asset: Asset) -> None:
        folder = self.root / release.tag / "assets"
        for candidate in (folder / asset.name, folder / f".{asset.name}.part"):
            candidate.unlink(missing_ok=True)

    def download(self, release: Release, asset: Asset, dest: Path) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        source = self._asset_path(release.tag, asset.name)
        with _unsafe_as_store_error(), open_regular(source) as handle, dest.open("wb") as sink:
            shutil.copyfileobj(handle, sink)

    def publish(self, release: Release) -> Release:
        current = self._current(release)
        if any(a.state != "uploaded" for a in current.assets):
            raise ReleaseStoreError(f"release {release.tag} has unfinished uploads")
        published = replace(current, draft=False, prerelease=True)
        self._write(self.root / release.tag, published)
        return self._current(published)

    def delete_release(self, release: Release) -> None:
        shutil.rmtree(self.root / release.tag, ignore_errors=True)

    def _current(self, release: Release) -> Release:
        folder = self.root / release.tag
        if not (folder / "release.json").exists():
            raise ReleaseStoreError(f"release {release.tag} does not exist")
        return self._read(folder)

    def _read(self, folder: Path) -> Release:
        """A release folder as written by this store; links, malformed JSON or fields are refused, never followed."""
        with _unsafe_as_store_error():
            refuse_links(folder, folder / "assets")
            check_name(folder.name, "release folder")
            raw = read_regular(folder / "release.json")
            paths = sorted((folder / "assets").iterdir())
            for path in paths:
                check_name(path.name.removeprefix("."), "asset name")
                if not is_regular_file(path):
                    raise UnsafeName(f"asset {path} is not a regular file (a link or a folder)")
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise StoreContentError(f"{folder / 'release.json'} is not valid JSON ({exc})") from None
        if not isinstance(data, dict) or {k: type(v) for k, v in data.items()} != _RELEASE_FIELDS:
            raise StoreContentError(f"{folder / 'release.json'} does not hold the fields this store writes")
        if data["tag"] != folder.name:
            raise StoreContentError(f"{folder / 'release.json'} names tag '{shown(data['tag'])}', not its folder")
        return Release(**(data | {"assets": tuple(self._asset(path) for path in paths)}))

    def _asset_path(self, tag: str, name: str) -> Path:
        with _unsafe_as_store_error():
            return self.root / check_name(tag, "release tag") / "assets" / check_name(name, "asset name")

    def _asset(self, path: Path) -> Asset:
        partial = path.name.startswith(".") and path.name.endswith(".part")
        name = path.name[1:-5] if partial else path.name
        ident = zlib.crc32(f"{path.parent.parent.name}/{name}".encode())
        digest = None if partial else f"sha256:{sha256_of(path)}"
        return Asset(ident, name, path.stat().st_size, digest, "starter" if partial else "uploaded")

    def _write(self, folder: Path, release: Release) -> None:
        data = asdict(release)
        del data["assets"]
        write_atomically(folder / "release.json", json.dumps(data, indent=2, sort_keys=True) + "\n")

    def _next_id(self) -> int:
        """Release ids grow like GitHub's, so newest-first listing is by id (one nightly writes at a time)."""
        counter = self.root / ".last-id"
        value = int(counter.read_text()) + 1 if counter.exists() else 1
        write_atomically(counter, str(value))
        return value
