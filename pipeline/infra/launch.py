"""Launch targets: the exact commands that start an entry as a local process, a docker container, or a Ray cluster.

Every target renders its commands as argv lists before anything runs, so `--dry-run` shows exactly
what would run, and the server harness starts the same argv it printed.
"""

from __future__ import annotations

import ipaddress
import json
import secrets
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pipeline.config.matrix import ModelEntry, Profile
from pipeline.errors import EngineError
from pipeline.infra.cluster_launch import ClusterPlan, NodeRuntime
from pipeline.infra.image import COMPILE_CACHE_ENV, CONTAINER_COMPILE_CACHE, CompileFolders
from pipeline.infra.nodes import CONTAINER_HF_CACHE, NodeShell
from pipeline.infra.procs import OWNER_ENV
from pipeline.infra.runtime import WRITE_BYTECODE

RAY_ADDRESS_ENV = "RAY_ADDRESS"  # the cluster vLLM's ray.init() joins, rather than starting one of its own
# vLLM reads its API key from this variable: it is passed to containers by name, so no argv, log or rendered
# plan ever holds the value
API_KEY_ENV = "VLLM_API_KEY"
# What every launch sets, whatever the entry says: nothing is fetched from a hub at serve time, and vLLM counts
# requests with NaN logits (vllm:corrupted_requests), which the golden stage reads on every entry that can have it
HARNESS_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_COMPUTE_NANS_IN_LOGITS": "1"}


def beyond_loopback(address: str) -> bool:
    """Whether a server bound to `address` is reachable from other machines (0.0.0.0 and :: are every address)."""
    return not ipaddress.ip_address(address).is_loopback


def client_address(listen: str) -> str:
    """Where this machine reaches a server bound to `listen`."""
    return "127.0.0.1" if ipaddress.ip_address(listen).is_unspecified else listen


def boot_secrets(listen: str) -> dict[str, str]:
    """A fresh API key for each boot of a server that listens beyond loopback; none on loopback."""
    return {API_KEY_ENV: secrets.token_urlsafe(32)} if beyond_loopback(listen) else {}


@dataclass(frozen=True)
class Step:
    """One command to run, on a host ('' is this machine), kept running in the background or waited for."""

    argv: tuple[str, ...]
    host: str = ""
    background: bool = False
    purpose: str = ""

    def runnable(self) -> tuple[str, ...]:
        """The argv to execute from this machine: as it is, or through ssh to its host."""
        return self.argv if not self.host else ("ssh", self.host, shlex.join(self.argv))

    def render(self) -> str:
        return shlex.join(self.runnable())


@dataclass(frozen=True)
class LaunchPlan:
    """The commands of one launch; the last step is the API server the harness waits on."""

    target: str
    steps: tuple[Step, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cleanup: tuple[Step, ...] = ()
    secrets: Mapping[str, str] = field(default_factory=dict)  # in the processes' environment, never rendered
    listen: str = "127.0.0.1"
    cluster: ClusterPlan | None = None  # a Ray cluster brought up, step by step, before the steps run

    @property
    def server(self) -> Step:
        return self.steps[-1]

    def render(self) -> str:
        lines = [f"# launch target: {self.target}"]
        lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(self.env.items())]
        lines += [f"export {k}=<made for this boot, not shown>" for k in sorted(self.secrets)]
        if self.cluster is not None:
            lines += self.cluster.render()
        for step in self.steps:
            if step.purpose:
                lines.append(f"# {step.purpose}")
            lines.append(step.render() + (" &" if step.background else ""))
        for step in self.cleanup:
            lines.append(f"# on exit: {step.render()}")
        return "\n".join(lines)


def compile_cache_env(compile_cache: str | None) -> dict[str, str]:
    """Where a container's compilers keep their output, when the image has a compile cache folder on the host."""
    return dict(COMPILE_CACHE_ENV) if compile_cache else {}


def compile_cache_mount(compile_cache: str | None) -> list[str]:
    """The host folder of the image's compile cache, mounted where compile_cache_env points."""
    return ["-v", f"{compile_cache}:{CONTAINER_COMPILE_CACHE}"] if compile_cache else []


def serve_arguments(entry: ModelEntry, *, host: str, port: int) -> list[str]:
    """vLLM flags for an entry: typed serve options, then extra_args, then what the harness decides."""
    args: list[str] = []
    for key, value in entry.serve.items():
        if key in ("extra_args", "served_model_name"):
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif value is False:
            if key == "enable_prefix_caching":
                args.append("--no-enable-prefix-caching")
        elif isinstance(value, Mapping):
            args += [flag, json.dumps(value, separators=(",", ":"), sort_keys=True)]
        else:
            args += [flag, str(value)]
    if entry.revision:
        args += ["--revision", entry.revision]
    args += ["--served-model-name", entry.served_model_name, "--host", host, "--port", str(port)]
    return args + [str(a) for a in entry.serve.get("extra_args", ())]  # last, so a maintainer's flag wins


def _runtime_launch_env(entry: ModelEntry) -> dict[str, str]:
    """A launch's variables where the server runs from a runtime of ours (a local process, Ray from a runtime folder
    or an image): the runtime's bytecode written unless the entry says otherwise, then the entry's, then the
    harness's, which nothing overrides."""
    return WRITE_BYTECODE | dict(entry.env) | HARNESS_ENV


def local_plan(
    entry: ModelEntry,
    *,
    python: str,
    vllm: str,
    model_ref: str,
    port: int,
    listen: str = "127.0.0.1",
    hf_home: str | None = None,
    compile_cache: CompileFolders | None = None,
) -> LaunchPlan:
    """A bare-metal process on this machine (the CPU profile, a GPU host without Docker); `hf_home` is the Hugging
    Face cache the weights stage filled, which a container sees mounted at CONTAINER_HF_CACHE and a local process
    through HF_HOME. `compile_cache`: the folders its server's compilers and vLLM's own caches write to, kept
    between boots (image.py)."""
    if entry.launch.entrypoint == "module":
        head = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model_ref]
    else:
        head = [vllm, "serve", model_ref]
    argv = (*head, *serve_arguments(entry, host=listen, port=port))
    env = _runtime_launch_env(entry) | ({"HF_HOME": hf_home} if hf_home else {})
    env |= compile_cache.env() if compile_cache else {}
    return LaunchPlan(
        "local", (Step(argv, purpose="the API server"),), env=env, secrets=boot_secrets(listen), listen=listen
    )


def docker_plan(  # noqa: PLR0913 -- one rendered command line: each option by keyword
    entry: ModelEntry,
    *,
    image: str,
    model_ref: str,
    port: int,
    container: str,
    hf_cache: str,
    listen: str = "127.0.0.1",
    gpus: bool = True,
    compile_cache: str | None = None,
) -> LaunchPlan:
    """`docker run` on a Spark: all GPUs, host IPC (the host's /dev/shm) and network, the shared model cache; the API
    server binds `listen` (loopback unless the profile says otherwise, and then only with a key). Weights in a
    local folder (converted from a package) are mounted read-only at the same path; the image's compile cache (a host
    folder per image) holds what the server compiles, so the next boot of the build reuses it."""
    env = dict(entry.env) | HARNESS_ENV | compile_cache_env(compile_cache)
    keys = boot_secrets(listen)
    if entry.launch.entrypoint == "module":
        head: tuple[str, ...] = ("python3", "-m", "vllm.entrypoints.openai.api_server", "--model", model_ref)
    else:
        head = ("vllm", "serve", model_ref)
    serve = (*head, *serve_arguments(entry, host=listen, port=port))
    extra = ["--ulimit", "memlock=-1", "--ulimit", "stack=67108864"] if gpus else []  # pinned memory for NCCL
    if model_ref.startswith("/"):
        extra += ["-v", f"{model_ref}:{model_ref}:ro"]
    extra += compile_cache_mount(compile_cache)
    argv = container_argv(
        container, image, serve, env=env, hf_cache=hf_cache, extra=extra, pass_through=tuple(keys), gpus=gpus
    )
    return LaunchPlan(
        "docker",
        (Step(argv, purpose="the API server in its container"),),
        cleanup=(Step(("docker", "rm", "--force", container)),),
        secrets=keys,
        listen=listen,
    )


def container_argv(
    name: str,
    image: str,
    command: Sequence[str],
    *,
    env: Mapping[str, str],
    hf_cache: str,
    extra: Sequence[str] = (),
    pass_through: Sequence[str] = (),
    gpus: bool = True,
) -> tuple[str, ...]:
    """`docker run` as every target uses it: the GPUs (none for a CPU profile), host IPC and network, the model
    cache; `pass_through` variables are named, their values taken from docker's own environment."""
    argv = ["docker", "run", "--rm", "--name", name]
    if gpus:
        argv += ["--gpus", "all"]
    # host IPC shares the host's /dev/shm (a --shm-size would be ignored by docker and refused by podman)
    argv += ["--ipc", "host", "--network", "host", *extra, "-v", f"{hf_cache}:{CONTAINER_HF_CACHE}"]
    for key, value in sorted(env.items()):
        argv += ["-e", f"{key}={value}"]
    for key in (
        OWNER_ENV,
        *pass_through,
    ):  # the owner marker: the health check counts the container's processes as ours
        argv += ["-e", key]
    return (*argv, image, *command)


def ray_plan(
    entry: ModelEntry,
    profile: Profile,
    *,
    runtime: NodeRuntime,
    model_ref: str,
    port: int,
    container: str,
    cache_dir: str,
    weights: str = "",
) -> LaunchPlan:
    """A Ray cluster over the runner's hosts (its cluster.yaml), then the API server on the head, across them.

    The cluster comes up as a sequence with readiness between steps (cluster_launch); the server step is the plan's
    one process. Ray listens on each node's fast-link address, its dashboard on loopback; the API server binds the
    profile's `listen` address. `weights` is the model's folder under paths.cache, verified on every node."""
    cluster = profile.cluster
    if cluster is None:
        raise EngineError(
            f"{entry.id} spans {entry.nodes} hosts and this runner has no cluster file (paths.cluster): "
            "see docs/runbook.md, 'Adding a second Spark'"
        )
    if len(cluster.nodes) < entry.nodes:
        raise EngineError(f"{entry.id} needs {entry.nodes} hosts, {cluster.source} lists {len(cluster.nodes)}")
    if not weights and model_ref.startswith("/"):
        raise EngineError(
            f"{entry.id}: the weights of a cluster entry are verified and shipped to every node from paths.cache "
            f"(the Hub's cache or a package's folder); {model_ref} lies outside it"
        )
    shells = tuple(
        NodeShell(node, local=index == 0, ssh_config=cluster.ssh_config, cache_dir=node.cache_dir or cache_dir)
        for index, node in enumerate(cluster.first(entry.nodes))
    )
    keys = boot_secrets(profile.listen)
    mounts = ((weights, model_ref),) if weights and model_ref.startswith("/") else ()
    plan = ClusterPlan(
        entry=entry.id,
        nodes=shells,
        runtime=runtime,
        container=container,
        env=_runtime_launch_env(entry) | runtime.extra_env(),
        ray_port=cluster.ray_port,
        accelerator="GPU" if profile.accelerator == "cuda" else "CPU",
        weights=weights,
        deadline_s=min(600.0, entry.launch.boot_timeout_s),
        mounts=mounts,
    )
    if entry.launch.entrypoint == "module":
        head: tuple[str, ...] = (runtime.python(), "-m", "vllm.entrypoints.openai.api_server", "--model", model_ref)
    else:
        head = ("vllm", "serve", model_ref)
    serve = runtime.inside(
        container,
        (*head, *serve_arguments(entry, host=profile.listen, port=port)),
        pass_through=(RAY_ADDRESS_ENV, *keys),
    )
    # the server runs on the head: its variables are the head's (for a container, already in it) and the cluster's
    env = plan.node_env(0) | {RAY_ADDRESS_ENV: plan.address}
    step = Step(serve, purpose="the API server on the head, across the cluster")
    return LaunchPlan("ray", (step,), env=env, secrets=keys, listen=profile.listen, cluster=plan)
