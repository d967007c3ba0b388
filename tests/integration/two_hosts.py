"""Two hosts on one machine, spark-a (head) and spark-b (worker): network namespaces joined by two veth links."""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.infra.procs import log_tail

HEAD_NAME = "spark-a"
WORKER_NAME = "spark-b"
FAST_IFACE = "fast0"
MGMT_IFACE = "mgmt0"
# the first sshd on PATH (a machine whose image lacks one puts benchmarks/two_host_tools.py's wrapper there), else
# Debian's; sshd re-execs itself for each connection, so the path is absolute
SSHD = Path(shutil.which("sshd") or "/usr/sbin/sshd")
RAY_TMP = Path("/tmp/ray")  # where Ray keeps its sessions unless told otherwise
# sshd chroots its pre-authentication child here and will not start without it; Debian makes it only when an init
# system starts the packaged sshd, which none does here
PRIVSEP_DIR = Path("/run/sshd")
# One lock file per second octet: a call holds its octet's lock for its whole life, so calls in concurrent pytest
# workers (or in one process) never share a subnet
SUBNET_LOCKS = Path(tempfile.gettempdir()) / "spark-nightly-two-hosts"
SUBNETS = range(64, 128)
# What a two-GPU machine's hosts must set in every process (NVLink multicast off): the night's own, and each node's
# Ray through its `env` in cluster.yaml (across ssh on the worker)
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
READY_S = 15.0
STOP_GRACE_S = 5.0
_POLL_S = 0.1
_calls = itertools.count()


@dataclass(frozen=True)
class TwoHosts:
    """The two hosts: their namespaces, link addresses (no prefix), and the ssh client config that reaches spark-b."""

    head_ns: str
    worker_ns: str
    fast_a: str
    fast_b: str
    mgmt_a: str
    mgmt_b: str
    ssh_config: Path
    head_tmp: Path  # spark-a's own /tmp/ray (each host has its own; Ray keeps its sockets there)
    interface: str = FAST_IFACE

    def on_head(self, argv: Sequence[str]) -> list[str]:
        """An argv that runs `argv` on spark-a: in the head's namespace, under the head's host name."""
        return on_host(self.head_ns, HEAD_NAME, argv, self.head_tmp)

    def ssh_worker(self, argv: Sequence[str]) -> list[str]:
        """An argv that runs `argv` on spark-b over ssh from spark-a (ssh joins it into one remote shell line)."""
        return self.on_head(["ssh", "-F", str(self.ssh_config), WORKER_NAME, *argv])


def on_host(ns: str, hostname: str, argv: Sequence[str], ray_tmp: Path) -> list[str]:
    """An argv that runs `argv` in namespace `ns` under host name `hostname`, with `ray_tmp` as its /tmp/ray; the
    machine's own name and /tmp/ray stay as they are."""
    # UTS and mount namespaces of the command's own, so the new name and the folder are seen by it and its children
    # only: two hosts do not share Ray's session folder (a worker node takes the head's temp dir path, whatever it
    # is told, and its sockets would collide with the head's)
    target = RAY_TMP.as_posix()
    script = (
        f"hostname {hostname} && mkdir -p {shlex.quote(str(ray_tmp))} && mount --bind {shlex.quote(str(ray_tmp))} "
        f'{target} && exec "$@"'
    )
    RAY_TMP.mkdir(exist_ok=True)
    return ["ip", "netns", "exec", ns, "unshare", "--uts", "--mount", "sh", "-c", script, "sh", *argv]


def link_bytes(ns: str, iface: str) -> int:
    """Bytes received plus bytes sent so far by interface `iface` of namespace `ns`."""
    (link,) = json.loads(_run(["ip", "-n", ns, "-s", "-j", "link", "show", iface]))
    stats = link["stats64"]
    return int(stats["rx"]["bytes"]) + int(stats["tx"]["bytes"])


def head_link_bytes(hosts: TwoHosts) -> tuple[int, int]:
    """spark-a's bytes so far on the fast link and on the management network."""
    return link_bytes(hosts.head_ns, FAST_IFACE), link_bytes(hosts.head_ns, MGMT_IFACE)


def set_worker_fast_link(hosts: TwoHosts, *, up: bool) -> None:
    """spark-b's end of the fast link set down, or up again: then only once both ends say so, as when the hosts
    were made."""
    _run(["ip", "-n", hosts.worker_ns, "link", "set", FAST_IFACE, "up" if up else "down"])
    if up:
        _await_links_up(hosts.head_ns, hosts.worker_ns)


def stop_gently(process: subprocess.Popen[Any], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM (a night stops its cluster on both hosts on it), then SIGKILL after `grace_s`. Popen's own signalling
    does nothing once the pid is reaped, so a reused pid is never hit."""
    process.terminate()
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(grace_s)


def pids(ns: str) -> list[int]:
    """The live processes inside namespace `ns`."""
    return [int(word) for word in _run(["ip", "netns", "pids", ns]).split()]


def named_pids(ns: str) -> list[tuple[int, str]]:
    """The live processes inside namespace `ns` with their names; one that exits between the listing and the
    reading of its name (Ray starts and ends short-lived helpers all the time) is left out."""
    named = []
    for pid in pids(ns):
        try:
            named.append((pid, Path(f"/proc/{pid}/comm").read_text().strip()))
        except OSError:
            continue
    return named


def left_in(hosts: TwoHosts) -> list[str]:
    """What still runs in either namespace besides the worker's sshd (the host's own), as ns:pid:name."""
    return [
        f"{ns}:{pid}:{name}"
        for ns in (hosts.head_ns, hosts.worker_ns)
        for pid, name in named_pids(ns)
        if name != "sshd"
    ]


@contextlib.contextmanager
def two_hosts(workdir: Path) -> Iterator[TwoHosts]:
    """spark-a and spark-b, with an sshd on spark-b's management address; all of it is gone when the block ends.

    Keys, configs and sshd's log live in `workdir`. Every process left inside either namespace at the end is the
    test's own, and is stopped by its pid.
    """
    _require()
    workdir.mkdir(parents=True, exist_ok=True)
    call = next(_calls)
    head_ns, worker_ns = f"sn-a-{os.getpid()}-{call}", f"sn-b-{os.getpid()}-{call}"
    made: list[str] = []
    sshd: subprocess.Popen[bytes] | None = None
    with _subnet(os.getpid() + call) as k:
        try:
            for ns in (head_ns, worker_ns):
                _add_namespace(ns)
                made.append(ns)
            _link(head_ns, worker_ns, FAST_IFACE, f"10.{k}.1")
            _link(head_ns, worker_ns, MGMT_IFACE, f"10.{k}.2")
            mgmt_b = f"10.{k}.2.2"
            ssh_config = _ssh_files(workdir, mgmt_b)
            hosts = TwoHosts(
                head_ns, worker_ns, f"10.{k}.1.1", f"10.{k}.1.2", f"10.{k}.2.1", mgmt_b, ssh_config, workdir / "a-tmp"
            )
            log = workdir / "sshd.log"
            sshd = _start_sshd(worker_ns, workdir / "sshd_config", log, workdir / "b-tmp")
            _await_sshd(hosts, sshd, log)
            _await_links_up(head_ns, worker_ns)
            yield hosts
        except BaseException as error:
            # the body's (or the setup's) error is the one to see; teardown's troubles ride along as notes
            for problem in _teardown(sshd, made):
                error.add_note(f"two_hosts teardown: {problem}")
            raise
        problems = _teardown(sshd, made)
        if problems:
            raise RuntimeError("two_hosts teardown failed: " + "; ".join(problems))


def _require() -> None:
    missing = [] if os.geteuid() == 0 else ["root (namespaces, veth links and sshd need it)"]
    tools = (
        ("ip", "iproute2"),
        ("unshare", "util-linux"),
        ("hostname", "hostname"),
        ("ssh", "openssh-client"),
        ("ssh-keygen", "openssh-client"),
    )
    missing += [f"{tool} (Debian's {package})" for tool, package in tools if shutil.which(tool) is None]
    if not os.access(SSHD, os.X_OK):
        missing.append(f"{SSHD} (Debian's openssh-server)")
    if missing:
        raise RuntimeError(
            f"two_hosts needs {', '.join(missing)}: ./scripts/test installs the Debian packages the tests use "
            "(or: apt-get install -y --no-install-recommends iproute2 util-linux openssh-server)"
        )


@contextlib.contextmanager
def _subnet(seed: int) -> Iterator[int]:
    """A second octet that no other live call holds, held until the block ends."""
    SUBNET_LOCKS.mkdir(parents=True, exist_ok=True)
    for step in range(len(SUBNETS)):
        k = SUBNETS[(seed + step) % len(SUBNETS)]
        with (SUBNET_LOCKS / f"{k}.lock").open("a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            yield k
            return
    raise RuntimeError(f"two_hosts: all {len(SUBNETS)} subnets are taken by live calls")


def _add_namespace(ns: str) -> None:
    # the name holds this process's pid and a fresh count, so one that exists is a leftover of a killed process
    # that had the same pid: only its name is removed
    if (Path("/run/netns") / ns).exists():
        _run(["ip", "netns", "delete", ns])
    _run(["ip", "netns", "add", ns])
    _run(["ip", "-n", ns, "link", "set", "lo", "up"])


def _link(head_ns: str, worker_ns: str, iface: str, net: str) -> None:
    """A veth pair named `iface` on both sides, `net`.1/24 on the head and `net`.2/24 on the worker."""
    # made in the head's namespace with its peer born in the worker's: no end ever appears in the machine's own
    # namespace, so concurrent calls need no temporary names there
    _run(["ip", "-n", head_ns, "link", "add", iface, "type", "veth", "peer", "name", iface, "netns", worker_ns])
    for ns, host in ((head_ns, 1), (worker_ns, 2)):
        # no IPv6 link-local address, hence no router solicitations or DAD: the byte counters count the test's traffic
        _run(["ip", "-n", ns, "link", "set", iface, "addrgenmode", "none"])
        _run(["ip", "-n", ns, "addr", "add", f"{net}.{host}/24", "dev", iface])
        _run(["ip", "-n", ns, "link", "set", iface, "up"])


def _ssh_files(workdir: Path, mgmt_b: str) -> Path:
    """Keys, sshd's config and the client's config and known_hosts in `workdir`; the client config's path."""
    host_key, client_key = workdir / "ssh_host_ed25519_key", workdir / "id_ed25519"
    for key, comment in ((host_key, WORKER_NAME), (client_key, f"root@{HEAD_NAME}")):
        # ssh-keygen asks before overwriting, and nothing answers it here
        key.unlink(missing_ok=True)
        Path(f"{key}.pub").unlink(missing_ok=True)
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(key)])
    authorized_keys, known_hosts = workdir / "authorized_keys", workdir / "known_hosts"
    authorized_keys.write_text(Path(f"{client_key}.pub").read_text())
    known_hosts.write_text(f"{WORKER_NAME} {Path(f'{host_key}.pub').read_text()}")
    _write(
        workdir / "sshd_config",
        f"ListenAddress {mgmt_b}:22",
        f'HostKey "{host_key}"',
        f'PidFile "{workdir / "sshd.pid"}"',
        f'AuthorizedKeysFile "{authorized_keys}"',
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        # workdir is pytest's temporary folder, whose modes StrictModes would judge
        "StrictModes no",
        "UseDNS no",
        "PrintMotd no",
        "PrintLastLog no",
    )
    ssh_config = workdir / "ssh_config"
    _write(
        ssh_config,
        f"Host {WORKER_NAME}",
        f"    HostName {mgmt_b}",
        "    User root",
        f'    IdentityFile "{client_key}"',
        "    IdentitiesOnly yes",
        # the key is checked under the host's name, whatever address the name points at
        f"    HostKeyAlias {WORKER_NAME}",
        f'    UserKnownHostsFile "{known_hosts}"',
        "    GlobalKnownHostsFile /dev/null",
        "    StrictHostKeyChecking yes",
        "    BatchMode yes",
        "    ConnectTimeout 5",
    )
    return ssh_config


def _write(path: Path, *lines: str) -> None:
    # ssh refuses a config file that others may write to
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)


def _start_sshd(worker_ns: str, config: Path, log: Path, ray_tmp: Path) -> subprocess.Popen[bytes]:
    PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
    # -D keeps it in the foreground and -e sends its log to stderr: ip, unshare and sh each exec the next, so the
    # pid started here is sshd's own; re-execing for each connection needs sshd's absolute path
    argv = on_host(worker_ns, WORKER_NAME, [str(SSHD), "-D", "-e", "-f", str(config)], ray_tmp)
    with log.open("ab") as out:
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _await_sshd(hosts: TwoHosts, sshd: subprocess.Popen[bytes], log: Path) -> None:
    """Return once spark-a can run a command on spark-b over ssh; raise with sshd's log if it cannot in time."""
    deadline = time.monotonic() + READY_S
    probe = hosts.ssh_worker(["true"])
    while True:
        if sshd.poll() is not None:
            raise RuntimeError(f"sshd on {WORKER_NAME} exited with {sshd.returncode}; its log:\n{log_tail(log)}")
        left = deadline - time.monotonic()
        try:
            attempt = subprocess.run(probe, capture_output=True, text=True, timeout=max(left, 1.0), check=False)
            said = attempt.stderr.strip()
            if attempt.returncode == 0:
                return
        except subprocess.TimeoutExpired:
            said = "ssh timed out"
        if time.monotonic() >= deadline:
            raise RuntimeError(
                f"sshd on {WORKER_NAME} accepted no ssh within {READY_S:g} s (ssh said: {said}); "
                f"sshd's log:\n{log_tail(log)}"
            )
        time.sleep(_POLL_S)


def _await_links_up(*namespaces: str) -> None:
    """Return once every link end reports operstate UP."""
    # packets flow as soon as both ends are up, but the kernel reports the state up to a second later: a test
    # that looks at the links must see them up
    deadline = time.monotonic() + READY_S
    ends = [(ns, iface) for ns in namespaces for iface in (FAST_IFACE, MGMT_IFACE)]
    while down := [(ns, iface) for ns, iface in ends if _operstate(ns, iface) != "UP"]:
        if time.monotonic() >= deadline:
            raise RuntimeError(f"links still not up after {READY_S:g} s: {down}")
        time.sleep(_POLL_S)


def _operstate(ns: str, iface: str) -> str:
    (link,) = json.loads(_run(["ip", "-n", ns, "-j", "link", "show", iface]))
    return str(link["operstate"])


def _teardown(sshd: subprocess.Popen[bytes] | None, namespaces: Sequence[str]) -> list[str]:
    """Stop sshd, then every process left in the namespaces, then delete them; what went wrong, as sentences."""
    problems: list[str] = []
    if sshd is not None:
        try:
            stop_gently(sshd)
        except Exception as exc:
            problems.append(f"stopping sshd ({sshd.pid}): {exc}")
    try:
        _empty(namespaces)
    except Exception as exc:
        problems.append(f"emptying the namespaces: {exc}")
    for ns in namespaces:
        try:
            # its veth ends go with it
            _run(["ip", "netns", "delete", ns])
        except Exception as exc:
            problems.append(str(exc))
    return problems


def _empty(namespaces: Sequence[str]) -> None:
    """Stop every process inside `namespaces` by its pid: SIGTERM, then SIGKILL for those still there after a grace."""
    # sshd's sessions and whatever the test started in them (servers, Ray) live on after sshd: none of them is ours
    # to wait for, so each round re-reads who is inside, catching children started meanwhile
    for sig, grace in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, STOP_GRACE_S)):
        deadline = time.monotonic() + grace
        signalled: set[int] = set()
        while inside := [pid for ns in namespaces for pid in pids(ns)]:
            for pid in set(inside) - signalled:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
                signalled.add(pid)
            if time.monotonic() >= deadline:
                break
            time.sleep(_POLL_S)
        else:
            return
    raise RuntimeError(f"processes still inside after SIGKILL: {inside}")


def _run(argv: Sequence[str], timeout_s: float = 30.0) -> str:
    """`argv`'s stdout; an error with its stderr if it fails."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)} failed with {done.returncode}: {done.stderr.strip()}")
    return done.stdout
