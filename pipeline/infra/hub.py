"""The Hugging Face Hub cache: one repository downloaded at a pinned commit, and every file of its snapshot verified.

The only importer of huggingface_hub. The cache is the Hub's own layout (models--ORG--NAME/blobs, refs,
snapshots/<commit>), so vLLM reads it offline as it is. A blob's name is its content's hash: the sha256 for LFS
files, git's blob sha1 for the others; so every file can be checked with no network, against its own name.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx2
from huggingface_hub import errors as hub_errors
from huggingface_hub import get_cached_repo_tree, snapshot_download
from huggingface_hub.utils.tqdm import disable_progress_bars

from pipeline.errors import EngineError, TamperedAsset
from pipeline.infra.files import sha256_of

TOKEN_ENV = "HF_TOKEN"  # a token with access to gated repositories: read here, never logged or passed to a server
COMMIT = re.compile(r"[0-9a-f]{40}")
SHA256 = re.compile(r"[0-9a-f]{64}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_WEIGHT_FILES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
_HASHERS = min(4, os.cpu_count() or 1)  # hashlib drops the GIL: a few shards of a 60 GB model hash at once
_BLOCK = 1 << 22


def offline() -> bool:
    """Whether the Hub is forbidden here: HF_HUB_OFFLINE, read as huggingface_hub reads it."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def hub_dir(hf_home: Path) -> Path:
    """Where huggingface_hub keeps repositories under HF_HOME (the folder a launch mounts as HF_HOME)."""
    return hf_home / "hub"


def repo_folder(hub: Path, repo: str) -> Path:
    return hub / f"models--{repo.replace('/', '--')}"


@dataclass(frozen=True)
class Snapshot:
    """A repository at one commit with every file verified: its folder and each file's sha256."""

    repo: str
    commit: str
    folder: Path
    files: Mapping[str, str]


def snapshot_folder(hub: Path, repo: str, commit: str) -> Path:
    """Where the Hub cache keeps a repository's files at one commit."""
    return repo_folder(hub, repo) / "snapshots" / commit


def commit_of(hub: Path, repo: str, revision: str | None) -> str | None:
    """The commit a revision names in the cache: itself when it is one, else what refs/<revision> recorded."""
    name = revision or "main"
    if COMMIT.fullmatch(name):
        return name
    ref = repo_folder(hub, repo) / "refs" / name
    return ref.read_text().strip() if ref.is_file() else None


def verify(hub: Path, repo: str, revision: str | None, *, ignore: Sequence[str] = ()) -> Snapshot:
    """Every file of the cached snapshot, checked against its blob's name and the Hub's listing of the commit
    (less the files `ignore` leaves out, as the download did).

    Raises EngineError when the snapshot is absent or incomplete (a download can mend that), TamperedAsset when a
    file's content is not what its name says (a download never overwrites it: the message says what to delete).
    """
    shown = f"{repo}@{revision or 'main'}"
    commit = commit_of(hub, repo, revision)
    folder = snapshot_folder(hub, repo, commit or "-")
    if commit is None or not folder.is_dir():
        raise EngineError(f"{shown} is not in the Hugging Face cache {hub}")
    present = sorted(
        name
        for name in (p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() or p.is_symlink())
        if not _ignored(name, ignore)
    )
    listing = _listing(hub, repo, commit, ignore)
    missing = sorted(set(listing) - set(present)) if listing is not None else _missing_by_index(folder, present)
    if missing:
        shown_missing = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise EngineError(f"{shown} is incomplete in {folder}: no {shown_missing}")
    with ThreadPoolExecutor(_HASHERS) as pool:
        digests = list(pool.map(lambda name: _checked(folder, name, shown, listing), present))
    return Snapshot(repo, commit, folder, dict(zip(present, digests, strict=True)))


def snapshot_hashes(folder: Path) -> dict[str, str]:
    """Each file of a verified snapshot and its sha256 without reading the large ones again: an LFS blob's name is
    its sha256; the small files (git blobs, named by sha1) are hashed."""
    hashes: dict[str, str] = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        blob = path.resolve().name
        hashes[path.relative_to(folder).as_posix()] = blob if SHA256.fullmatch(blob) else sha256_of(path)
    return hashes


def _listing(hub: Path, repo: str, commit: str, ignore: Sequence[str]) -> dict[str, tuple[int, str]] | None:
    """The commit's files as the Hub listed them when huggingface_hub downloaded it (size, git blob id), if cached."""
    try:
        files = get_cached_repo_tree(repo, revision=commit, cache_dir=hub)
    except hub_errors.CachedRepoTreeNotFoundError:
        return None  # filled by hand or by an older huggingface_hub: the model's own index says what it needs
    return {f.path: (f.size, f.blob_id) for f in files if not _ignored(f.path, ignore)}


def _ignored(name: str, ignore: Sequence[str]) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in ignore)


def _missing_by_index(folder: Path, present: list[str]) -> list[str]:
    """Without the Hub's listing: config.json, a weights file, and every shard the model's index names."""
    need = {"config.json"}
    for index in (name for name in present if name.endswith(".index.json")):
        try:
            need |= set(json.loads((folder / index).read_text())["weight_map"].values())
        except (OSError, ValueError, KeyError, AttributeError) as exc:
            problem = f"{index} in {folder} is not a readable index ({exc})"
            raise TamperedAsset(f"{problem}; {_remedy(folder, index)}") from None
    missing = sorted(need - set(present))
    if not any(name.endswith(_WEIGHT_FILES) for name in present):
        missing.append("weights file (*.safetensors, *.bin, *.gguf)")
    return missing


def _checked(folder: Path, name: str, shown: str, listing: Mapping[str, tuple[int, str]] | None) -> str:
    """The file's sha256, once its content matches its blob's name and the listing's size and blob id."""
    blob = (folder / name).resolve()
    if not blob.is_file():
        raise TamperedAsset(f"{shown}: {name} points at a missing blob {blob}; {_remedy(folder, name)}")
    size, blob_id = listing.get(name, (None, None)) if listing is not None else (None, None)
    lfs = _SHA256.fullmatch(blob.name) is not None
    if size is not None and blob.stat().st_size != size:
        problem = f"has {blob.stat().st_size} bytes, the Hub listed {size}"
    else:
        sha256, git_sha1 = _digests(blob, git=not lfs)
        expected = blob.name if lfs or COMMIT.fullmatch(blob.name) else None
        actual = sha256 if lfs else git_sha1
        if expected is not None and actual != expected:
            problem = f"has {'sha256' if lfs else 'git blob id'} {actual}, its blob is named {expected}"
        elif not lfs and blob_id is not None and git_sha1 != blob_id:
            problem = f"has git blob id {git_sha1}, the Hub listed {blob_id}"
        else:
            return sha256
    raise TamperedAsset(f"{shown}: {name} is damaged: it {problem}; {_remedy(folder, name)}")


def _digests(blob: Path, *, git: bool) -> tuple[str, str]:
    """The sha256 and, for a file git stores itself, git's blob id (sha1 of 'blob <size>\\0' + content)."""
    sha256 = hashlib.sha256()
    sha1 = hashlib.sha1(f"blob {blob.stat().st_size}\0".encode(), usedforsecurity=False) if git else None
    with blob.open("rb") as handle:
        while block := handle.read(_BLOCK):
            sha256.update(block)
            if sha1 is not None:
                sha1.update(block)
    return sha256.hexdigest(), sha1.hexdigest() if sha1 is not None else ""


def _remedy(folder: Path, name: str) -> str:
    blob = (folder / name).resolve()
    return f"delete {folder / name} and {blob}, then run again (with network: the weights stage downloads it again)"


def download(
    hub: Path, repo: str, revision: str | None, *, ignore: Sequence[str] = (), endpoint: str | None = None
) -> None:
    """What the cache lacks of a repository at a revision, fetched (huggingface_hub skips the files it has);
    `endpoint` is the Hub's base URL (default: huggingface_hub's, HF_ENDPOINT)."""
    shown = f"{repo}@{revision or 'main'}"
    try:
        with disable_progress_bars():  # the stage says a line per repository; bars would flood a CI log
            token = os.environ.get(TOKEN_ENV) or None
            snapshot_download(
                repo,
                revision=revision,
                cache_dir=hub,
                token=token,
                ignore_patterns=list(ignore) or None,
                endpoint=endpoint,
            )
    except hub_errors.GatedRepoError:
        raise EngineError(
            f"{repo} is gated: accept its terms on https://huggingface.co/{repo} and set {TOKEN_ENV} to a token of "
            "that account"
        ) from None
    except hub_errors.RevisionNotFoundError:
        raise EngineError(
            f"{repo} has no revision {revision} on the Hub: pin one of https://huggingface.co/{repo}/commits/main"
        ) from None
    except hub_errors.RepositoryNotFoundError:
        raise EngineError(f"no repository {repo} on the Hub (or it is private: set {TOKEN_ENV})") from None
    except (OSError, httpx2.HTTPError, hub_errors.EntryNotFoundError, hub_errors.XetDownloadError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise EngineError(f"downloading {shown} into {hub} failed: {reason}") from None
