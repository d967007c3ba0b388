"""GitHub releases behind the release-store interface: the only module that imports github3.

github3.py lacks a few fields (`make_latest`, an asset's `digest`) and the tag deletion; those calls go through
github3's own session here. Every call is retried with a bound: a secondary rate limit waits its
`retry-after`, an exhausted primary limit waits for `x-ratelimit-reset`, a 5xx, a timeout or a dropped
connection backs off exponentially. The token is given to github3 only, and never appears in a message.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import github3
import requests
from github3.exceptions import GitHubException

from pipeline.infra.releases import MAX_ASSET_BYTES, Asset, Release, ReleaseStoreError, TagTaken
from pipeline.infra.runtime import sha256_of
from pipeline.progress import Say, quiet

T = TypeVar("T")
PUBLIC_API = "https://api.github.com"
_ATTEMPTS = 6
_BACKOFF_S = 1.0
_MAX_WAIT_S = 300.0


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


class GitHubReleaseStore:
    """Releases of one repository (`owner/name`) on GitHub or a GitHub Enterprise server."""

    def __init__(
        self,
        repo: str,
        token: str,
        *,
        api_url: str = PUBLIC_API,
        say: Say = quiet,
        sleep: Callable[[float], None] = _sleep,
    ) -> None:
        owner, _, name = repo.partition("/")
        if not owner or not name:
            raise ReleaseStoreError(f"publish.repo {repo!r}: write it as owner/name")
        if not token:
            raise ReleaseStoreError("no GitHub token: set the variable named by github.token_env")
        self._say = say
        self._sleep = sleep
        self._slug = repo
        # GitHubEnterprise adds /api/v3 to its URL, which is how a GitHub Enterprise server (and the stand-in) serve
        client = github3.GitHub() if api_url == PUBLIC_API else github3.GitHubEnterprise(api_url.removesuffix("/"))
        client.login(token=token)
        client.session.headers["X-GitHub-Api-Version"] = "2022-11-28"
        self._client = client
        self._repo = self._retry(f"open {repo}", lambda: client.repository(owner, name))

    def releases(self) -> list[Release]:
        return self._retry("list releases", lambda: [_release(r.as_dict()) for r in self._repo.releases()])

    def create_draft(self, tag: str, name: str, body: str) -> Release:
        payload = {
            "tag_name": tag,
            "name": name,
            "body": body,
            "draft": True,
            "prerelease": True,
            "make_latest": "false",
        }
        url = f"{self._repo.url}/releases"
        try:
            created = self._retry(f"create the draft {tag}", lambda: self._send("post", url, 201, payload))
        except _TagExists:
            raise TagTaken(f"tag {tag} has (or had) a release on GitHub: a tag is never reused") from None
        return _release(created)

    def upload(self, release: Release, path: Path, name: str) -> Asset:
        size = path.stat().st_size
        if size >= MAX_ASSET_BYTES:
            raise ReleaseStoreError(f"{name} is {size} bytes; release assets must stay under 2 GiB")

        digest = f"sha256:{sha256_of(path)}"

        def attempt() -> Asset:
            # After a 502 or a dropped connection GitHub may hold a 'starter' asset (deleted here), or the whole
            # upload with its answer lost (kept when its digest is ours; a second upload would get a 422).
            if (done := self._reuse_or_clear(release, name, digest)) is not None:
                return done
            target = self._repo.release(release.id)
            with path.open("rb") as handle:
                uploaded = target.upload_asset("application/octet-stream", name, handle)
            if uploaded is None:
                raise ReleaseStoreError(f"GitHub refused the upload of {name}")
            return _asset(uploaded.as_dict())

        return self._retry(f"upload {name}", attempt)

    def delete_asset(self, release: Release, asset: Asset) -> None:
        url = f"{self._repo.url}/releases/assets/{asset.id}"
        self._retry(f"delete the asset {asset.name}", lambda: self._send("delete", url, 204))

    def download(self, release: Release, asset: Asset, dest: Path) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)

        def attempt() -> None:
            if not self._repo.release(release.id).asset(asset.id).download(str(dest)):
                raise ReleaseStoreError(f"GitHub did not serve {asset.name}")

        self._retry(f"download {asset.name}", attempt)

    def publish(self, release: Release) -> Release:
        # github3's edit() cannot send make_latest: a nightly must never become the repository's 'latest'
        payload = {"draft": False, "prerelease": True, "make_latest": "false"}
        url = f"{self._repo.url}/releases/{release.id}"
        return _release(self._retry(f"publish {release.tag}", lambda: self._send("patch", url, 200, payload)))

    def delete_release(self, release: Release) -> None:
        url = f"{self._repo.url}/releases/{release.id}"
        self._retry(f"delete {release.tag}", lambda: self._send("delete", url, 204))
        ref = f"{self._repo.url}/git/refs/tags/{release.tag}"
        self._retry(f"delete the tag {release.tag}", lambda: self._send("delete", ref, 204, missing_ok=True))

    def _reuse_or_clear(self, release: Release, name: str, digest: str) -> Asset | None:
        for asset in self._repo.release(release.id).assets():
            data = asset.as_dict()
            if data["name"] != name:
                continue
            if data.get("state") == "uploaded" and data.get("digest") == digest:
                self._say(f"github: {name} is already uploaded with its digest; keeping it")
                return _asset(data)
            self._send("delete", f"{self._repo.url}/releases/assets/{data['id']}", 204)
        return None

    def _send(self, method: str, url: str, expected: int, payload: Any = None, *, missing_ok: bool = False) -> Any:
        """One call through github3's own session, for what github3 does not expose."""
        response = self._client.session.request(method, url, data=json.dumps(payload) if payload is not None else None)
        if response.status_code == expected or (missing_ok and response.status_code in {404, 422}):
            return response.json() if response.content else None
        if response.status_code == 422 and '"tag_name"' in response.text and "already_exists" in response.text:
            raise _TagExists()
        raise _HTTPFailure(response)

    def _retry(self, what: str, call: Callable[[], T]) -> T:
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                return call()
            except (GitHubException, _HTTPFailure, requests.ConnectionError, requests.Timeout) as exc:
                wait = _wait_for(exc, attempt)
                if wait is None or attempt == _ATTEMPTS:
                    raise ReleaseStoreError(f"GitHub: cannot {what} in {self._slug}: {_describe(exc)}") from None
                self._say(f"github: {what}: {_describe(exc)}; retrying in {wait:.0f} s ({attempt}/{_ATTEMPTS - 1})")
                self._sleep(wait)
        raise AssertionError("unreachable")


class _TagExists(Exception):
    """GitHub's 422 for a tag that has (or, with immutable releases, had) a release."""


class _HTTPFailure(Exception):
    def __init__(self, response: requests.Response) -> None:
        super().__init__(response.status_code)
        self.response = response


def _wait_for(exc: Exception, attempt: int) -> float | None:
    """Seconds to wait before retrying, or None when retrying cannot help (a 4xx other than a rate limit)."""
    backoff = _BACKOFF_S * 2.0 ** (attempt - 1)
    response: requests.Response | None = getattr(exc, "response", None)
    if response is None:
        return backoff  # no answer at all: a timeout or a dropped connection
    status, headers = response.status_code, response.headers
    if status in {403, 429}:
        if "retry-after" in headers:
            return min(float(headers["retry-after"]), _MAX_WAIT_S)
        if headers.get("x-ratelimit-remaining") == "0" and "x-ratelimit-reset" in headers:
            return min(max(float(headers["x-ratelimit-reset"]) - time.time(), 0.0) + 1.0, _MAX_WAIT_S)
        return None
    if status >= 500:
        return backoff
    return None


def _describe(exc: Exception) -> str:
    """What went wrong, from the status and GitHub's message only: never a header, never the request."""
    response = getattr(exc, "response", None)
    if response is None:
        return type(exc).__name__
    try:
        message = response.json().get("message", "")
    except ValueError:
        message = ""
    return f"HTTP {response.status_code} {message}".strip()


def _release(data: dict[str, Any]) -> Release:
    return Release(
        id=int(data["id"]),
        tag=str(data["tag_name"]),
        name=str(data.get("name") or ""),
        body=str(data.get("body") or ""),
        draft=bool(data["draft"]),
        prerelease=bool(data["prerelease"]),
        assets=tuple(_asset(a) for a in data.get("assets", [])),
    )


def _asset(data: dict[str, Any]) -> Asset:
    return Asset(int(data["id"]), str(data["name"]), int(data["size"]), data.get("digest"), str(data["state"]))
