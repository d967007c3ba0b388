"""The cache lock between real processes: a second maker cannot take it while the first holds it, and a maker
that dies (SIGKILL) leaves it free for the next one."""

from __future__ import annotations

import fcntl
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.infra.cache_lock import exclusive

pytestmark = pytest.mark.integration

HOLDER = """
import sys, time
from pathlib import Path
from pipeline.infra.cache_lock import exclusive
with exclusive(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(300)
"""


def _taken(entry: Path) -> bool:
    with (entry.parent / f"{entry.name}.lock").open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def test_a_second_maker_waits_for_the_first_and_a_killed_maker_frees_the_entry(tmp_path: Path) -> None:
    entry = tmp_path / "runtimes" / "cpu-0123"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(entry)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert _taken(entry)  # another maker would wait here
    finally:
        holder.send_signal(signal.SIGKILL)  # dies holding it, as a crashed night would
        holder.wait()
    assert not _taken(entry)
    with exclusive(entry):  # taken at once, and held against any other maker until the block ends
        assert _taken(entry)
    assert not _taken(entry)
