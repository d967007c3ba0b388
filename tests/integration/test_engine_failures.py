"""The harness against a real vLLM that fails: bad flags, the wrong model, a hung start, Ctrl-C. Nothing is left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

import pytest

from pipeline.errors import BootError
from pipeline.infra import procs
from pipeline.infra.server import free_port, port_is_free
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
