"""The tests' git repositories change only when a test changes them: nothing repacks them in the background."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gitrepos import Upstream

pytestmark = pytest.mark.integration


def test_a_commit_past_gits_gc_threshold_leaves_the_repository_as_it_was_written(tmp_path: Path) -> None:
    # Past the threshold git gc's the repository after the commit, detached, while the next fixture may already be
    # copying it into the cache's test-repos/ or a test's folder. The repository's own settings here make that gc
    # due (a threshold of 256 loose objects) and run in the foreground, so the test sees what it would have done.
    upstream = Upstream(tmp_path)
    upstream.git("config", "gc.auto", "256")
    upstream.git("config", "gc.autoDetach", "false")
    for number in range(3000):
        (upstream.work / f"file{number}.txt").write_text(f"{number}\n")
    upstream.git("add", "--all")
    upstream.git("commit", "--quiet", "-m", "3,000 files")

    counts = dict(line.split(": ", 1) for line in upstream.git("count-objects", "-v").splitlines())
    assert counts["packs"] == "0", counts
    assert int(counts["count"]) == 3002, counts  # every blob, the tree and the commit, loose as written
