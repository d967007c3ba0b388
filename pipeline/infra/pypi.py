"""A released source distribution from a package index's JSON API, checked against the digest the index lists."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from urllib.parse import urljoin

import httpx

from pipeline.errors import SparkNightlyError, UsageError
from pipeline.infra.files import sha256_of

PYPI_JSON = "https://pypi.org/pypi"


def parse_pinned(spec: str) -> tuple[str, str]:
    """`name==version`, the only form a reproducible build accepts."""
    match = re.fullmatch(r"\s*([A-Za-z0-9._-]+)\s*==\s*([A-Za-z0-9.+!_-]+)\s*", spec)
    if not match:
        raise UsageError(f"{spec!r}: name the sdist as name==version, e.g. flashinfer-python==0.7.2.post1")
    return match[1], match[2]


def download_sdist(spec: str, dest: Path, *, client: httpx.Client | None = None, index: str = PYPI_JSON) -> Path:
    """The sdist of `name==version` in `dest` (reused when already there with the listed sha256)."""
    name, version = parse_pinned(spec)
    return download_release_file(name, version, None, dest, client=client, index=index)


def download_release_file(
    name: str,
    version: str,
    filename: str | None,
    dest: Path,
    *,
    client: httpx.Client | None = None,
    index: str = PYPI_JSON,
) -> Path:
    """One file of a release (the sdist when `filename` is None) in `dest`, checked against the sha256 the index
    lists; reused when already there with that sha256. Fetched as a file, never built or installed."""
    own = client is None
    http = client or httpx.Client(timeout=httpx.Timeout(60.0, read=300.0), follow_redirects=True)
    try:
        listing_url = f"{index}/{name}/json"  # every release's files; served by mirrors that lack per-version pages
        response = http.get(listing_url)
        if response.status_code == 404:
            raise SparkNightlyError(f"the index has no project {name}")
        response.raise_for_status()
        files = response.json().get("releases", {}).get(version)
        if files is None:
            raise SparkNightlyError(f"the index has no {name} {version}")
        if filename is None:
            chosen = [u for u in files if u["packagetype"] == "sdist"]
            if not chosen:
                raise SparkNightlyError(f"{name} {version} has no source distribution on the index")
        else:
            chosen = [u for u in files if u["filename"] == filename]
            if not chosen:
                raise SparkNightlyError(f"{name} {version} has no file {filename} on the index")
        listed = chosen[0]
        target: Path = dest / str(listed["filename"])
        expected = str(listed["digests"]["sha256"])
        if target.exists() and sha256_of(target) == expected:
            return target
        dest.mkdir(parents=True, exist_ok=True)
        _stream(http, urljoin(listing_url, listed["url"]), target, expected)
        return target
    except httpx.HTTPError as exc:
        raise SparkNightlyError(f"cannot download {filename or 'the sdist'} of {name} {version}: {exc}") from None
    finally:
        if own:
            http.close()


def _stream(http: httpx.Client, url: str, target: Path, expected: str) -> None:
    """Download into a partial file, hashing as it goes; it takes its name only when the sha256 matched."""
    partial = target.with_name(target.name + ".part")
    digest = hashlib.sha256()
    with http.stream("GET", url) as stream, partial.open("wb") as sink:
        stream.raise_for_status()
        for block in stream.iter_bytes(1 << 20):
            digest.update(block)
            sink.write(block)
    if digest.hexdigest() != expected:
        partial.unlink()
        raise SparkNightlyError(f"{target.name}: sha256 {digest.hexdigest()} but the index lists {expected}")
    partial.replace(target)
