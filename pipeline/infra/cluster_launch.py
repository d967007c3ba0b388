"""A Ray cluster over the runner's hosts, brought up as a sequence with readiness between steps.

Nodes reachable (and separate hosts) with their fast link up, the runtime on every node (an image shipped from the
head when a node lacks it, image IDs compared), the weights on every node (hashed there, shipped when they differ),
the head up, the workers joined, and the cluster showing every node on its fast-link address with its accelerator
and running a job on each: only then does the API server start. Each failure names its node and step; everything
started is stopped on every node on any exit, Ctrl-C included.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.config.cluster import Node
from pipeline.errors import ClusterError, ProcessError
from pipeline.infra import procs
from pipeline.infra.nodes import SSH_LOST, ContainerRuntime, FolderRuntime, NodeShell, env_file_text
from pipeline.infra.runtime import runtime_process_env
from pipeline.progress import Say, quiet

NodeRuntime = ContainerRuntime | FolderRuntime
STEP_TIMEOUT_S = 60.0  # a short command on a node (hostname, an image ID, a file write)
SHIP_TIMEOUT_S = 3 * 3600.0  # an image or a model over the network: tens of GB
READY_POLL_S = 2.0
LINK_UP_STATES = frozenset({"up", "unknown"})  # /sys/class/net/IFACE/operstate of a link that carries traffic
RAY_DIED = "Some Ray subprocesses exited unexpectedly:"  # `ray start --block`, then a line for each process that died
# Asked on the head once Ray runs: the live nodes with their addresses and resources; with `probe`, a task on each
# node that hands 16 MiB back to the head through Ray's object store, so the link between them carries real traffic.
CLUSTER_PROBE = """
import json, socket, sys
import ray
address, probe = sys.argv[1], sys.argv[2] == "probe"
ray.init(address=address, logging_level="ERROR", log_to_driver=False)
nodes = [{"ip": n["NodeManagerAddress"], "resources": n["Resources"]} for n in ray.nodes() if n["Alive"]]
answer = {"nodes": nodes}
if probe:
    @ray.remote(num_cpus=0)
    def where():
        return socket.gethostname(), b"x" * (16 << 20)
    refs = {n["ip"]: where.options(resources={"node:" + n["ip"]: 0.001}).remote() for n in nodes}
    got = {ip: ray.get(ref, timeout=40) for ip, ref in refs.items()}
    answer["hosts"] = {ip: [host, len(blob)] for ip, (host, blob) in got.items()}
print(json.dumps(answer))
"""


@dataclass(frozen=True)
class ClusterPlan:
    """Everything a cluster launch runs, rendered before anything runs."""

    entry: str
    nodes: tuple[NodeShell, ...]  # the head first
    runtime: NodeRuntime
    container: str  # the head's name; workers add -worker<N>
    env: Mapping[str, str]  # what every node's Ray gets, beside its own interconnect variables
    ray_port: int
    accelerator: str  # the Ray resource every node must show: GPU, or CPU on the CPU profile
    weights: str  # the model's folder under paths.cache on every node ("" when the model is not a folder there)
    deadline_s: float = 600.0  # for the workers to join and the cluster to answer
    mounts: tuple[tuple[str, str], ...] = field(default_factory=tuple)  # (folder under paths.cache, container path)

    @property
    def head(self) -> NodeShell:
        return self.nodes[0]

    @property
    def address(self) -> str:
        return f"{self.head.node.address}:{self.ray_port}"

    def name(self, index: int) -> str:
        return self.container if index == 0 else f"{self.container}-worker{index}"

    def node_env(self, index: int) -> dict[str, str]:
        """The variables of one node: the launch's, the node's own (cluster.yaml), then what points Ray, NCCL, Gloo
        and UCX at the fast link."""
        node = self.nodes[index].node
        # unbuffered: `ray start --block` says which of its processes died, then leaves by os._exit, which drops
        # what a pipe's buffer held (the words a lost node's reason quotes)
        return dict(self.env) | dict(node.env) | interconnect_env(node) | {"PYTHONUNBUFFERED": "1"}

    def env_path(self, index: int) -> str:
        return f"{self.nodes[index].work_dir(self.name(index))}/env"

    def start_argv(self, index: int) -> tuple[str, ...]:
        node = self.nodes[index].node
        if index == 0:
            ray = ["ray", "start", "--head", f"--port={self.ray_port}", "--dashboard-host=127.0.0.1"]
        else:
            ray = ["ray", "start", f"--address={self.address}"]
        ray += [f"--node-ip-address={node.address}", "--block"]
        mounts = tuple((f"{self.nodes[index].cache_dir}/{folder}", path) for folder, path in self.mounts)
        return self.runtime.start(self.nodes[index], self.name(index), ray, self.env_path(index), mounts)

    def probe_argv(self, *, probe: bool) -> tuple[str, ...]:
        command = (self.runtime.python(), "-c", CLUSTER_PROBE, self.address, "probe" if probe else "list")
        return self.runtime.inside(self.container, command)

    def render(self) -> list[str]:
        """The readiness sequence as the commands it runs, for --dry-run."""
        lines = ["# cluster: every step waits for the one before it; any failure stops everything started"]
        for shell in self.nodes:
            lines.append(f"# reach {shell.node.name}: " + shlex.join(shell.argv(("hostname",))))
        for shell in self.nodes:
            lines.append(f"# fast link up on {shell.node.name} (up or unknown): " + shlex.join(link_state_argv(shell)))
        for shell in self.nodes[1:]:
            ship = self.runtime.ship(shell)
            lines.append(f"# runtime on {shell.node.name}: " + shlex.join(shell.argv(self.runtime.identity())))
            if ship is not None:
                lines.append(f"#   if its ID differs from the head's: {shlex.join(ship)}")
            if self.weights:
                folder = f"{shell.cache_dir}/{self.weights}"
                lines.append(f"# weights on {shell.node.name}: sha256sum -c (the head's hashes) in {folder}")
                lines.append(f"#   if any differs: {shlex.join(ship_folder(self.head, shell, self.weights))}")
        for index, shell in enumerate(self.nodes):
            own = dict(shell.node.env) | interconnect_env(shell.node)
            variables = " ".join(f"{k}={v}" for k, v in sorted(own.items()))
            lines.append(f"# {shell.node.name}: {variables} (with the launch's, in {self.env_path(index)})")
            role = "Ray head" if index == 0 else "Ray worker"
            lines.append(f"# {role} on {shell.node.name}, listening on {shell.node.address}:")
            lines.append(shlex.join(self.start_argv(index)) + " &")
        lines.append(f"# ready: every node alive on its fast-link address with a {self.accelerator}, a task on each:")
        lines.append(shlex.join(self.probe_argv(probe=True)) + f"  # within {self.deadline_s:g} s")
        for index, shell in reversed(list(enumerate(self.nodes))):
            lines.append(f"# on exit: {shlex.join(self.runtime.stop(shell, self.name(index)))}")
        return lines


def interconnect_env(node: Node) -> dict[str, str]:
    """Where Ray, NCCL, Gloo and UCX talk (the fast link's interface and address), RDMA when the node has it, and
    Ray's memory monitor off: on unified memory it reads the page cache as used and kills vLLM's workers."""
    env = {
        "VLLM_HOST_IP": node.address,
        "NCCL_SOCKET_IFNAME": node.interface,
        "GLOO_SOCKET_IFNAME": node.interface,
        "TP_SOCKET_IFNAME": node.interface,
        "UCX_NET_DEVICES": node.interface,
        "RAY_memory_monitor_refresh_ms": "0",
    }
    if node.rdma:  # every RDMA device of the port: a cabled QSFP port shows two, each half of its bandwidth
        env |= {"NCCL_IB_HCA": ",".join(node.rdma), "NCCL_IB_DISABLE": "0"}
    else:
        env["NCCL_IB_DISABLE"] = "1"
    return env


def ship_folder(head: NodeShell, to: NodeShell, folder: str) -> tuple[str, ...]:
    """A folder of the head's cache into the same place in the node's, links followed (a Hub snapshot's files)."""
    target = shlex.quote(f"{to.cache_dir}/{folder}")
    receive = f"mkdir -p {target} && tar -C {target} -xf -"
    return (
        "bash",
        "-o",
        "pipefail",
        "-c",
        f"tar -C {shlex.quote(f'{head.cache_dir}/{folder}')} -chf - . | {shlex.join(to.ssh())} {shlex.quote(receive)}",
    )


@dataclass
class RunningCluster:
    """The started cluster: the processes that hold each node's Ray, watched while the server runs."""

    plan: ClusterPlan
    owner: str
    holders: dict[int, procs.Process] = field(default_factory=dict)

    def unreachable(self) -> ClusterError | None:
        """A node ssh cannot reach now (asked when the server failed: Ray notices a dead host before ssh's
        keep-alive does, and a lost host is no verdict on the build)."""
        for shell in self.plan.nodes[1:]:
            try:
                procs.capture(shell.argv(("true",)), timeout_s=20, env=procs.without_secrets())
            except ProcessError as exc:
                if getattr(exc, "returncode", None) == SSH_LOST or "timed out" in str(exc):
                    return ClusterError(
                        shell.node.name, "serve", f"the host stopped answering ssh: {exc}", host_lost=True
                    )
        return None

    def lost(self) -> ClusterError | None:
        """A node whose Ray stopped: the host gone (ssh lost it) or its Ray ended on its own."""
        for index, process in self.holders.items():
            code = process.poll()
            if code is not None:
                return _node_lost(self.plan, index, code, process)
        return None


@contextmanager
def cluster_up(
    plan: ClusterPlan, log_dir: Path, *, files: Mapping[str, str], owner: str, say: Say = quiet
) -> Iterator[RunningCluster]:
    """The readiness sequence, then the block (the API server); every node's Ray stopped on any exit."""
    running = RunningCluster(plan, owner)
    log_dir.mkdir(parents=True, exist_ok=True)
    try:
        _reach(plan, log_dir)
        _links_up(plan, log_dir)
        _runtime_everywhere(plan, log_dir, say)
        if plan.weights:
            _weights_everywhere(plan, files, log_dir, say)
        for index in range(len(plan.nodes)):
            _start_node(plan, index, running, log_dir, say)
            if index == 0:
                _wait_ready(plan, running, log_dir, nodes=1, probe=False)
        _wait_ready(plan, running, log_dir, nodes=len(plan.nodes), probe=True)
        say(f"cluster ready: {', '.join(f'{s.node.name} ({s.node.address})' for s in plan.nodes)}")
        yield running
    finally:
        _tear_down(plan, running, log_dir, say)


def _run(argv: Sequence[str], log: Path, *, node: str, step: str, timeout_s: float) -> None:
    try:
        finished = procs.run(argv, log, timeout_s=timeout_s, check=False, env=procs.without_secrets())
    except ProcessError as exc:
        raise ClusterError(node, step, f"{exc} (log {log})") from None
    if finished.returncode != 0:
        detail = f"exited with code {finished.returncode}: {procs.log_tail(log, 3).strip()} (log {log})"
        raise ClusterError(node, step, detail, host_lost=finished.returncode == SSH_LOST)


def _last_line(argv: Sequence[str], log: Path, *, node: str, step: str) -> str:
    try:
        out = procs.capture(argv, timeout_s=STEP_TIMEOUT_S, env=runtime_process_env())
    except ProcessError as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        lost = getattr(exc, "returncode", None) == SSH_LOST
        raise ClusterError(node, step, detail.strip()[-500:], host_lost=lost) from None
    log.write_text(f"$ {shlex.join(argv)}\n{out}")
    lines = out.strip().splitlines()
    return lines[-1].strip() if lines else ""


def _reach(plan: ClusterPlan, log_dir: Path) -> None:
    """Every node answers, each as a host of its own."""
    names: dict[str, str] = {}
    for shell in plan.nodes:
        name = shell.node.name
        host = _last_line(shell.argv(("hostname",)), log_dir / f"reach-{name}.log", node=name, step="reach")
        if host in names:
            raise ClusterError(
                name, "reach", f"answers as host '{host}', as {names[host]} does: a cluster is separate hosts"
            )
        names[host] = name


def link_state_argv(shell: NodeShell) -> tuple[str, ...]:
    """The node's kernel's word for its end of the fast link; `absent` where it has no such interface (so ssh's own
    failure stays the host lost)."""
    state_file = f"/sys/class/net/{shell.node.interface}/operstate"
    return shell.shell(f"cat {shlex.quote(state_file)} 2>/dev/null || echo absent")


def _links_up(plan: ClusterPlan, log_dir: Path) -> None:
    """Every node's end of the fast link is up, as its kernel says: a link down is the night's trouble, not the
    build's, and is named before Ray starts (Ray would only time out waiting for the node). Every node is asked, so
    a link downed at one end is named at both (the other end loses its carrier)."""
    down = []
    for shell in plan.nodes:
        name, interface = shell.node.name, shell.node.interface
        state = _last_line(link_state_argv(shell), log_dir / f"link-{name}.log", node=name, step="link")
        if state not in LINK_UP_STATES:
            down.append((name, f"{interface} {'not on the host' if state == 'absent' else state}"))
    if down:
        raise ClusterError(
            ", ".join(name for name, _ in down),
            "link",
            "the fast link is not up (" + "; ".join(f"{name}: {said}" for name, said in down) + "): no build is judged "
            "over it",
            host_lost=True,
        )


def _runtime_everywhere(plan: ClusterPlan, log_dir: Path, say: Say) -> None:
    """The head's runtime on every node: the same image ID (shipped where it differs), or the same runtime folder."""
    head = plan.head.node.name
    want = _last_line(
        plan.head.argv(plan.runtime.identity()), log_dir / f"runtime-{head}.log", node=head, step="runtime"
    )
    for shell in plan.nodes[1:]:
        name = shell.node.name
        log = log_dir / f"runtime-{name}.log"
        try:
            have = _last_line(shell.argv(plan.runtime.identity()), log, node=name, step="runtime")
        except ClusterError as exc:
            if exc.host_lost:
                raise
            have = ""
        if have == want:
            continue
        ship = plan.runtime.ship(shell)
        if ship is None:
            raise ClusterError(name, "runtime", f"has {have or 'no runtime'}, the head has {want}: install it there")
        say(f"cluster: shipping the runtime image to {name} ({have or 'absent'} there)")
        _run(ship, log_dir / f"ship-image-{name}.log", node=name, step="ship image", timeout_s=SHIP_TIMEOUT_S)
        have = _last_line(shell.argv(plan.runtime.identity()), log, node=name, step="runtime")
        if have != want:
            raise ClusterError(name, "ship image", f"has image {have} after loading, the head has {want}")


def _weights_everywhere(plan: ClusterPlan, files: Mapping[str, str], log_dir: Path, say: Say) -> None:
    """Every file of the model on every other node with the head's sha256; a node that differs gets the head's."""
    listing = "".join(f"{digest}  {name}\n" for name, digest in sorted(files.items())).encode()
    for shell in plan.nodes[1:]:
        name = shell.node.name
        folder = f"{shell.cache_dir}/{plan.weights}"
        check = shell.shell(f"cd {shlex.quote(folder)} && sha256sum --quiet -c -")
        if _hashes_match(check, listing, log_dir / f"weights-{name}.log", name):
            continue
        say(f"cluster: shipping the weights to {name} ({folder})")
        _run(
            ship_folder(plan.head, shell, plan.weights),
            log_dir / f"ship-weights-{name}.log",
            node=name,
            step="ship weights",
            timeout_s=SHIP_TIMEOUT_S,
        )
        if not _hashes_match(check, listing, log_dir / f"weights-{name}.log", name):
            raise ClusterError(name, "weights", f"files in {folder} differ from the head's after shipping")


def _hashes_match(check: Sequence[str], listing: bytes, log: Path, node: str) -> bool:
    return _fed(check, listing, log, node=node, step="weights", timeout_s=SHIP_TIMEOUT_S) == 0


def _fed(argv: Sequence[str], data: bytes, log: Path, *, node: str, step: str, timeout_s: float) -> int:
    """A command on a node with `data` on its stdin; its exit code, ssh's own failure raised as the host lost."""
    try:
        result = procs.feed(argv, data, log, timeout_s=timeout_s, env=procs.without_secrets())
    except ProcessError as exc:
        raise ClusterError(node, step, f"{exc} (log {log})", host_lost=True) from None
    if result == SSH_LOST:
        raise ClusterError(node, step, f"ssh lost the host (log {log})", host_lost=True)
    return result


def _start_node(plan: ClusterPlan, index: int, running: RunningCluster, log_dir: Path, say: Say) -> None:
    shell = plan.nodes[index]
    name = shell.node.name
    env = plan.node_env(index) | {procs.OWNER_ENV: running.owner}
    log = log_dir / f"env-{name}.log"
    text = env_file_text(env).encode()
    if _fed(shell.write(plan.env_path(index)), text, log, node=name, step="env file", timeout_s=STEP_TIMEOUT_S):
        raise ClusterError(name, "env file", f"cannot write {plan.env_path(index)} (log {log})")
    role = "head" if index == 0 else "worker"
    say(f"cluster: Ray {role} on {name} ({shell.node.address})")
    try:  # the runner's tokens stay here: the head's Ray and what it runs are the code under test
        running.holders[index] = procs.Process(
            plan.start_argv(index),
            log_dir / f"ray-{role}-{name}.log",
            env=procs.without_secrets(),
            owner=running.owner,
        )
    except ProcessError as exc:
        raise ClusterError(name, role, str(exc)) from None


def _wait_ready(plan: ClusterPlan, running: RunningCluster, log_dir: Path, *, nodes: int, probe: bool) -> None:
    """Poll the head until `nodes` nodes are alive on their fast-link addresses with their accelerator; with
    `probe`, a task on each node must come back from a host of its own. A node on another address is refused (its
    traffic would take another network); at the deadline, the nodes still missing are named, with the last error
    of the head's question when there was one (tonight's Ray or image failing is the build's)."""
    deadline = time.monotonic() + plan.deadline_s
    want = {shell.node.address: shell.node.name for shell in plan.nodes[:nodes]}
    alive: dict[str, Mapping[str, float]] = {}
    error = ""
    log = log_dir / ("cluster-ready.log" if probe else "head-ready.log")
    while True:
        if (lost := running.lost()) is not None:
            raise lost
        missing = _missing(want, alive, plan.accelerator)
        if time.monotonic() > deadline:
            seen = ", ".join(f"{ip} {_accelerators(r, plan.accelerator)}" for ip, r in sorted(alive.items()))
            detail = f"not in the cluster within {plan.deadline_s:g} s; Ray showed: {seen or 'nothing'}"
            if error:
                raise ClusterError(", ".join(missing) or plan.head.node.name, "join", f"{detail}; last error: {error}")
            raise ClusterError(", ".join(missing) or plan.head.node.name, "join", detail, host_lost=True)
        asking = probe and not missing
        try:
            answer = json.loads(
                _last_line(plan.probe_argv(probe=asking), log, node=plan.head.node.name, step="ready") or "{}"
            )
            alive = {n["ip"]: n["resources"] for n in answer["nodes"]}
            error = ""
        except ClusterError as exc:
            if exc.host_lost:
                raise
            error = exc.detail[-300:]
            time.sleep(READY_POLL_S)
            continue
        except (ValueError, KeyError, TypeError) as exc:
            error = f"the head's answer was not Ray's listing: {exc}"
            time.sleep(READY_POLL_S)
            continue
        if stray := sorted(set(alive) - set(want)):
            raise ClusterError(
                plan.head.node.name,
                "join",
                f"Ray shows nodes on {', '.join(stray)}, not the fast-link addresses {', '.join(want)}: a node "
                "joined over another network",
                host_lost=True,
            )
        if asking and "hosts" in answer:
            _check_hosts(want, answer["hosts"])
            return
        if not probe and not _missing(want, alive, plan.accelerator):
            return
        time.sleep(READY_POLL_S)


def _missing(want: Mapping[str, str], alive: Mapping[str, Mapping[str, float]], accelerator: str) -> list[str]:
    """The names of the wanted nodes Ray does not show alive with their accelerator."""
    return [name for address, name in want.items() if not alive.get(address, {}).get(accelerator)]


def _accelerators(resources: Mapping[str, float], kind: str) -> str:
    return f"{resources.get(kind, 0):g} {kind}"


def _check_hosts(want: Mapping[str, str], hosts: Mapping[str, list[object]]) -> None:
    names = [str(hosts[address][0]) for address in want]
    if len(set(names)) < len(names):
        raise ClusterError(", ".join(want.values()), "ready", f"tasks on every node ran on hosts {names}: one host")


def _node_lost(plan: ClusterPlan, index: int, code: int, process: procs.Process) -> ClusterError:
    shell = plan.nodes[index]
    role = "head" if index == 0 else "worker"
    if code == SSH_LOST and not shell.local:
        return ClusterError(shell.node.name, role, f"ssh lost the host (log {process.log_path})", host_lost=True)
    return ClusterError(
        shell.node.name, role, f"Ray's {role} exited with code {code}: {why_ray_stopped(process.tail(20))}"
    )


def why_ray_stopped(output: str) -> str:
    """What `ray start --block` said when it stopped: the processes it reports dead ("raylet [exit code=-9]"), else
    its last line. Its lines are log records ("2026-11-28 09:29:55,695\tERR scripts.py:1186 -- raylet ...")."""
    said = [line.split(" -- ", 1)[-1].strip() for line in output.splitlines() if line.strip()]
    if RAY_DIED in said:
        died = [line for line in said[said.index(RAY_DIED) + 1 :] if "exit code" in line]
        return f"{', '.join(died) or 'some of its processes'} exited unexpectedly"
    return said[-1] if said else "no output"


def _tear_down(plan: ClusterPlan, running: RunningCluster, log_dir: Path, say: Say) -> None:
    """Every node's Ray stopped (workers first), by the node's own command, then the processes that held them; a
    second Ctrl-C or a SIGTERM (a cancelled job) does not cut it short, and one node's failure to stop does not
    keep the others from stopping."""
    main = threading.current_thread() is threading.main_thread()
    previous = [(sig, signal.signal(sig, signal.SIG_IGN)) for sig in (signal.SIGINT, signal.SIGTERM)] if main else []
    try:
        problems = [
            problem
            for index in sorted(running.holders, reverse=True)
            if (problem := _stop_node(plan, running, index, log_dir))
        ]
        leftovers = procs.owned_processes(running.owner)  # what Ray started here and left: ours, stopped by pid
        for pid in leftovers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if running.holders:
            stopped = ", ".join(plan.nodes[i].node.name for i in sorted(running.holders))
            extra = f"; killed {len(leftovers)} leftover processes" if leftovers else ""
            say(f"cluster: stopped on {stopped}{extra}")
        for problem in problems:
            say(f"cluster: {problem}")
    finally:
        for sig, handler in previous:
            signal.signal(sig, handler)


def _stop_node(plan: ClusterPlan, running: RunningCluster, index: int, log_dir: Path) -> str:
    """One node's Ray stopped and its launch folder removed; what went wrong, or ""."""
    shell = plan.nodes[index]
    log = log_dir / f"stop-{shell.node.name}.log"
    problem = ""
    try:
        stop = procs.run(
            plan.runtime.stop(shell, plan.name(index), running.owner),
            log,
            timeout_s=STEP_TIMEOUT_S,
            check=False,
            env=procs.without_secrets(),
        )
        if stop.returncode != 0:
            problem = (
                f"stopping Ray on {shell.node.name} exited with code {stop.returncode}: check it by hand (log {log})"
            )
    except ProcessError as exc:
        problem = f"could not stop Ray on {shell.node.name}: {exc} (log {log})"
    finally:
        running.holders[index].stop(int_grace_s=5.0, term_grace_s=5.0)
    # a launch folder left behind holds an env file and a pid only: the next launch writes its own
    with contextlib.suppress(ProcessError):
        procs.run(
            shell.shell(f"rm -rf {shlex.quote(shell.work_dir(plan.name(index)))}"),
            log,
            timeout_s=STEP_TIMEOUT_S,
            check=False,
            env=procs.without_secrets(),
        )
    return problem
