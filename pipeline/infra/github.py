"""GitHub releases and alert issues behind their interfaces: the only module that imports github3.

Both share one connection: a github3 client logged in with the token, and a bounded retry every call goes through.
github3.py lacks a few fields (`make_latest`, an asset's `digest`) and the tag deletion; those calls go through
github3's own session here. A secondary rate limit waits its `retry-after`, an exhausted primary limit waits for
`x-ratelimit-reset`, a 5xx, a timeout or a dropped connection backs off exponentially. The token is given to github3
only, and never appears in a message.
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

from pipeline.errors import GitHubIssueError, ReleaseStoreError, SparkNightlyError, TagTaken
from pipeline.infra.files import sha256_of
from pipeline.infra.releases import MAX_ASSET_BYTES, Asset, Release
from pipeline.progress import Say, quiet

T = TypeVar("T")
PUBLIC_API = "https://api.github.com"
_ATTEMPTS = 6
_BACKOFF_S = 1.0
_MAX_WAIT_S = 300.0


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


class _Connection:
    """One repository through a logged-in github3 client; every call goes through the bounded retry."""

    def __init__(
        self,
        repo: str,
        token: str,
        *,
        setting: str,
        error: type[SparkNightlyError],
        api_url: str,
        say: Say,
        sleep: Callable[[float], None],
    ) -> None:
        owner, _, name = repo.partition("/")
        if not owner or not name:
            raise error(f"{setting} {repo!r}: write it as owner/name")
        if not token:
            raise error("no GitHub token: set the variable named by github.token_env")
        self.say = say
        self._sleep = sleep
        self._slug = repo
        self._error = error
        # GitHubEnterprise adds /api/v3 to its URL, which is how a GitHub Enterprise server (and the stand-in) serve;
        # a runner's $GITHUB_API_URL already ends in it
        server = api_url.removesuffix("/").removesuffix("/api/v3")
        client = github3.GitHub() if api_url == PUBLIC_API else github3.GitHubEnterprise(server)
        client.login(token=token)
        client.session.headers["X-GitHub-Api-Version"] = "2022-11-28"
        self.client = client
        self.repo = self.retry("open the repository", lambda: client.repository(owner, name))

    def send(self, method: str, url: str, expected: int, payload: Any = None, *, missing_ok: bool = False) -> Any:
        """One call through github3's own session, for what github3 does not expose."""
        response = self.client.session.request(method, url, data=json.dumps(payload) if payload is not None else None)
        if response.status_code == expected or (missing_ok and response.status_code in {404, 422}):
            return response.json() if response.content else None
        raise _HTTPFailure(response)

    def retry(self, what: str, call: Callable[[], T]) -> T:
        """`call`, again after each transient failure (bounded); `what` names it in progress lines and the error."""
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                return call()
            except (GitHubException, _HTTPFailure, requests.ConnectionError, requests.Timeout) as exc:
                wait = _wait_for(exc, attempt)
                if wait is None or attempt == _ATTEMPTS:
                    raise self._error(f"GitHub: cannot {what} in {self._slug}: {_describe(exc)}") from None
                self.say(f"github: {what}: {_describe(exc)}; retrying in {wait:.0f} s ({attempt}/{_ATTEMPTS - 1})")
                self._sleep(wait)
        raise AssertionError("unreachable")


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
        self._github = _Connection(
            repo, token, setting="publish.repo", error=ReleaseStoreError, api_url=api_url, say=say, sleep=sleep
        )
        self._say = say
        self._repo = self._github.repo
        self._retry = self._github.retry
        self._send = self._github.send

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
            created = self._retry(f"create the draft {tag}", lambda: self._create_release(url, payload))
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

    def _create_release(self, url: str, payload: dict[str, Any]) -> Any:
        try:
            return self._send("post", url, 201, payload)
        except _HTTPFailure as exc:
            text = exc.response.text
            if exc.response.status_code == 422 and '"tag_name"' in text and "already_exists" in text:
                raise _TagExists() from None
            raise


class GitHubIssues:
    """Alert issues of one repository: each found again by a hidden marker in its body, so none is opened twice."""

    def __init__(
        self,
        repo: str,
        token: str,
        *,
        api_url: str = PUBLIC_API,
        say: Say = quiet,
        sleep: Callable[[float], None] = _sleep,
    ) -> None:
        self._github = _Connection(
            repo, token, setting="alert.repo", error=GitHubIssueError, api_url=api_url, say=say, sleep=sleep
        )
        self._repo = self._github.repo
        self._labels_checked = False

    def ensure_labels(self, labels: dict[str, tuple[str, str]]) -> None:
        """Create the labels (name -> colour, description) the repository lacks; once per connection."""
        if self._labels_checked:
            return

        def attempt() -> None:
            present = {label.name for label in self._repo.labels()}
            for name, (color, description) in sorted(labels.items()):
                if name not in present:
                    self._repo.create_label(name, color, description)

        self._github.retry("create the alert labels", attempt)
        self._labels_checked = True

    def find_open(self, label: str, marker: str) -> int | None:
        """The oldest open issue with `label` whose body carries `marker`."""
        return self._github.retry(f"look up the open issue marked {marker}", lambda: self._find_open(label, marker))

    def open_issue(self, title: str, body: str, labels: list[str], marker: str) -> int:
        """A new issue, or the open one already carrying `marker` (its creation's answer may have been lost)."""

        def attempt() -> int:
            if (found := self._find_open(labels[0], marker)) is not None:
                self._github.say(f"github: issue #{found} already carries {marker}; keeping it")
                return found
            created = self._repo.create_issue(title, body, labels=labels)
            if created is None:
                raise GitHubIssueError(f"GitHub refused the issue {title!r}")
            return int(created.number)

        return self._github.retry(f"open the issue {title!r}", attempt)

    def comment(self, number: int, body: str, marker: str) -> bool:
        """Comment once: when the issue's body or a comment already carries `marker`, nothing is added.

        False when the issue is gone (deleted or transferred).
        """

        def attempt() -> bool:
            issue = self._issue(number)
            if issue is None:
                return False
            if marker in (issue.body or "") or any(marker in (c.body or "") for c in issue.comments()):
                self._github.say(f"github: issue #{number} already holds {marker}; not repeated")
                return True
            if issue.create_comment(body) is None:
                raise GitHubIssueError(f"GitHub refused a comment on issue #{number}")
            return True

        return self._github.retry(f"comment on issue #{number}", attempt)

    def close(self, number: int) -> None:
        """Close the issue as completed; a closed or vanished issue is left as it is."""

        def attempt() -> None:
            issue = self._issue(number)
            if issue is not None and issue.state != "closed":
                url = f"{self._repo.url}/issues/{number}"
                self._github.send("patch", url, 200, {"state": "closed", "state_reason": "completed"})

        self._github.retry(f"close issue #{number}", attempt)

    def _find_open(self, label: str, marker: str) -> int | None:
        # the issue list, not the search API: search is indexed late and can miss an issue opened a moment ago
        found = [
            int(issue.number)
            for issue in self._repo.issues(state="open", labels=label)
            if not issue.pull_request_urls and marker in (issue.body or "")
        ]
        return min(found, default=None)

    def _issue(self, number: int) -> Any:
        try:
            return self._repo.issue(number)
        except GitHubException as exc:
            if getattr(exc, "code", None) in {404, 410}:  # deleted or transferred: the caller opens a new one
                return None
            raise


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


def repository_access(repo: str, token: str, *, api_url: str = PUBLIC_API) -> dict[str, bool]:
    """What the token may do in the repository (GitHub's `permissions`: admin, push, pull); raises when it cannot
    even read it. For `spark-nightly doctor`, before a night needs it."""
    connection = _Connection(
        repo, token, setting="the repository", error=SparkNightlyError, api_url=api_url, say=quiet, sleep=_sleep
    )
    permissions = getattr(connection.repo, "permissions", None) or {}
    return {str(name): bool(value) for name, value in dict(permissions).items()}
