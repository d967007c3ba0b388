"""The server harness: start a launch plan, wait for real readiness, classify a failed boot, stop and verify.

Readiness is not `/health`: `/v1/models` must name the expected model with the expected
`max_model_len`, then one real completion with logprobs must come back, all before a deadline.
"""

from __future__ import annotations

import collections
import os
import random
import re
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import BootError, EngineError, NonFiniteLogprobsError
from pipeline.infra import procs
from pipeline.infra.launch import API_KEY_ENV, LaunchPlan, client_address
from pipeline.infra.openai_client import Completion, OpenAIClient
from pipeline.progress import Say, quiet

# (cause, patterns) in the order they are tried: the most specific evidence first.
BOOT_CAUSES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("no kernel image for the GPU", (r"no kernel image is available",)),
    ("unsupported PTX version", (r"cudaErrorUnsupportedPtxVersion", r"PTX was compiled with an unsupported toolchain")),
    (
        "out of memory",
        (
            r"CUDA out of memory",
            r"OutOfMemoryError",
            r"Cannot allocate memory",
            r"std::bad_alloc",
            r"\bMemoryError\b",
            r"not enough (?:KV cache|memory)",
        ),
    ),
    ("port in use", (r"Address already in use", r"\[Errno 98\]")),
    # the engine's platform has no Ray executor (vLLM's CPU platform: "current platform cpu does not support ray.")
    ("no Ray executor on this platform", (r"current platform \w+ does not support ray",)),
    (
        "bad argument",
        (r"error: unrecognized arguments", r"error: argument [-\w/ ]+:", r"invalid choice", r"usage: .*\n.*error:"),
    ),
    ("missing module", (r"ModuleNotFoundError: No module named", r"ImportError: ")),
)

# An exception raised at the start of a line, after vLLM's own prefix where it logs one ("(EngineCore pid=7) ERROR
# 12-01 05:36:17 [core.py:1510] NotImplementedError: ..."). The first is the root cause: the engine core's refusal
# comes before the API server's "RuntimeError: Engine core initialization failed. See root cause above.", and an
# exception only named inside a warning's text (vLLM's ulimit warning names `OSError: ...`) is not at a line's start.
_RAISED = re.compile(
    r"^(?:\(\w+ pid=\d+\) ERROR [^\]\n]*\] )?(?P<exception>[A-Za-z_][\w.]*(?:Error|Exception): [^\n]+)$", re.MULTILINE
)

# One readiness probe's limit: a listener that takes the connection and never answers (the port taken by something
# else, an API server still loading) must not hold the boot past its server's exit or its deadline.
READINESS_PROBE_S = 10.0


@dataclass(frozen=True)
class BootDiagnosis:
    """Why a boot failed, with the log line that shows it."""

    cause: str
    evidence: str


def classify_boot_failure(log_text: str, returncode: int | None) -> BootDiagnosis:
    """The most specific known cause in the log, else what the exit code says."""
    for cause, patterns in BOOT_CAUSES:
        for pattern in patterns:
            match = re.search(pattern, log_text)
            if match:
                line_start = log_text.rfind("\n", 0, match.start()) + 1
                line_end = log_text.find("\n", match.end())
                return BootDiagnosis(cause, log_text[line_start : line_end if line_end >= 0 else None].strip())
    if returncode in (-signal.SIGKILL, 137):
        return BootDiagnosis("out of memory", "killed by SIGKILL, most likely the kernel's out-of-memory killer")
    raised = _RAISED.search(log_text)
    if raised:
        return BootDiagnosis("exited", f"exit code {returncode}, {raised.group('exception')}")
    return BootDiagnosis("exited", f"exit code {returncode}")


@dataclass(frozen=True)
class Server:
    """A ready server: its URL, how long it took, and the warm-up answer."""

    base_url: str
    model: str
    port: int
    identity_s: float  # launch to /v1/models naming the expected model
    boot_s: float  # launch to ready, the warm-up completion included
    warmup: Completion
    client: OpenAIClient
    log_path: Path


_HANDED_OUT: collections.deque[int] = collections.deque(maxlen=256)
# Ports chosen on purpose start here: Ray's worker processes take 10002-19999 by default, and the kernel hands out
# ports from its ephemeral range (ip_local_port_range) above.
_PICKED_FROM = 20000
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_PICKER = random.SystemRandom()  # forked pytest workers and nights share no seed


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, not one this process handed out lately (each boot of an entry takes a port,
    and so a container name and owner token, that no boot before it had), and outside the kernel's ephemeral range.

    The server binds it tens of seconds after the pick. A port the kernel hands out by itself (a client's
    connection, another process's bind to port 0: vLLM's engine sockets, Ray, another night's server) can be taken
    in between, and the boot would fail with "Address already in use"; below that range only a process that picks
    its port, as this one does, can take it (boot tries another port then)."""
    low, high = _PICKED_FROM, _ephemeral_low()
    for _ in range(64):
        port = _PICKER.randrange(low, high) if high - low >= 1024 else _kernel_port(host)
        if port not in _HANDED_OUT and port_is_free(port, host):
            break
    _HANDED_OUT.append(port)
    return port


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (32768 where the host does not say)."""
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _kernel_port(host: str) -> int:
    """A port the kernel picks: where the host leaves too few below its ephemeral range."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
    return port


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
        return True


def owner_token(label: str) -> str:
    """The owner marker for one launch: nested under the caller's marker when there is one."""
    parent = os.environ.get(procs.OWNER_ENV) or f"spark-nightly-{os.getpid()}"
    return f"{parent}/{label}"


@contextmanager
def running_server(  # noqa: PLR0913 -- one server's launch facts, by keyword
    plan: LaunchPlan,
    *,
    model: str,
    max_model_len: int | None,
    port: int,
    deadline_s: float,
    log_path: Path,
    owner: str,
    say: Say = quiet,
    alive: Callable[[], Exception | None] | None = None,
) -> Iterator[Server]:
    """Start the plan, wait for readiness, yield the Server; always stop everything and verify it is gone.

    The plan's secrets (an API key made for this boot) reach the processes' environment and the client's header,
    nothing else; the night's own tokens (procs.SECRET_VARIABLES) never reach them. `alive` names what the server
    needs beside its own process (a cluster's other nodes): an error it returns ends the boot as that error."""
    env = procs.without_secrets() | dict(plan.env) | dict(plan.secrets)
    host = client_address(plan.listen)
    started: list[procs.Process] = []
    try:
        for index, step in enumerate(plan.steps):
            step_log = log_path if step is plan.server else log_path.with_name(f"{log_path.stem}.step{index}.log")
            started.append(procs.Process(step.runnable(), step_log, env=env, owner=owner))
        server = started[-1]
        say(f"booting {model} on port {port} (deadline {deadline_s:g} s), log {log_path}")
        client = OpenAIClient(
            f"http://{host}:{port}", timeout_s=max(deadline_s, 30.0), api_key=plan.secrets.get(API_KEY_ENV)
        )
        _wait_for_models(server, client, model=model, max_model_len=max_model_len, deadline_s=deadline_s, alive=alive)
        identity_s = server.elapsed_s()
        remaining = max(deadline_s - server.elapsed_s(), 1.0)
        warmup = _warm_up(server, client, model, remaining)
        boot_s = server.elapsed_s()
        say(f"ready in {boot_s:.1f} s: {client.base_url}")
        yield Server(client.base_url, model, port, identity_s, boot_s, warmup, client, log_path)
    finally:
        _stop_all(started, plan, owner=owner, port=port, host=host, log_path=log_path, say=say)


def _wait_for_models(
    server: procs.Process,
    client: OpenAIClient,
    *,
    model: str,
    max_model_len: int | None,
    deadline_s: float,
    alive: Callable[[], Exception | None] | None,
) -> None:
    while True:
        if alive is not None and (lost := alive()) is not None:
            raise lost
        code = server.poll()
        if code is not None:
            diagnosis = classify_boot_failure(server.tail(200), code)
            raise BootError(
                diagnosis.cause,
                f"the server exited with code {code} while booting: {diagnosis.evidence}",
                server.tail(),
                str(server.log_path),
            )
        if server.elapsed_s() > deadline_s:
            raise BootError(
                "timeout",
                f"not ready after {deadline_s:g} s; stopped at the deadline",
                server.tail(),
                str(server.log_path),
            )
        try:
            served = client.models(timeout_s=READINESS_PROBE_S)
        except EngineError:
            server.wait(0.5)
            continue
        ids = [m.id for m in served]
        if model not in ids:
            raise BootError(
                "wrong model", f"/v1/models serves {ids}, expected '{model}'", server.tail(), str(server.log_path)
            )
        length = next(m.max_model_len for m in served if m.id == model)
        if max_model_len is not None and length != max_model_len:
            raise BootError(
                "wrong max_model_len",
                f"/v1/models reports max_model_len {length}, expected {max_model_len}",
                server.tail(),
                str(server.log_path),
            )
        return


def _warm_up(server: procs.Process, client: OpenAIClient, model: str, remaining_s: float) -> Completion:
    """One real completion with logprobs: a deadlocked engine can still answer /v1/models."""
    result: list[Completion] = []
    failure: list[BaseException] = []

    def ask() -> None:
        messages = [{"role": "user", "content": "Say OK."}]
        try:
            try:
                result.append(client.chat(model, messages, max_tokens=4, top_logprobs=1))
            except NonFiniteLogprobsError:
                # the engine computes but its logprobs are NaN: it is ready, and the golden stage will say why
                result.append(client.chat(model, messages, max_tokens=4))
        except BaseException as exc:  # handed to the waiting thread, which decides
            failure.append(exc)

    worker = threading.Thread(target=ask, daemon=True)
    worker.start()
    deadline = time.monotonic() + remaining_s
    while worker.is_alive() and time.monotonic() < deadline:
        if server.poll() is not None:
            break
        worker.join(0.2)
    if result:
        return result[0]
    if server.poll() is not None:
        diagnosis = classify_boot_failure(server.tail(200), server.poll())
        raise BootError(
            diagnosis.cause,
            f"the server died during the warm-up request: {diagnosis.evidence}",
            server.tail(),
            str(server.log_path),
        )
    if failure:
        raise BootError("warm-up failed", str(failure[0]), server.tail(), str(server.log_path))
    raise BootError(
        "timeout", "the warm-up completion did not finish before the deadline", server.tail(), str(server.log_path)
    )


def _stop_all(
    started: list[procs.Process], plan: LaunchPlan, *, owner: str, port: int, host: str, log_path: Path, say: Say
) -> None:
    """Stop in reverse order of start, run the plan's cleanup, then prove nothing is left and the port is free."""
    previous = _ignore_sigint()  # a second Ctrl-C must not cut the clean-up short
    try:
        for process in reversed(started):
            process.stop()
        for step in plan.cleanup:
            procs.run(step.runnable(), log_path.with_name(f"{log_path.stem}.cleanup.log"), timeout_s=60, check=False)
        leftovers = procs.owned_processes(owner)
        for pid in leftovers:
            os.kill(pid, signal.SIGKILL)
        if started:
            say(f"stopped; port {port} {'free' if _port_freed(port, host) else 'STILL IN USE'}")
        if leftovers:
            raise EngineError(f"processes {leftovers} outlived the server and were killed")
    finally:
        _restore_sigint(previous)


def _port_freed(port: int, host: str, wait_s: float = 5.0) -> bool:
    deadline = time.monotonic() + wait_s
    while not port_is_free(port, host):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _ignore_sigint() -> object:
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGINT, signal.SIG_IGN)


def _restore_sigint(previous: object) -> None:
    if previous is not None:
        signal.signal(signal.SIGINT, previous)  # type: ignore[arg-type]
