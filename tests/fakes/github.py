"""A local GitHub stand-in: a real HTTP server for the release and issue endpoints the project uses, checked against
GitHub's OpenAPI description on every request and response, with switches for the failures GitHub really produces."""

from __future__ import annotations

import hashlib
import html
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes import openapi
from tests.fakes.serving import serving

PREFIX = "/api/v3"  # where github3's GitHubEnterprise(url) sends its requests
TOKEN = "ghp_standInTokenThatMustNeverBeShown0123456789"  # what the tests' GitHub stores log in with


@dataclass
class Faults:
    """Failures to inject, each for the next N matching requests."""

    server_errors: int = 0  # any request: 502
    upload_502_starter: int = 0  # an upload: the body is taken, a 'starter' asset stays, 502 answers
    secondary_rate_limit: int = 0  # any request: 403 with retry-after
    primary_rate_limit: int = 0  # any request: 403 with x-ratelimit-remaining 0 and a reset time
    drop_upload: int = 0  # an upload: half the body is read, then the connection is closed without an answer
    lose_upload_answer: int = 0  # an upload: stored whole, then the connection is closed before the answer
    lose_issue_answer: int = 0  # a new issue or comment: stored, then the connection is closed before the answer
    immutable: bool = False  # published releases keep their assets, and a tag is never reused


@dataclass
class State:
    """The repository as the stand-in holds it."""

    owner: str = "spark-nightly"
    name: str = "wheels"
    token: str = ""
    base_url: str = ""  # this server, for the URLs its answers carry
    releases: dict[int, dict[str, Any]] = field(default_factory=dict)
    assets: dict[int, dict[str, Any]] = field(default_factory=dict)  # id -> metadata + "data" + "release_id"
    used_tags: set[str] = field(default_factory=set)
    issues: dict[int, dict[str, Any]] = field(default_factory=dict)  # number -> issue, with its "comments" list
    labels: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> label
    issues_made: int = 0  # issue numbers are never reused, even after a deletion
    next_id: int = 1000
    faults: Faults = field(default_factory=Faults)
    contract_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id


class StandIn:
    """The running server: its base URL for github3, its state for assertions."""

    def __init__(self, server: ThreadingHTTPServer, state: State) -> None:
        self.server = server
        self.state = state
        host, port = server.server_address[:2]
        self.url = f"http://{host!s}:{port}"

    @property
    def repo(self) -> str:
        return f"{self.state.owner}/{self.state.name}"


@contextmanager
def github_stand_in(token: str) -> Iterator[StandIn]:
    state = State(token=token)
    with serving(_handler(state), "github-stand-in") as server:
        state.base_url = f"http://127.0.0.1:{server.server_address[1]}"
        yield StandIn(server, state)


def _handler(state: State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet: the test reads state, not stderr
            return

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_PATCH(self) -> None:
            self._serve("PATCH")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

        def _serve(self, method: str) -> None:
            url = urlsplit(self.path)
            path = url.path.removeprefix(PREFIX)
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            with state.lock:
                state.requests.append(f"{method} {path}")
            found = openapi.match(method, path)
            if found is None:
                self._drain()
                state.contract_errors.append(f"{method} {path}: no such operation in GitHub's description")
                return self._json(404, {"message": "Not Found"}, None)
            operation, params = found
            if self.headers.get("Authorization") != f"token {state.token}":
                self._drain()
                return self._json(401, {"message": "Bad credentials"}, None)
            if self._injected(operation):
                return
            body = self._read_body(operation)
            if body is _DROPPED:
                return
            with state.lock:
                status, payload, raw = _route(state, Call(operation.operation_id, params, query, body, self.headers))
                lose = status == 201 and _lose_answer(state.faults, operation.operation_id)
            if lose:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if raw is not None:
                return self._bytes(status, raw)
            self._json(status, payload, operation)

        def _injected(self, operation: openapi.Operation) -> bool:
            faults = state.faults
            upload = operation.operation_id == "repos/upload-release-asset"
            with state.lock:
                if faults.secondary_rate_limit:
                    faults.secondary_rate_limit -= 1
                    self._drain()
                    message = {"message": "You have exceeded a secondary rate limit. Please wait a few minutes."}
                    self._json(403, message, None, {"retry-after": "1"})
                    return True
                if faults.primary_rate_limit:
                    faults.primary_rate_limit -= 1
                    self._drain()
                    reset = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(time.time()) + 1)}
                    self._json(403, {"message": "API rate limit exceeded"}, None, reset)
                    return True
                if faults.server_errors:
                    faults.server_errors -= 1
                    self._drain()
                    self._json(502, {"message": "Server Error"}, None)
                    return True
                if upload and faults.drop_upload:
                    faults.drop_upload -= 1
                    length = int(self.headers.get("Content-Length", "0"))
                    self.rfile.read(length // 2)
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return True
            return False

        def _read_body(self, operation: openapi.Operation) -> Any:
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length) if length else b""
            if operation.operation_id == "repos/upload-release-asset":
                return raw
            if not raw:
                return None
            data = json.loads(raw)
            schema = operation.request_schema()
            if schema is not None:
                state.contract_errors.extend(openapi.validate(schema, data, where=f"request {operation.operation_id}"))
            return data

        def _drain(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            if length:
                self.rfile.read(length)

        def _json(
            self, status: int, payload: Any, operation: openapi.Operation | None, headers: dict[str, str] | None = None
        ) -> None:
            if operation is not None and status < 300:
                schema = operation.response_schema(status)
                if schema is None:
                    state.contract_errors.append(f"{operation.operation_id}: {status} is not a documented answer")
                elif schema:
                    errors = openapi.validate(schema, payload, where=f"response {operation.operation_id}")
                    state.contract_errors.extend(e for e in errors if not _documented_exception(e))
            data = b"" if status == 204 else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _bytes(self, status: int, data: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


_DROPPED = object()


def _lose_answer(faults: Faults, op: str) -> bool:
    """Whether this created thing's answer is to be lost (the thing itself stays)."""
    if op == "repos/upload-release-asset" and faults.lose_upload_answer:
        faults.lose_upload_answer -= 1
        return True
    if op in {"issues/create", "issues/create-comment"} and faults.lose_issue_answer:
        faults.lose_issue_answer -= 1
        return True
    return False


def _documented_exception(error: str) -> bool:
    # The upload operation's prose says a 502 can leave an asset in state "starter", which its enum omits.
    return "'starter' is not one of" in error


@dataclass(frozen=True)
class Call:
    """One request as the routes see it."""

    op: str
    params: dict[str, str]
    query: dict[str, str]
    body: Any
    headers: Any


Answer = tuple[int, Any, bytes | None]
_RELEASE_OPS = frozenset(
    {
        "repos/get-release",
        "repos/update-release",
        "repos/delete-release",
        "repos/list-release-assets",
        "repos/upload-release-asset",
    }
)


def _exists(what: str, field_name: str) -> dict[str, Any]:
    return {
        "message": "Validation Failed",
        "errors": [{"resource": what, "code": "already_exists", "field": field_name}],
    }


def _route(state: State, call: Call) -> Answer:
    op, params, query, body, headers = call.op, call.params, call.query, call.body, call.headers
    if op.startswith("issues/"):
        return _route_issues(state, call)
    if op == "repos/get":
        return 200, _repo(state), None
    if op == "repos/list-releases":
        ordered = sorted(state.releases.values(), key=lambda r: r["id"], reverse=True)
        page, per_page = int(query.get("page", "1")), int(query.get("per_page", "30"))
        return 200, [_release_view(state, r) for r in ordered[(page - 1) * per_page : page * per_page]], None
    if op == "repos/create-release":
        tag = body["tag_name"]
        if any(r["tag_name"] == tag for r in state.releases.values()) or (
            state.faults.immutable and tag in state.used_tags
        ):
            return (
                422,
                {"message": "Validation Failed", "errors": [{"code": "already_exists", "field": "tag_name"}]},
                None,
            )
        release = {
            "id": state.new_id(),
            "tag_name": tag,
            "name": body.get("name"),
            "body": body.get("body"),
            "draft": bool(body.get("draft", False)),
            "prerelease": bool(body.get("prerelease", False)),
            "created_at": "2026-11-21T02:00:00Z",
            "published_at": None,
            "make_latest": body.get("make_latest", "true"),
        }
        state.releases[release["id"]] = release
        if not release["draft"]:
            state.used_tags.add(tag)
        return 201, _release_view(state, release), None
    release_id = int(params.get("release_id", "0") or 0)
    if op in {
        "repos/get-release",
        "repos/update-release",
        "repos/delete-release",
        "repos/list-release-assets",
        "repos/upload-release-asset",
    }:
        if release_id not in state.releases:
            return 404, {"message": "Not Found"}, None
        release = state.releases[release_id]
        if op == "repos/get-release":
            return 200, _release_view(state, release), None
        if op == "repos/update-release":
            for key in ("name", "body", "draft", "prerelease", "make_latest", "tag_name"):
                if key in body:
                    release[key] = body[key]
            if not release["draft"]:
                release["published_at"] = release["published_at"] or "2026-11-21T03:00:00Z"
                state.used_tags.add(release["tag_name"])
            return 200, _release_view(state, release), None
        if op == "repos/delete-release":
            del state.releases[release_id]
            for asset_id in [a for a, v in state.assets.items() if v["release_id"] == release_id]:
                del state.assets[asset_id]
            return 204, None, None
        if op == "repos/list-release-assets":
            return 200, [_asset_view(state, a) for a in _assets_of(state, release_id)], None
        return _upload(state, release, query, body, headers)
    asset_id = int(params.get("asset_id", "0") or 0)
    if op in {"repos/get-release-asset", "repos/delete-release-asset"}:
        if asset_id not in state.assets:
            return 404, {"message": "Not Found"}, None
        asset = state.assets[asset_id]
        if op == "repos/delete-release-asset":
            owner = state.releases.get(asset["release_id"])
            if state.faults.immutable and owner is not None and not owner["draft"]:
                return 422, {"message": "Cannot delete an asset of an immutable release"}, None
            del state.assets[asset_id]
            return 204, None, None
        if "application/octet-stream" in headers.get("Accept", ""):
            return 200, None, asset["data"]
        return 200, _asset_view(state, asset), None
    if op == "git/delete-ref":
        return 204, None, None
    return 404, {"message": f"{op} is not served by the stand-in"}, None


def _upload(
    state: State, release: dict[str, Any], query: dict[str, str], data: bytes, headers: Any
) -> tuple[int, Any, bytes | None]:
    name = query.get("name", "")
    if state.faults.immutable and not release["draft"]:
        return 422, {"message": "Cannot upload assets to an immutable release"}, None
    if any(a["name"] == name for a in _assets_of(state, release["id"])):
        return (
            422,
            {
                "message": "Validation Failed",
                "errors": [{"resource": "ReleaseAsset", "code": "already_exists", "field": "name"}],
            },
            None,
        )
    asset = {
        "id": state.new_id(),
        "release_id": release["id"],
        "name": name,
        "data": data,
        "content_type": headers.get("Content-Type", "application/octet-stream"),
        "state": "uploaded",
    }
    state.assets[asset["id"]] = asset
    if state.faults.upload_502_starter:
        state.faults.upload_502_starter -= 1
        asset["state"] = "starter"
        asset["data"] = data[: len(data) // 2]
        return 502, {"message": "Server Error"}, None
    return 201, _asset_view(state, asset), None


def _assets_of(state: State, release_id: int) -> list[dict[str, Any]]:
    return sorted((a for a in state.assets.values() if a["release_id"] == release_id), key=lambda a: a["id"])


def _user() -> Any:
    """A simple-user with every required property, from the release schema's author."""
    found = openapi.match("POST", "/repos/o/r/releases")
    assert found is not None
    schema = (found[0].response_schema(201) or {})["properties"]["author"]
    return openapi.synthesize(schema, {"login": "spark-nightly-bot", "id": 7, "type": "Bot", "site_admin": False})


def _release_view(state: State, release: dict[str, Any]) -> Any:
    base = f"https://api.github.invalid/repos/{state.owner}/{state.name}/releases/{release['id']}"
    # github3 expands upload_url itself: it must lead back to this server (GitHub's points at uploads.github.com)
    upload = f"{state.base_url}{PREFIX}/repos/{state.owner}/{state.name}/releases/{release['id']}/assets{{?name,label}}"
    view = {
        "id": release["id"],
        "url": f"{state.base_url}{PREFIX}/repos/{state.owner}/{state.name}/releases/{release['id']}",
        "html_url": f"https://github.invalid/{state.owner}/{state.name}/releases/tag/{release['tag_name']}",
        "assets_url": f"{base}/assets",
        "upload_url": upload,
        "tarball_url": None,
        "zipball_url": None,
        "node_id": f"RE_{release['id']}",
        "tag_name": release["tag_name"],
        "target_commitish": "main",
        "name": release["name"],
        "body": release["body"],
        "draft": release["draft"],
        "prerelease": release["prerelease"],
        "immutable": state.faults.immutable and not release["draft"],
        "created_at": release["created_at"],
        "published_at": release["published_at"],
        "author": _user(),
        "assets": [_asset_view(state, a) for a in _assets_of(state, release["id"])],
    }
    schema = openapi.match("POST", f"/repos/{state.owner}/{state.name}/releases")
    assert schema is not None
    return openapi.synthesize(schema[0].response_schema(201) or {}, view)


def _asset_view(state: State, asset: dict[str, Any]) -> Any:
    url = f"{state.base_url}{PREFIX}/repos/{state.owner}/{state.name}/releases/assets/{asset['id']}"
    view = {
        "id": asset["id"],
        "url": url,
        "browser_download_url": url,
        "node_id": f"RA_{asset['id']}",
        "name": asset["name"],
        "label": None,
        "state": asset["state"],
        "content_type": asset["content_type"],
        "size": len(asset["data"]),
        "digest": f"sha256:{hashlib.sha256(asset['data']).hexdigest()}" if asset["state"] == "uploaded" else None,
        "download_count": 0,
        "created_at": "2026-11-21T02:00:00Z",
        "updated_at": "2026-11-21T02:00:00Z",
        "uploader": _user(),
    }
    return view


def _repo(state: State) -> Any:
    found = openapi.match("GET", f"/repos/{state.owner}/{state.name}")
    assert found is not None
    view = {
        "id": 42,
        "name": state.name,
        "full_name": f"{state.owner}/{state.name}",
        "owner": _user() | {"login": state.owner},
        "url": f"{state.base_url}{PREFIX}/repos/{state.owner}/{state.name}",
        "default_branch": "main",
        "private": False,
    }
    return openapi.synthesize(found[0].response_schema(200) or {}, view, every_property=True)


def _route_issues(state: State, call: Call) -> Answer:
    """Issues, their comments and the repository's labels."""
    op, body = call.op, call.body
    if op == "issues/list-labels-for-repo":
        return 200, _page([_label_view(state, label) for label in state.labels.values()], call.query), None
    if op == "issues/create-label":
        if body["name"] in state.labels:
            return 422, _exists("Label", "name"), None
        label = {"id": state.new_id(), "name": body["name"], "color": body.get("color", "ededed")}
        state.labels[body["name"]] = label | {"description": body.get("description")}
        return 201, _label_view(state, state.labels[body["name"]]), None
    if op == "issues/list-for-repo":
        return 200, _page([_issue_view(state, i, call) for i in _issues_matching(state, call.query)], call.query), None
    if op == "issues/create":
        unknown = sorted(set(body.get("labels", [])) - set(state.labels))
        if unknown:  # refused here so that the tests see the client create its labels first
            return 422, {"message": "Validation Failed", "errors": [{"resource": "Label", "code": "invalid"}]}, None
        state.issues_made += 1
        number = state.issues_made
        state.issues[number] = {
            "id": state.new_id(),
            "number": number,
            "title": body["title"],
            "body": body.get("body"),
            "labels": list(body.get("labels", [])),
            "state": "open",
            "state_reason": None,
            "closed_at": None,
            "comments": [],
        }
        return 201, _issue_view(state, state.issues[number], call), None
    issue = state.issues.get(int(call.params.get("issue_number", "0") or 0))
    if issue is None:
        return 404, {"message": "Not Found"}, None
    if op == "issues/get":
        return 200, _issue_view(state, issue, call), None
    if op == "issues/update":
        for key in ("title", "body", "labels", "state"):
            if key in body:
                issue[key] = body[key]
        if body.get("state") == "closed" and issue["closed_at"] is None:
            issue["closed_at"], issue["state_reason"] = "2026-11-23T03:00:00Z", body.get("state_reason", "completed")
        return 200, _issue_view(state, issue, call), None
    if op == "issues/list-comments":
        return 200, _page([_comment_view(state, issue, c, call) for c in issue["comments"]], call.query), None
    if op == "issues/create-comment":
        comment = {"id": state.new_id(), "body": body["body"]}
        issue["comments"].append(comment)
        return 201, _comment_view(state, issue, comment, call), None
    return 404, {"message": f"{op} is not served by the stand-in"}, None


def _issues_matching(state: State, query: dict[str, str]) -> list[dict[str, Any]]:
    wanted = {name for name in query.get("labels", "").split(",") if name}
    which = query.get("state", "open")
    return [
        issue
        for issue in sorted(state.issues.values(), key=lambda i: i["number"], reverse=True)  # newest first, as GitHub
        if wanted <= set(issue["labels"]) and which in {"all", issue["state"]}
    ]


def _page(items: list[Any], query: dict[str, str]) -> list[Any]:
    page, per_page = int(query.get("page", "1")), int(query.get("per_page", "30"))
    return items[(page - 1) * per_page : page * per_page]


def _schema_of(method: str, path: str, status: int) -> dict[str, Any]:
    found = openapi.match(method, path)
    assert found is not None
    return found[0].response_schema(status) or {}


def _with_nulls(schema: dict[str, Any], view: dict[str, Any]) -> Any:
    """The schema-valid value, keeping the view's explicit nulls (synthesize fills a None with a made-up value)."""
    value = openapi.synthesize(schema, view)
    value.update({key: None for key, given in view.items() if given is None})
    return value


def _bodies(text: str | None, call: Call) -> dict[str, Any]:
    """github3 asks for the `full` media type and reads body_html and body_text; GitHub sends them only when asked."""
    accept = call.headers.get("Accept", "")
    extra: dict[str, Any] = {}
    if "full+json" in accept or "html+json" in accept:
        extra["body_html"] = f"<p>{html.escape(text or '')}</p>"
    if "full+json" in accept or "text+json" in accept:
        extra["body_text"] = text or ""
    return extra


def _label_view(state: State, label: dict[str, Any]) -> Any:
    url = f"{state.base_url}{PREFIX}/repos/{state.owner}/{state.name}/labels/{label['name']}"
    view = label | {"node_id": f"LA_{label['id']}", "url": url, "default": False}
    return _with_nulls(_schema_of("POST", "/repos/o/r/labels", 201), view)


def _issue_view(state: State, issue: dict[str, Any], call: Call) -> Any:
    repo = f"{state.base_url}{PREFIX}/repos/{state.owner}/{state.name}"
    url = f"{repo}/issues/{issue['number']}"
    closed = issue["state"] == "closed"
    view = {
        "id": issue["id"],
        "node_id": f"I_{issue['id']}",
        "number": issue["number"],
        "url": url,
        "repository_url": repo,
        "labels_url": f"{url}/labels{{/name}}",
        "comments_url": f"{url}/comments",
        "events_url": f"{url}/events",
        "html_url": f"https://github.invalid/{state.owner}/{state.name}/issues/{issue['number']}",
        "title": issue["title"],
        "body": issue["body"],
        "state": issue["state"],
        "state_reason": issue["state_reason"],
        "labels": [_label_view(state, state.labels[name]) for name in issue["labels"]],
        "user": _user(),
        "assignee": None,
        "assignees": [],
        "milestone": None,
        "locked": False,
        "comments": len(issue["comments"]),
        "closed_at": issue["closed_at"],
        "closed_by": _user() if closed else None,
        "created_at": "2026-11-20T03:00:00Z",
        "updated_at": "2026-11-21T03:00:00Z",
        "author_association": "NONE",
    } | _bodies(issue["body"], call)
    return _with_nulls(_schema_of("POST", "/repos/o/r/issues", 201), view)


def _comment_view(state: State, issue: dict[str, Any], comment: dict[str, Any], call: Call) -> Any:
    issue_url = f"{state.base_url}{PREFIX}/repos/{state.owner}/{state.name}/issues/{issue['number']}"
    view = {
        "id": comment["id"],
        "node_id": f"IC_{comment['id']}",
        "url": f"{state.base_url}{PREFIX}/repos/{state.owner}/{state.name}/issues/comments/{comment['id']}",
        "html_url": f"https://github.invalid/{state.owner}/{state.name}/issues/{issue['number']}#c{comment['id']}",
        "issue_url": issue_url,
        "body": comment["body"],
        "user": _user(),
        "created_at": "2026-11-21T03:00:00Z",
        "updated_at": "2026-11-21T03:00:00Z",
        "author_association": "NONE",
    } | _bodies(comment["body"], call)
    return _with_nulls(_schema_of("POST", "/repos/o/r/issues/1/comments", 201), view)
