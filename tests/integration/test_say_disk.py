"""`./scripts/say-disk`, which `./scripts/test` runs before each phase and at the end: on a fresh machine the cache
and its parents do not exist yet (no ~/.cache at all), and the landing run must still start. The free space is read
on the nearest folder above the cache that exists, the disk the cache will be made on."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.integration.conftest import ROOT

pytestmark = pytest.mark.integration

SAY_DISK = ROOT / "scripts" / "say-disk"
SAID = re.compile(
    r"test: (?P<label>.+): (?P<free_tmp>\S+) free under (?P<tmp>\S+), "
    r"(?P<free_cache>\S+) under the cache (?P<cache>.+)"
)


def _say_disk(*args: str, tmpdir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    return subprocess.run([str(SAY_DISK), *args], capture_output=True, text=True, env=env, timeout=30, check=False)


def test_a_cache_whose_parents_do_not_exist_yet_is_said_on_the_disk_it_will_be_made_on(tmp_path: Path) -> None:
    cache = tmp_path / "home" / ".cache" / "spark-nightly"  # neither .cache nor home exists: a fresh machine
    done = _say_disk("before the checks", str(cache), tmpdir=tmp_path)
    assert done.returncode == 0, done.stderr
    said = SAID.fullmatch(done.stdout.strip())
    assert said is not None, done.stdout
    assert said["label"] == "before the checks" and said["cache"] == str(cache), done.stdout
    # Both figures are real df answers for tmp_path's disk (the cache's nearest existing folder is tmp_path), not "?"
    assert said["tmp"] == str(tmp_path), done.stdout
    assert "?" not in (said["free_tmp"], said["free_cache"]), done.stdout


def test_a_wrong_call_is_refused_with_its_usage(tmp_path: Path) -> None:
    done = _say_disk("only a label", tmpdir=tmp_path)
    assert done.returncode == 2
    assert "expected LABEL CACHE" in done.stderr
