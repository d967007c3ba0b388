"""A stand-in for the Hugging Face Hub on a free local port: one repository at one commit, answered as the Hub answers
huggingface_hub's snapshot download (the tree listing, then a HEAD and a GET per file), every request recorded."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from tests.fakes.serving import serving
from tests.hub_layout import LFS_SUFFIXES, git_blob_id


@dataclass
class HubState:
    repo: str
    commit: str
    files: dict[str, bytes]
    token: str | None = None  # set: the repository is gated, and only this token may read it
    requests: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


@contextmanager
def hub_stand_in(model: Path, repo: str, commit: str, *, token: str | None = None) -> Iterator[tuple[str, HubState]]:
    """The files of `model` as `repo` at `commit`; yields the endpoint to hand to huggingface_hub, and the state."""
    files = {p.relative_to(model).as_posix(): p.read_bytes() for p in sorted(model.rglob("*")) if p.is_file()}
    state = HubState(repo, commit, files, token)
    with serving(_handler(state), "hub-stand-in") as server:
        yield f"http://127.0.0.1:{server.server_address[1]}", state


def _etag(name: str, data: bytes) -> str:
    """What the Hub names a file by: its sha256 when it is in LFS, else git's blob id."""
    return hashlib.sha256(data).hexdigest() if name.endswith(LFS_SUFFIXES) else git_blob_id(data)


def _handler(state: HubState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet: the test reads the state
            return

        def do_GET(self) -> None:
            self._serve(body=True)

        def do_HEAD(self) -> None:
            self._serve(body=False)

        def _serve(self, *, body: bool) -> None:
            path = unquote(urlsplit(self.path).path)
            with state.lock:
                state.requests.append(f"{self.command} {path}")
            if state.token is not None and self.headers.get("Authorization") != f"Bearer {state.token}":
                return self._answer(401, b"", {"X-Error-Code": "GatedRepo", "X-Error-Message": "gated"}, body)
            tree = f"/api/models/{state.repo}/tree/"
            resolve = f"/{state.repo}/resolve/"
            if path.startswith(tree):
                return self._tree(path.removeprefix(tree), body)
            if path.startswith(resolve):
                revision, _, name = path.removeprefix(resolve).partition("/")
                return self._file(revision, name, body)
            return self._answer(404, b"", {"X-Error-Code": "RepoNotFound", "X-Error-Message": "no repo"}, body)

        def _tree(self, revision: str, body: bool) -> None:
            if revision != state.commit:
                return self._answer(404, b"", {"X-Error-Code": "RevisionNotFound", "X-Error-Message": "none"}, body)
            listing = []
            for name, data in state.files.items():
                item: dict[str, Any] = {"type": "file", "path": name, "size": len(data), "oid": git_blob_id(data)}
                if name.endswith(LFS_SUFFIXES):
                    item["lfs"] = {"oid": _etag(name, data), "size": len(data), "pointerSize": 130}
                listing.append(item)
            self._answer(200, json.dumps(listing).encode(), {"Content-Type": "application/json"}, body)

        def _file(self, revision: str, name: str, body: bool) -> None:
            if revision != state.commit or name not in state.files:
                return self._answer(404, b"", {"X-Error-Code": "EntryNotFound", "X-Error-Message": "none"}, body)
            data = state.files[name]
            headers = {"X-Repo-Commit": state.commit, "ETag": f'"{_etag(name, data)}"'}
            self._answer(200, data, headers | {"Content-Type": "application/octet-stream"}, body)

        def _answer(self, status: int, data: bytes, headers: dict[str, str], body: bool) -> None:
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

    return Handler
