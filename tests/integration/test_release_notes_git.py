"""The release notes' commit counts come from the source's real git mirror: a range counted, an unknown commit or a
source never mirrored left uncounted rather than guessed."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest

from pipeline.infra.git import commits_between, ensure_mirror, fetch
from tests.gitrepos import Upstream

pytestmark = pytest.mark.integration


def test_commits_between_two_nights_are_counted_by_the_sources_mirror(tmp_path: Path) -> None:
    upstream = Upstream(tmp_path / "up")
    old = upstream.commit({"a.py": "1"}, "first")
    for n in range(3):
        new = upstream.commit({"a.py": str(n + 2)}, f"change {n}")
    upstream.publish_main()
    mirror = ensure_mirror(upstream.url, tmp_path / "cache")
    fetch(mirror, ["+refs/heads/*:refs/heads/*"], tmp_path / "fetch.log")
    count = partial(commits_between, tmp_path / "cache")
    assert count(upstream.url, old, new) == 3
    assert count(upstream.url, "0" * 40, new) is None  # a commit the mirror lacks: not counted, never guessed
    assert count("https://github.com/o/never-mirrored.git", old, new) is None
