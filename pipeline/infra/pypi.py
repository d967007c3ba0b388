"""A released source distribution from a package index's JSON API, checked against the digest the index lists."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from urllib.parse import urljoin

import httpx

from pipeline.errors import SparkNightlyError, UsageError
from pipeline.infra.runtime import sha256_of

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
        sdists = [u for u in files if u["packagetype"] == "sdist"]
        if not sdists:
            raise SparkNightlyError(f"{name} {version} has no source distribution on the index")
        listed = sdists[0]
        target: Path = dest / str(listed["filename"])
        expected = str(listed["digests"]["sha256"])
        if target.exists() and sha256_of(target) == expected:
            return target
        dest.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".part")
        digest = hashlib.sha256()
        with http.stream("GET", urljoin(listing_url, listed["url"])) as stream, partial.open("wb") as sink:
            stream.raise_for_status()
            for block in stream.iter_bytes(1 << 20):
                digest.update(block)
                sink.write(block)
        if digest.hexdigest() != expected:
            partial.unlink()
            raise SparkNightlyError(f"{listed['filename']}: sha256 {digest.hexdigest()} but the index lists {expected}")
        partial.replace(target)
        return target
    except httpx.HTTPError as exc:
        raise SparkNightlyError(f"cannot download the sdist of {name} {version}: {exc}") from None
    finally:
        if own:
            http.close()
