"""`spark-nightly doctor`: every prerequisite of a night on this runner, each with its fix, before the first night.

One table: the driver in the profile's window and NVML readable (GPU profiles), what a build needs (Python headers,
nvcc, ccache, docker with the NVIDIA runtime), disk for the night, the candidate runtime and model weights in the
cache (CPU profile), ssh to the other nodes of cluster entries, the state directory, and the GitHub token's reach
to the repository when one is the publish or alert target. Exit 1 when the night cannot run.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
from collections.abc import Sequence
from pathlib import Path

from pipeline.checks.natives import HostIsa, LoadKind, LoadResult, judge_natives, not_loadable, plan_loads
from pipeline.config.bundle import Config
from pipeline.config.matrix import ModelEntry, Profile
from pipeline.errors import CapturedFailure, ProcessError, SparkNightlyError
from pipeline.infra import hub, procs
from pipeline.infra.cpu_class import cpu_class, cpu_flags
from pipeline.infra.github import repository_access
from pipeline.infra.gpu import read_gpus
from pipeline.infra.nodes import SSH_OPTIONS
from pipeline.infra.runtime import load_runtime, vllm_natives
from pipeline.infra.safe_files import shown
from pipeline.infra.supply import ONLINE, Supply, runtime_folder
from pipeline.infra.weights import package_folder, verified
from pipeline.settings import Settings
from pipeline.stages.build.base_history import BaseHistory, pinned_trees
from pipeline.stages.build.night_build import toolchain_for
from pipeline.stages.build.preflight import Check, build_checks, disk_check
from pipeline.stages.prove.boot import candidate_set, hf_cache
from pipeline.stages.prove.health import driver_problems
from pipeline.stages.prove.memory import DROP_CACHES, DROP_CACHES_COMMAND
from pipeline.stages.prove.supplies import night_sets, night_supply
from pipeline.stages.prove.weights_stage import served_folder

CPU_DISK_GIB = 10  # the CPU runtime, the converted model and a night's runs (the README's prerequisite)


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    commands.add_parser(
        "doctor",
        parents=[common],
        help="check every prerequisite of a night on this runner, each with its fix",
        description="Print a table of every prerequisite of a night of the profile on this runner (driver, NVML, "
        "build tools, docker, disk, runtime and weights, ssh to the other nodes, state directory, GitHub token) with "
        "the fix for each one missing; exit 1 when the night cannot run. Run it on each runner before the first night.",
    )


def run(args: argparse.Namespace, settings: Settings, config: Config) -> int:
    profile = config.matrix.profiles[settings.profile]
    entries = config.matrix.select(settings.profile, ())
    checks = prerequisites(settings, profile, entries)
    width = max(len(c.name) for c in checks)
    for check in checks:
        state = "ok" if check.ok else ("MISSING" if check.required else "missing")
        print(f"{state:8}  {check.name:{width}}  {shown(check.found)}")
        if not check.ok and check.fix:
            print(f"{'':8}  {'':{width}}  fix: {check.fix}")
    blocking = [c.name for c in checks if c.required and not c.ok]
    print(f"doctor: {'the night cannot run: ' + ', '.join(blocking) if blocking else 'ready for a night'}")
    return 1 if blocking else 0


def prerequisites(
    settings: Settings, profile: Profile, entries: Sequence[ModelEntry], *, environ: dict[str, str] | None = None
) -> list[Check]:
    """Every check for a night of `profile` with these entries, in the order a maintainer fixes them."""
    environ = dict(os.environ) if environ is None else environ
    checks = [_state_dir(settings.places.state.root)]
    try:
        supply: Supply | SparkNightlyError = night_supply(settings, profile)
    except SparkNightlyError as exc:
        supply = exc
    if profile.accelerator == "cpu":
        checks += [
            disk_check(settings.places.cache, CPU_DISK_GIB, "or move paths.cache"),
            *_cpu_runtime(settings, profile, entries, ONLINE if isinstance(supply, SparkNightlyError) else supply),
        ]
    else:
        checks += _gpu(profile)
    if profile.candidate_from == "build":
        checks += [_pinned_tree(history) for history in pinned_trees(settings, profile)]
    if profile.accelerator != "cpu":
        if profile.candidate_from == "build":
            toolchain = toolchain_for(profile, settings)
            checks += build_checks(toolchain, settings.places.runs, min_free_gib=settings.build_min_free_gib, rust=True)
        if any(e.launch.target in {"docker", "ray"} for e in entries):
            checks.append(_nvidia_runtime())
    checks += _supplies(settings, profile, entries, supply)
    checks += _cluster(settings, profile, entries)
    if profile.memory.drop_caches:
        checks.append(_drop_caches())
    checks += [_hub_weights(settings, entry) for entry in entries if entry.weights.source == "hub"]
    checks += _github(settings, environ)
    return checks


def _supplies(
    settings: Settings, profile: Profile, entries: Sequence[ModelEntry], supply: Supply | SparkNightlyError
) -> list[Check]:
    """The base environment runtimes are layered over, and, offline, every set the night installs in the wheelhouse."""
    if isinstance(supply, SparkNightlyError):
        return [Check("runtime supply", False, str(supply), "fix candidate.base_python or paths.wheelhouse")]
    checks = []
    if supply.base is not None:
        checks.append(Check("base environment", True, supply.base.describe()))
    if supply.offline:
        missing = supply.missing(night_sets(profile, entries), settings.places.cache)
        found = "; ".join(missing) if missing else f"every set in {supply.wheelhouse and supply.wheelhouse.root}"
        checks.append(Check("offline wheelhouse", not missing, found, supply.fetch_command()))
    return checks


def _state_dir(path: Path) -> Check:
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".doctor-"):
            pass
    except OSError as exc:
        return Check(
            "state directory",
            False,
            f"{path}: {exc.strerror}",
            "make it writable by the runner's user, or set SPARK_NIGHTLY_PATHS_STATE to a folder it owns",
        )
    return Check("state directory", True, f"{path} (writable)")


def _cpu_runtime(settings: Settings, profile: Profile, entries: Sequence[ModelEntry], supply: Supply) -> list[Check]:
    """The pinned runtime (where this runner's supply makes it) and each entry's converted weights: installed by the
    first night when missing."""
    cache = settings.places.cache
    root = runtime_folder(candidate_set(profile), supply, cache)
    runtime = load_runtime(root)
    found = f"{' '.join(profile.candidate_requirements)} in {root}" if runtime else "not installed"
    fix = "./scripts/nightly installs it (about 1.5 minutes), or spark-nightly engine check <entry>"
    checks = [Check("candidate runtime", runtime is not None, found, fix, required=False), _cpu(root)]
    for entry in entries:
        if entry.weights.source == "package":
            folder = package_folder(entry, cache)
            ok = verified(folder)
            checks.append(
                Check(
                    f"weights {entry.id}",
                    ok,
                    str(folder) if ok else f"not converted yet ({folder})",
                    f"spark-nightly engine check {entry.id} converts them (about 20 s)",
                    required=False,
                )
            )
    return checks


def _pinned_tree(history: BaseHistory) -> Check:
    """A pinned base whose tree the built repository lacks: every night of the profile would exit 2."""
    found = f"{history.tree[:12]} {history.why.split(';')[0]}"
    return Check(f"base tree ({history.family})", history.holds is not False, found, history.why.partition("; ")[2])


def _cpu(runtime_root: Path) -> Check:
    """The host's CPU class, and which variant of each of the runtime's natives would load here (vLLM's choice):
    a host no variant runs on cannot run a night (the night would end INCONCLUSIVE, naming it)."""
    isa = HostIsa(platform.machine(), cpu_flags())
    host = f"{cpu_class()} ({isa.describe()})"
    natives = vllm_natives(runtime_root)
    if natives is None:
        return Check("CPU", True, f"{host}; the runtime's natives are read once it is installed")
    build, modules = natives
    planned = plan_loads(modules, isa)
    results = {p.module: not_loadable(p) if not p.load else LoadResult(p.module, LoadKind.OK, "ok") for p in planned}
    lack = judge_natives(planned, results, isa, build).host_lack
    chosen = [f"{p.module}{' (vLLM loads it here)' if p.needs and p.selected else ''}" for p in planned if p.load]
    unloadable = [f"{r.module} {r.detail}" for r in results.values() if r.kind == LoadKind.NOT_LOADABLE]
    found = f"{host}; {build}: {', '.join(chosen)} load here" + (f"; {', '.join(unloadable)}" if unloadable else "")
    return Check("CPU", lack is None, lack or found, "run the CPU profile on an x86-64 host with AVX2 or AVX-512")


def _gpu(profile: Profile) -> list[Check]:
    driver, gpus, source = read_gpus()
    if not gpus:
        return [Check("GPU", False, "NVML and nvidia-smi found none", "install the NVIDIA driver (580.x on a Spark)")]
    window = f"at least {profile.driver_min or 'any'}, below {profile.driver_below or 'any'}"
    outside = driver_problems(driver, profile) if driver else ["no driver version reported"]
    unreadable = sorted({field for gpu in gpus for field in gpu.unreadable})
    what = f"{len(gpus)} x {gpus[0].name} via {source}" + (
        f"; not reported: {', '.join(unreadable)}" if unreadable else ""
    )
    return [
        Check(
            "NVIDIA driver",
            not outside,
            f"{driver} ({'; '.join(outside) if outside else window})",
            f"install a driver {window} (590.x deadlocks CUDA graphs on GB10)",
        ),
        Check(
            "NVML",
            all(g.sm_clock_mhz is not None for g in gpus),
            what,
            "the SM clock must be readable: reinstall the driver's NVML (libnvidia-ml)",
        ),
    ]


def _nvidia_runtime() -> Check:
    fix = "install Docker and the NVIDIA Container Toolkit, then: sudo nvidia-ctk runtime configure --runtime=docker"
    found = _answer(["docker", "info", "--format", "{{json .Runtimes}}"])
    if found is None:
        return Check("docker + NVIDIA runtime", False, "docker does not answer", fix)
    return Check("docker + NVIDIA runtime", '"nvidia"' in found, "runtimes: " + found[:120], fix)


def _cluster(settings: Settings, profile: Profile, entries: Sequence[ModelEntry]) -> list[Check]:
    """For cluster entries: the runner's cluster file, and ssh to each other node as the launch reaches it."""
    clustered = [e.id for e in entries if e.topology == "cluster"]
    if not clustered:
        return []
    if profile.cluster is None:
        where = settings.cluster_file
        return [
            Check(
                "cluster",
                False,
                f"no {where}: {', '.join(clustered)} skipped",
                "write the runner's cluster.yaml (docs/runbook.md, 'Adding a second Spark')",
                required=False,
            )
        ]
    hosts = ", ".join(n.on_link for n in profile.cluster.nodes)
    checks = [Check("cluster", True, f"{hosts} from {profile.cluster.source}", "")]
    return checks + [_ssh(node.name, profile.cluster.ssh_config) for node in profile.cluster.nodes[1:]]


def _hub_weights(settings: Settings, entry: ModelEntry) -> Check:
    """A Hub entry's snapshot at its pinned commit in the cache: looked for, not hashed (the night's weights stage
    hashes every file; a 60 GB model takes minutes). Missing is no blocker: the first night downloads it."""
    folder = served_folder(entry, settings.places.cache)
    present = folder is not None and (folder / "config.json").is_file()
    cache = hub.hub_dir(hf_cache(settings.places.cache))
    return Check(
        f"weights {entry.id}",
        present,
        str(folder) if present else f"{entry.model}@{entry.revision or 'main'} not in {cache}",
        f"the first night downloads it (tens of GB), or: hf download {entry.model} --revision "
        f"{entry.revision or 'main'} --cache-dir {cache}",
        required=False,
    )


def _drop_caches() -> Check:
    """The profile drops the page cache before each boot: root may, another user needs that one sudo right."""
    if os.geteuid() == 0:
        return Check("drop the page cache", os.access(DROP_CACHES, os.W_OK), f"root; {DROP_CACHES} writable")
    allowed = _answer(["sudo", "-n", "-l", "sh", "-c", DROP_CACHES_COMMAND]) is not None
    return Check(
        "drop the page cache",
        allowed,
        "sudo -n allows it" if allowed else "sudo -n does not allow it",
        f"a sudoers line for the runner user: RUNNER ALL=(root) NOPASSWD: /bin/sh -c {DROP_CACHES_COMMAND}",
    )


def _ssh(node: str, ssh_config: str | None) -> Check:
    """The night reaches another node as the cluster launch does: no password, no unknown host key accepted."""
    answer = _answer([*(("ssh", "-F", ssh_config) if ssh_config else ("ssh",)), *SSH_OPTIONS, node, "true"])
    return Check(
        f"ssh {node}",
        answer is not None,
        "answers without a password" if answer is not None else "no answer without a password",
        f"ssh-copy-id {node}, and accept its host key once",
    )


def _github(settings: Settings, environ: dict[str, str]) -> list[Check]:
    targets = ((settings.publish_target, settings.publish_repo), (settings.alert_target, settings.alert_repo))
    repos = sorted({repo for target, repo in targets if target == "github"})
    token = environ.get(settings.github_token_env, "")
    checks = []
    for repo in repos:
        if not token:
            checks.append(
                Check(
                    f"GitHub {repo}",
                    False,
                    f"${settings.github_token_env} is not set here",
                    "the workflow's publish job has its own token; set it here to check its reach",
                    required=False,
                )
            )
            continue
        checks.append(_reach(repo, token, settings.github_api_url))
    return checks


def _reach(repo: str, token: str, api_url: str) -> Check:
    try:
        permissions = repository_access(repo, token, api_url=api_url)
    except SparkNightlyError as exc:
        return Check(f"GitHub {repo}", False, str(exc), "a token that can read the repository")
    can = permissions.get("push", False)
    return Check(
        f"GitHub {repo}",
        can,
        "the token can write" if can else "the token cannot write",
        "releases and issues need contents: write and issues: write",
    )


def _answer(argv: list[str]) -> str | None:
    try:
        return procs.capture(argv, timeout_s=20)
    except (CapturedFailure, ProcessError, OSError):
        return None
