"""A node's stop script on real processes: what the launch marked is killed by its pid, and the processes it cannot
read are passed over in silence."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from pipeline.config.cluster import Node
from pipeline.infra import nodes
from pipeline.infra.procs import OWNER_ENV

pytestmark = pytest.mark.integration


def test_a_node_stop_kills_its_marked_processes_and_is_quiet_about_those_it_cannot_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stop script reads every process's environment for the launch's marker; a process that ends between the
    listing and the reading (Ray's helpers do all the time), or one another user owns, is passed over without a
    word: on the first two-GPU night each node's stop log held a line for every such process of the host."""
    marked = subprocess.Popen(["sleep", "60"])
    try:
        proc = tmp_path / "proc"
        (proc / str(marked.pid)).mkdir(parents=True)
        (proc / str(marked.pid) / "environ").write_bytes(f"HOME=/x\0{OWNER_ENV}=night-1\0".encode())
        (proc / "7").mkdir()
        (proc / "7" / "environ").symlink_to(tmp_path / "gone")  # a process that ended after the listing
        monkeypatch.setattr(nodes, "PROC", str(proc))
        shell = nodes.NodeShell(Node("spark-a", "fast0", "10.0.0.1"), local=True, cache_dir=str(tmp_path / "cache"))
        argv = nodes.FolderRuntime("/runtime").stop(shell, "launch", owner="night-1")
        done = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=30)
        assert (done.returncode, done.stderr) == (0, "")
        assert marked.wait(10) == -signal.SIGKILL
    finally:
        marked.kill()
        marked.wait()
