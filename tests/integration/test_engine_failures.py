"""The harness against a real vLLM that fails: bad flags, the wrong model, a hung start, a taken port, Ctrl-C. Nothing
is left."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

import pytest

from pipeline.errors import BootError
from pipeline.infra import procs, server
from pipeline.infra.server import free_port, port_is_free
from pipeline.stages.prove import boot as boot_module
from pipeline.stages.prove.boot import boot
from tests.integration.conftest import CPU_ENTRY, ROOT, CpuEngine, Place

pytestmark = pytest.mark.integration


def _boot_expecting_failure(
    engine: CpuEngine, tmp_path: Path, *, extra_args: tuple[str, ...] = (), deadline_s: float | None = None
) -> tuple[BootError, float, int]:
    serve = dict(engine.entry.serve) | {"extra_args": [*engine.entry.serve.get("extra_args", ()), *extra_args]}
    entry = replace(engine.entry, serve=MappingProxyType(serve))
    port = free_port()
    started = time.monotonic()
    with (
        pytest.raises(BootError) as caught,
        boot(entry, engine.candidate, cache_dir=engine.cache_dir, log_dir=tmp_path, port=port, deadline_s=deadline_s),
    ):
        pytest.fail("the server should not have become ready")
    return caught.value, time.monotonic() - started, port


def _nothing_left(port: int) -> None:
    assert procs.owned_processes(os.environ[procs.OWNER_ENV]) == []
    assert port_is_free(port)


def test_a_bad_serve_argument_fails_fast_with_its_reason(cpu_engine: CpuEngine, tmp_path: Path) -> None:
    error, elapsed, port = _boot_expecting_failure(cpu_engine, tmp_path, extra_args=("--no-such-flag",))
    assert error.cause == "bad argument"
    assert "--no-such-flag" in error.detail
    assert elapsed < 60
    _nothing_left(port)


def test_a_server_answering_as_another_model_is_caught(cpu_engine: CpuEngine, tmp_path: Path) -> None:
    error, _, port = _boot_expecting_failure(cpu_engine, tmp_path, extra_args=("--served-model-name", "someone-else"))
    assert error.cause == "wrong model"
    assert "['someone-else']" in error.detail and cpu_engine.entry.served_model_name in error.detail
    _nothing_left(port)


def test_a_start_that_does_not_finish_is_stopped_at_its_deadline(cpu_engine: CpuEngine, tmp_path: Path) -> None:
    error, elapsed, port = _boot_expecting_failure(cpu_engine, tmp_path, deadline_s=4)
    assert error.cause == "timeout"
    assert "not ready after 4 s" in error.detail
    assert elapsed < 4 + 25  # the deadline plus the stop's escalation deadlines
    _nothing_left(port)


@contextmanager
def _listening() -> Iterator[int]:
    """A port something else listens on (on every address, as a server of the host's would) until the block ends."""
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))  # every address the server might listen on
        taken.listen()
        yield taken.getsockname()[1]


def test_a_port_taken_before_the_server_binds_it_is_left_for_another(
    cpu_engine: CpuEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A port picked free and taken by the time vLLM binds it (the CI's calibration met it beside another worker) is
    the host's race, not the build's: the boot serves on another, and the first try's log is kept."""
    heard: list[str] = []
    entry, candidate = cpu_engine.entry, cpu_engine.candidate
    with _listening() as taken:
        offered = iter([taken])
        monkeypatch.setattr(boot_module, "free_port", lambda: next(offered, None) or free_port())
        with boot(entry, candidate, cache_dir=cpu_engine.cache_dir, log_dir=tmp_path, say=heard.append) as up:
            assert up.port != taken
            assert up.warmup.text  # it served
    kept = tmp_path / f"{entry.id}-server.port-{taken}-in-use.log"
    assert "Address already in use" in kept.read_text()
    assert [line for line in heard if f"port {taken} was taken" in line] != []
    _nothing_left(up.port)


def test_a_picked_port_is_free_and_below_the_kernels_ephemeral_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CI's calibration broke on this: a port picked with bind(0) was taken by another process's ephemeral socket
    before vLLM bound it, and the boot failed as "port in use", a FAIL of a good build."""
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("32768\t60999\n")
    monkeypatch.setattr(server, "_EPHEMERAL_RANGE", ranges)
    picks = [server.free_port() for _ in range(50)]
    assert len(picks) == 50
    assert [port for port in picks if not 20000 <= port < 32768] == []
    assert len(set(picks)) == 50  # none handed out twice lately

    free = next(port for port in range(20000, 32768) if port not in picks and server.port_is_free(port))
    with _listening() as taken:
        offered = iter([taken, free])
        monkeypatch.setattr(server._PICKER, "randrange", lambda low, high: next(offered))
        assert server.free_port() == free  # the port something listens on is passed over

    ranges.write_text("20500 60999\n")  # too few below the range: the kernel picks, as before
    monkeypatch.undo()
    monkeypatch.setattr(server, "_EPHEMERAL_RANGE", ranges)
    assert server.free_port() >= 20500


@pytest.mark.parametrize("moment", ["booting", "ready:"])
def test_ctrl_c_leaves_no_process_and_a_free_port(
    moment: str, place: Place, cpu_engine: CpuEngine, tmp_path: Path
) -> None:
    port = free_port()
    marker = f"{os.environ[procs.OWNER_ENV]}/ctrl-c-{moment.rstrip(':')}"
    # the place's configuration: its runs folder, and the server on this worker's core, not on the other's
    env = dict(os.environ) | {procs.OWNER_ENV: marker, "SPARK_NIGHTLY_PATHS_CACHE": str(cpu_engine.cache_dir)}
    log = tmp_path / "harness.log"
    with log.open("wb") as out:
        harness = subprocess.Popen(
            [sys.executable, "-m", "pipeline", "engine", "up", CPU_ENTRY, "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=env,
        )
        try:
            _wait_for_line(log, moment, harness, timeout_s=240)
            if moment == "booting":
                time.sleep(3)  # inside the boot: the engine is loading
            harness.send_signal(signal.SIGINT)
            code = harness.wait(timeout=60)
        finally:
            if harness.poll() is None:
                harness.kill()
    assert code == 130, log.read_text()
    assert "error: interrupted" in log.read_text()
    assert procs.owned_processes(marker) == []
    assert port_is_free(port)


def _wait_for_line(log: Path, text: str, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        if process.poll() is not None:
            pytest.fail(f"the harness exited early:\n{log.read_text()}")
        time.sleep(0.2)
    pytest.fail(f"no {text!r} within {timeout_s} s:\n{log.read_text()}")
