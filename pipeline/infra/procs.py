"""The only subprocess runner: argv lists, own process group, wall and inactivity timeouts, logs, escalation.

Every process spark-nightly starts goes through here. Each runs in a new session (its own process
group), writes all of its output to a log file, and carries an owner marker in its environment so
that any survivor can be found by that marker and stopped by its pid, never by its name.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import CapturedFailure, ProcessError

OWNER_ENV = "SPARK_NIGHTLY_OWNER"
# Tokens a night may hold (the Hub's for gated weights, GitHub's for releases and alerts): never handed to the code
# it is testing (a server, the smoke probe, the canary), which logs its environment as it pleases
SECRET_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "GITHUB_TOKEN", "GH_TOKEN", "SPARK_NIGHTLY_TOKEN")
TAIL_LINES = 40
_POLL_S = 0.1


def log_tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last `lines` lines of a log file (empty if it does not exist)."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            text = handle.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


@dataclass(frozen=True)
class Finished:
    """A process that ran to its end."""

    argv: tuple[str, ...]
    returncode: int
    duration_s: float
    log_path: Path


class Process:
    """A started process in its own process group, with its output going to a log file."""

    def __init__(
        self,
        argv: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        owner: str | None = None,
    ) -> None:
        self.argv = tuple(argv)
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        full_env = dict(os.environ if env is None else env)
        if owner:
            full_env[OWNER_ENV] = owner
        self.started = time.monotonic()
        with log_path.open("ab") as log:
            log.write(f"$ {' '.join(self.argv)}\n".encode())
            log.flush()
            try:
                self._popen = subprocess.Popen(
                    self.argv,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=full_env,
                    cwd=cwd,
                    start_new_session=True,
                )
            except OSError as exc:
                raise ProcessError(f"cannot start {self.argv[0]}: {exc.strerror}", log_path=str(log_path)) from None
        self.pid = self._popen.pid
        self._members: set[int] = {self.pid}

    def poll(self) -> int | None:
        """The exit code, or None while it runs."""
        self._members |= set(descendants(self.pid))
        return self._popen.poll()

    def wait(self, timeout_s: float) -> int | None:
        try:
            return self._popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def tail(self, lines: int = TAIL_LINES) -> str:
        return log_tail(self.log_path, lines)

    def stop(self, *, int_grace_s: float = 10.0, term_grace_s: float = 10.0) -> int:
        """Stop the whole group: SIGINT, then SIGTERM, then SIGKILL, each with a deadline; then any straggler."""
        self._members |= set(descendants(self.pid))
        for sig, grace in ((signal.SIGINT, int_grace_s), (signal.SIGTERM, term_grace_s), (signal.SIGKILL, 5.0)):
            if self._popen.poll() is None or self._alive_members():
                _signal_group(self.pid, sig)
                deadline = time.monotonic() + grace
                while time.monotonic() < deadline and (self._popen.poll() is None or self._alive_members()):
                    if self._popen.poll() is None:
                        # a child started while we stop (vLLM spawning its engine at a boot deadline) is ours too,
                        # and only findable while its parent lives: once orphaned it is no one's descendant
                        self._members |= set(descendants(self.pid))
                    time.sleep(_POLL_S)
        for pid in self._alive_members():  # a child that left our group: still ours, stop it by its pid
            _kill(pid, signal.SIGKILL)
        code = self._popen.wait()
        return code

    def _alive_members(self) -> list[int]:
        return [pid for pid in self._members if pid != self.pid and _alive(pid)]


def without_secrets(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment (or `env`) without the tokens of SECRET_VARIABLES."""
    return {k: v for k, v in (os.environ if env is None else env).items() if k not in SECRET_VARIABLES}


def run(
    argv: Sequence[str],
    log_path: Path,
    *,
    timeout_s: float,
    inactivity_s: float | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    owner: str | None = None,
    check: bool = True,
) -> Finished:
    """Run to completion; raise ProcessError (with the log's tail) on failure, timeout or silence."""
    process = Process(argv, log_path, env=env, cwd=cwd, owner=owner)
    return finish(process, timeout_s=timeout_s, inactivity_s=inactivity_s, check=check)


def feed(
    argv: Sequence[str], data: bytes, log_path: Path, *, timeout_s: float, env: Mapping[str, str] | None = None
) -> int:
    """Run a command with `data` on its stdin (a file written on another host through ssh); its exit code.

    Its own session and a deadline as in run(); the output goes to the log."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        log.write(f"$ {' '.join(argv)}\n".encode())
        log.flush()
        try:
            process = subprocess.Popen(
                list(argv),
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=None if env is None else dict(env),
            )
        except OSError as exc:
            raise ProcessError(f"cannot start {argv[0]}: {exc.strerror}", log_path=str(log_path)) from None
        try:
            process.communicate(data, timeout=timeout_s)
        except (subprocess.TimeoutExpired, KeyboardInterrupt) as exc:
            _signal_group(process.pid, signal.SIGKILL)
            process.wait()
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise ProcessError(f"{_name(argv)} timed out after {timeout_s:g} s", log_path=str(log_path)) from None
    return process.returncode


def finish(process: Process, *, timeout_s: float, inactivity_s: float | None = None, check: bool = True) -> Finished:
    """Wait for a started process as `run` does: stopped and raised on a timeout, silence or Ctrl-C."""
    log_path = process.log_path
    last_size, last_change = -1, time.monotonic()
    try:
        while (code := process.poll()) is None:
            now = time.monotonic()
            size = log_path.stat().st_size
            if size != last_size:
                last_size, last_change = size, now
            if process.elapsed_s() > timeout_s:
                process.stop()
                raise _failure(process, f"timed out after {timeout_s:g} s")
            if inactivity_s is not None and now - last_change > inactivity_s:
                process.stop()
                raise _failure(process, f"printed nothing for {inactivity_s:g} s and was stopped")
            process.wait(_POLL_S * 2)
    except KeyboardInterrupt:
        process.stop()
        raise
    finished = Finished(process.argv, code, process.elapsed_s(), log_path)
    if check and code != 0:
        raise _failure(process, f"exited with code {code}")
    return finished


def capture(
    argv: Sequence[str],
    *,
    timeout_s: float,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = True,
) -> str:
    """Run a short command whose output is the answer (git rev-parse, tool listings) and return its stdout.

    Same discipline as run(): its own session, a deadline, the group stopped on timeout or Ctrl-C; stderr
    goes into the error, never the output.
    """
    try:
        process = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            env=None if env is None else dict(env),
            start_new_session=True,
        )
    except OSError as exc:
        raise ProcessError(f"cannot start {argv[0]}: {exc.strerror}") from None
    try:
        out, err = process.communicate(timeout=timeout_s)
    except (subprocess.TimeoutExpired, KeyboardInterrupt) as exc:
        _signal_group(process.pid, signal.SIGKILL)
        process.communicate()
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise ProcessError(f"{_name(argv)} timed out after {timeout_s:g} s") from None
    if check and process.returncode != 0:
        detail = err.decode("utf-8", errors="replace").strip()
        raise CapturedFailure(f"{_name(argv)} exited with code {process.returncode}", process.returncode, detail)
    return out.decode("utf-8", errors="replace")


def _name(argv: Sequence[str]) -> str:
    return Path(argv[0]).name + (f" {argv[1]}" if len(argv) > 1 else "")


def _failure(process: Process, what: str) -> ProcessError:
    return ProcessError(f"{_name(process.argv)} {what}", log_tail=process.tail(), log_path=str(process.log_path))


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid`, read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        parent = _parent_of(int(entry.name))
        if parent is not None:
            children.setdefault(parent, []).append(int(entry.name))
    found, queue = [], [pid]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found


def owned_processes(owner: str | None) -> list[int]:
    """Live processes of this owner (or of any owner, for None), whatever they renamed themselves to.

    A process is ours when its environment carries the marker, or when the leader of its session
    does: every process we start leads a new session, and vLLM renames its workers with
    setproctitle, which overwrites what /proc shows of their environment.
    """
    stats = {pid: stat for pid in _pids() if (stat := stat_fields(pid)) is not None}
    marked = {pid for pid in stats if _marked(pid, owner)}
    return [
        pid
        for pid, fields in stats.items()
        if pid != os.getpid() and fields[0] != "Z" and (pid in marked or int(fields[3]) in marked)
    ]


def _pids() -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def process_files(name: str, proc: Path = Path("/proc")) -> Iterator[tuple[int, str]]:
    """Each live process's /proc/<pid>/<name> as text (processes that vanish or hide it are passed over)."""
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            yield int(entry.name), (entry / name).read_text()
        except OSError:
            continue


def stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name: state, ppid, pgrp, session, ..."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _marked(pid: int, owner: str | None) -> bool:
    try:
        variables = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    if owner is None:
        return any(v.startswith(f"{OWNER_ENV}=".encode()) for v in variables)
    marker, nested = f"{OWNER_ENV}={owner}".encode(), f"{OWNER_ENV}={owner}/".encode()
    return any(v == marker or v.startswith(nested) for v in variables)


def _parent_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])  # the command name may hold spaces and ')'


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie has exited; only its parent's wait is missing


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _kill(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
