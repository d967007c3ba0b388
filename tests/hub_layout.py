"""A Hugging Face Hub cache laid out as huggingface_hub leaves it, made from a model folder with no network at all."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from pipeline.infra.hub import repo_folder
from pipeline.infra.weights import MANIFEST

COMMIT = "8c3f2a1d9e7b6c5a4f3e2d1c0b9a8f7e6d5c4b3a"  # a commit of the made-up repository below
REPO = "spark-nightly-test/SmolLM2-135M-Instruct"
LFS_SUFFIXES = (".safetensors",)  # stored in LFS, as the Hub's default .gitattributes says


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data, usedforsecurity=False).hexdigest()


def fill_hub_cache(
    model: Path, hub: Path, *, repo: str = REPO, commit: str = COMMIT, refs: tuple[str, ...] = (), listing: bool = True
) -> Path:
    """The files of `model` as `repo` at `commit` under `hub`: blobs named by content, snapshot links, and (as
    huggingface_hub 2.4 writes after a download) the commit's tree listing; returns the snapshot folder.

    LFS blobs are hard links where the file system allows (the model is large and only read); the others copies."""
    storage = repo_folder(hub, repo)
    snapshot = storage / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (storage / "blobs").mkdir()
    tree: dict[str, dict[str, object]] = {}
    for source in sorted(p for p in model.rglob("*") if p.is_file() and p.name != MANIFEST):
        name = source.relative_to(model).as_posix()
        lfs = name.endswith(LFS_SUFFIXES)
        if lfs:
            sha256 = _sha256(source)
            blob = storage / "blobs" / sha256
            _link_or_copy(source, blob)
            tree[name] = {"size": source.stat().st_size, "blob_id": git_blob_id(b"pointer"), "lfs_sha256": sha256}
        else:
            data = source.read_bytes()
            blob = storage / "blobs" / git_blob_id(data)
            blob.write_bytes(data)
            tree[name] = {"size": len(data), "blob_id": git_blob_id(data)}
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    for ref in refs:
        (storage / "refs").mkdir(exist_ok=True)
        (storage / "refs" / ref).write_text(commit)
    if listing:
        (storage / "trees").mkdir()
        (storage / "trees" / f"{commit}.json").write_text(json.dumps({"format_version": 1, "files": tree}))
    return snapshot


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def _link_or_copy(source: Path, blob: Path) -> None:
    try:
        os.link(source, blob)
    except OSError:
        shutil.copyfile(source, blob)


def damage(snapshot: Path, name: str) -> Path:
    """Flip the first byte of a small file's blob (a copy, never a link into the model folder); returns the blob."""
    blob = (snapshot / name).resolve()
    data = bytearray(blob.read_bytes())
    data[0] ^= 0xFF
    blob.unlink()  # a new file: whatever the blob was linked to stays as it was
    blob.write_bytes(bytes(data))
    return blob
