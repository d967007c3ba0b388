"""The vLLM API servers this test started, sampled from the process table while it runs.

A server is an API server process (`vllm serve` or `-m vllm.entrypoints.openai.api_server`) named by its
`--served-model-name` and `--port`; its engine workers (forked with the same command line) share the port, so a
server counts once. Only descendants of the test's own process count: beside it, other tests (other pytest-xdist
workers) serve the same model. The census keeps every sample's servers per model: the most of one model up at
once, and every port each model was served on (each boot in turns takes a port of its own).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

SAMPLE_S = 0.25  # often enough to see two servers overlap for a boot's length, cheap enough for a quiet host


def _api_server(argv: list[str]) -> tuple[str, int] | None:
    """(served model name, port) of an API server's command line, else None."""
    module = "vllm.entrypoints.openai.api_server" in argv
    cli = any(Path(a).name == "vllm" for a in argv) and "serve" in argv
    if not (module or cli) or "--port" not in argv or "--served-model-name" not in argv:
        return None
    try:
        return argv[argv.index("--served-model-name") + 1], int(argv[argv.index("--port") + 1])
    except (IndexError, ValueError):
        return None


def servers_now(root: int) -> dict[str, set[int]]:
    """Each served model's ports, from the command lines of the processes descended from `root`."""
    parents: dict[int, int] = {}
    commands: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:  # ended between the listing and the read
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the command's name
        commands[int(entry.name)] = argv
    found: dict[str, set[int]] = {}
    for pid, argv in commands.items():
        server = _api_server(argv)
        if server is not None and _descends(pid, root, parents):
            found.setdefault(server[0], set()).add(server[1])
    return found


def _descends(pid: int, root: int, parents: dict[int, int]) -> bool:
    seen = set()
    while pid not in seen and pid > 1:
        if pid == root:
            return True
        seen.add(pid)
        pid = parents.get(pid, 0)
    return False


@dataclass
class Census:
    """What the samples saw: the most servers of each model up at once, and every port each was served on."""

    peak: dict[str, int] = field(default_factory=dict)
    ports: dict[str, set[int]] = field(default_factory=dict)
    overlaps: list[dict[str, set[int]]] = field(default_factory=list)  # the samples with two of one model up
    samples: int = 0

    def add(self, now: dict[str, set[int]]) -> None:
        self.samples += 1
        for model, ports in now.items():
            self.peak[model] = max(self.peak.get(model, 0), len(ports))
            self.ports.setdefault(model, set()).update(ports)
        if any(len(ports) > 1 for ports in now.values()):
            self.overlaps.append(now)


@contextmanager
def census() -> Iterator[Census]:
    """Sample the process table every SAMPLE_S until the block ends: the servers this process started."""
    seen = Census()
    done = threading.Event()
    root = os.getpid()

    def sample() -> None:
        while not done.is_set():
            seen.add(servers_now(root))
            done.wait(SAMPLE_S)

    worker = threading.Thread(target=sample, name="server-census", daemon=True)
    worker.start()
    try:
        yield seen
    finally:
        done.set()
        worker.join()
