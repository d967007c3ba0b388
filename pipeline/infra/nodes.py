"""How a command reaches a node of a cluster, and what runs Ray there: a container of the runtime image, or a runtime
folder on the host (the CPU profile).

The head is the runner itself, so its commands run here; every other node is reached by ssh that never asks
(BatchMode, known hosts only). Nothing crosses ssh by name: values reach a node in a file written there first.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pipeline.config.cluster import Node
from pipeline.infra.image import COMPILE_CACHE_ENV, CONTAINER_COMPILE_CACHE
from pipeline.infra.procs import OWNER_ENV

CONTAINER_HF_CACHE = "/root/.cache/huggingface"
# never a prompt for a password or a new host key in a night: an unknown host is a failure to fix, not to accept
SSH_OPTIONS = (
    "-o",
    "BatchMode=yes",
    "-o",
    "StrictHostKeyChecking=yes",
    "-o",
    "ConnectTimeout=10",
    "-o",
    "ServerAliveInterval=15",
    "-o",
    "ServerAliveCountMax=4",
)
PROC = "/proc"  # where a node's stop reads its processes' environments
SSH_LOST = 255  # ssh's own exit code: the connection failed or dropped, whatever the remote command did


@dataclass(frozen=True)
class NodeShell:
    """Runs commands on one node: here for the head, through ssh for the others."""

    node: Node
    local: bool
    ssh_config: str | None = None
    cache_dir: str = ""  # paths.cache on that host

    def ssh(self) -> tuple[str, ...]:
        config = ("-F", self.ssh_config) if self.ssh_config else ()
        return ("ssh", *config, *SSH_OPTIONS, self.node.name)

    def argv(self, command: Sequence[str]) -> tuple[str, ...]:
        """The argv that runs `command` on the node from here."""
        return tuple(command) if self.local else (*self.ssh(), shlex.join(command))

    def shell(self, script: str) -> tuple[str, ...]:
        """A short POSIX shell script on the node."""
        return self.argv(("sh", "-c", script))

    def write(self, path: str, *, mode: str = "077") -> tuple[str, ...]:
        """The argv that writes its stdin to `path` on the node, readable by the owner only."""
        folder = path.rsplit("/", 1)[0]
        return self.shell(f"umask {mode} && mkdir -p {shlex.quote(folder)} && cat > {shlex.quote(path)}")

    def work_dir(self, name: str) -> str:
        """A folder of this launch on the node, under its cache: env files and the pid of what it started."""
        return f"{self.cache_dir}/cluster/{name}"


def piped(left: Sequence[str], right: Sequence[str]) -> tuple[str, ...]:
    """`left | right` run here, failing when either side fails."""
    return ("bash", "-o", "pipefail", "-c", f"{shlex.join(left)} | {shlex.join(right)}")


def env_file_text(env: Mapping[str, str]) -> str:
    """KEY=VALUE lines as `docker run --env-file` reads them (a value runs to the end of its line)."""
    for key, value in env.items():
        if "\n" in value or "\n" in key:
            raise ValueError(f"{key}: a value passed by file cannot hold a line break")
    return "".join(f"{key}={value}\n" for key, value in sorted(env.items()))


@dataclass(frozen=True)
class ContainerRuntime:
    """Ray in containers of the runtime image (the Spark): one per node, removed by name at the end."""

    image: str
    hf_cache: str  # the head's; another node mounts its own cache_dir's
    compile_cache: str | None = None
    gpus: bool = True

    def identity(self) -> tuple[str, ...]:
        return ("docker", "image", "inspect", "--format", "{{.Id}}", self.image)

    def ship(self, to: NodeShell) -> tuple[str, ...] | None:
        """The image from the head's docker into the node's, over ssh (no registry)."""
        return piped(("docker", "save", self.image), (*to.ssh(), "docker load"))

    def start(
        self, on: NodeShell, name: str, command: Sequence[str], env_file: str, mounts: Sequence[tuple[str, str]] = ()
    ) -> tuple[str, ...]:
        """The container of one node kept running in the foreground: host network and IPC, the GPU, pinned memory
        for NCCL and RDMA (memlock, IPC_LOCK, the InfiniBand devices where the node has an RDMA port)."""
        argv = ["docker", "run", "--rm", "--name", name, "--network", "host", "--ipc", "host"]
        if self.gpus:
            argv += ["--gpus", "all"]
        argv += ["--ulimit", "memlock=-1", "--ulimit", "stack=67108864", "--cap-add", "IPC_LOCK"]
        if on.node.rdma:
            argv += ["--device", "/dev/infiniband"]
        hf_cache = self.hf_cache if on.local else f"{on.cache_dir}/huggingface"
        argv += ["-v", f"{hf_cache}:{CONTAINER_HF_CACHE}"]
        if self.compile_cache:  # the node's own folder of this image's compile cache
            compile_cache = (
                self.compile_cache if on.local else f"{on.cache_dir}/compile/{self.compile_cache.rsplit('/', 1)[-1]}"
            )
            argv += ["-v", f"{compile_cache}:{CONTAINER_COMPILE_CACHE}"]
        for folder, path in mounts:  # weights in a folder of the node's cache, where the head's container sees them
            argv += ["-v", f"{folder}:{path}:ro"]
        argv += ["--env-file", env_file, self.image, *command]
        return on.argv(argv)

    def inside(self, name: str, command: Sequence[str], pass_through: Sequence[str] = ()) -> tuple[str, ...]:
        """A command in the head's running container (the API server, the cluster probe)."""
        named = [part for key in pass_through for part in ("-e", key)]
        return ("docker", "exec", *named, name, *command)

    def stop(self, on: NodeShell, name: str, owner: str = "") -> tuple[str, ...]:
        return on.argv(("docker", "rm", "--force", name))  # the container: everything Ray started in it

    def python(self) -> str:
        return "python3"

    def extra_env(self) -> dict[str, str]:
        return dict(COMPILE_CACHE_ENV) if self.compile_cache else {}


@dataclass(frozen=True)
class FolderRuntime:
    """Ray from a runtime folder present at the same path on every node (the CPU profile; the GPU profile's hosts
    of one machine): each node's process writes its pid first, and is stopped by that pid's group."""

    root: str  # the runtime's folder: bin/ray, bin/python
    # where a runtime's compilers and vLLM's own cache write (the local server's folders: its own, and FlashInfer's
    # by content), so no tree loads kernels another compiled, nor re-reads its model classes after another's boot
    compile_env: tuple[tuple[str, str], ...] = ()

    def identity(self) -> tuple[str, ...]:
        """The runtime's record (its content key and lock): the same file on every node is the same runtime."""
        return ("sha256sum", f"{self.root}/runtime.json")

    def ship(self, to: NodeShell) -> tuple[str, ...] | None:
        return None  # a runtime folder is installed on each host, not copied

    def start(
        self, on: NodeShell, name: str, command: Sequence[str], env_file: str, mounts: Sequence[tuple[str, str]] = ()
    ) -> tuple[str, ...]:
        pid_file = f"{on.work_dir(name)}/pid"
        # its own session, so the group is exactly what it starts; the variables from the file, one per line
        script = (
            f'echo $$ > {shlex.quote(pid_file)} && while IFS= read -r line; do export "$line"; done '
            f'< {shlex.quote(env_file)} && exec "$@"'
        )
        return on.argv(("setsid", "--wait", "sh", "-c", script, "sh", f"{self.root}/bin/{command[0]}", *command[1:]))

    def inside(self, name: str, command: Sequence[str], pass_through: Sequence[str] = ()) -> tuple[str, ...]:
        return (f"{self.root}/bin/{command[0]}", *command[1:])

    def stop(self, on: NodeShell, name: str, owner: str = "") -> tuple[str, ...]:
        """The node's Ray group stopped by its pid (SIGTERM, then SIGKILL after 10 s), then what Ray started in
        sessions of its own: the processes marked with this launch's owner, each by its pid."""
        pid_file = shlex.quote(f"{on.work_dir(name)}/pid")
        marker = shlex.quote(f"{OWNER_ENV}={owner}")
        # `kill -TERM "-$p"`: the group, in the form every sh takes (dash refuses `kill -TERM -- -$p`)
        # `2>/dev/null < $e`: in that order, so a process gone or not ours since the listing is passed over unsaid
        script = (
            f'if [ -s {pid_file} ]; then p=$(cat {pid_file}); kill -TERM "-$p" 2>/dev/null && '
            f'for i in $(seq 100); do kill -0 "-$p" 2>/dev/null || break; sleep 0.1; done; '
            f'kill -KILL "-$p" 2>/dev/null; fi; '
            f"for e in {PROC}/[0-9]*/environ; do tr '\\0' '\\n' 2>/dev/null < $e | grep -qxF {marker} && "
            f"q=${{e#{PROC}/}} && kill -KILL ${{q%/environ}} 2>/dev/null; done; true"
        )
        return on.shell(script if owner else script.split("; for e in", maxsplit=1)[0] + "; true")

    def python(self) -> str:
        return "python"

    def extra_env(self) -> dict[str, str]:
        return dict(self.compile_env)
