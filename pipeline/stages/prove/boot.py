"""Boot: make the candidate environment and the weights ready, render the launch plan, and serve an entry."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from pipeline.config.matrix import ModelEntry, Profile
from pipeline.errors import BootError, EngineError, ProcessError
from pipeline.infra import hub, launch
from pipeline.infra.cluster_launch import NodeRuntime, cluster_up
from pipeline.infra.image import CompileFolders, compile_cache_key, image_tag, kernel_cache_key
from pipeline.infra.nodes import ContainerRuntime, FolderRuntime
from pipeline.infra.openai_client import OpenAIClient
from pipeline.infra.runtime import Runtime
from pipeline.infra.server import Server, free_port, owner_token, running_server
from pipeline.infra.supply import ensure_runtime
from pipeline.infra.weights import MANIFEST, served_model_reference
from pipeline.infra.wheelhouse import WheelSet
from pipeline.infra.workshop import Workshop
from pipeline.places import CacheDir
from pipeline.progress import Say, quiet


@dataclass(frozen=True)
class Candidate:
    """What one profile serves tonight: a local runtime, or an image tag built from tonight's lock."""

    profile: Profile
    runtime: Runtime | None = None
    image: str | None = None


def candidate_set(profile: Profile) -> WheelSet:
    """A pip profile's candidate: its pinned requirements, less what it removes."""
    return WheelSet(profile.name, profile.candidate_requirements, profile.candidate_remove)


def prepare_candidate(profile: Profile, shop: Workshop, log_dir: Path) -> Candidate:
    """The candidate environment of a pip profile: its pinned requirements, from pip or a wheelhouse, over a base
    environment where the profile has one."""
    if profile.candidate_from == "pip":
        runtime = ensure_runtime(candidate_set(profile), shop, log_dir)
        return Candidate(profile, runtime=runtime)
    raise EngineError(f"profile {profile.name} serves tonight's built wheels; run `spark-nightly build` first")


def placeholder_candidate(profile: Profile) -> Candidate:
    """For a dry run of a profile whose wheels are not built yet: the image tag the build would produce."""
    return Candidate(profile, image=image_tag("tonight"))


def hf_cache(cache_dir: Path) -> Path:
    """The Hugging Face cache that containers mount: under `paths.cache`, shared by every entry and night."""
    return CacheDir(cache_dir).huggingface


def compile_cache(cache_dir: Path, image: str) -> Path:
    """The host folder a runtime image's containers compile into (torch.compile, Triton, FlashInfer's JIT), made on
    first use (by boot): one per image, so a build never reads another's kernels and its second boot skips the
    compiling."""
    return CacheDir(cache_dir).compile / compile_cache_key(image)


def local_compile_folders(cache_dir: Path, runtime: Runtime) -> CompileFolders:
    """A local runtime's compile folders: its own for vLLM's caches (torch.compile's graphs, the model-class facts),
    and its kernels' (Inductor, Triton, FlashInfer's JIT) named by what they are compiled from (image.kernel_cache_key),
    both beside the images' ones; a CPU server's too, whose vLLM cache is all it writes in eager mode."""
    return CompileFolders(
        str(CacheDir(cache_dir).runtime_compile(runtime.key)),
        str(CacheDir(cache_dir).compile / kernel_cache_key(runtime.lock)),
    )


def plan_launch(
    entry: ModelEntry, candidate: Candidate, *, model_ref: str, port: int, cache_dir: Path
) -> launch.LaunchPlan:
    """The launch plan for an entry on its target. Its containers are named for this boot (the entry and the port it
    holds): a second server of the entry (the last confirmed build beside tonight's) never collides with the first,
    and each clean-up removes only the containers its own boot started."""
    target = entry.launch.target
    container = f"spark-nightly-{entry.id}-{port}"
    if target == "local":
        if candidate.runtime is None:
            raise EngineError(
                f"{entry.id}: a local launch needs a local runtime, profile {candidate.profile.name} has none"
            )
        return launch.local_plan(
            entry,
            python=str(candidate.runtime.python),
            vllm=str(candidate.runtime.bin("vllm")),
            model_ref=model_ref,
            port=port,
            listen=candidate.profile.listen,
            hf_home=str(hf_cache(cache_dir)),
            # one per runtime, as one per image: two builds sharing one thrashed it (every switch a cold boot). A CPU
            # server compiles nothing in eager mode, but vLLM keeps its model-class facts there, one file a class
            # keyed by the model file's hash: builds whose llama.py differ, booted in turns, re-read the class at
            # every switch (8 s of a 20 s boot on 2 cores)
            compile_cache=local_compile_folders(cache_dir, candidate.runtime),
        )
    image = entry.launch.image or candidate.image
    if target == "ray" and candidate.runtime is not None and image is None:
        # Ray from the runtime folder (the CPU profile, the GPU profile's hosts of one machine)
        folders = local_compile_folders(cache_dir, candidate.runtime).env()
        runtime: NodeRuntime = FolderRuntime(str(candidate.runtime.root), tuple(sorted(folders.items())))
    elif image is None:
        raise EngineError(f"{entry.id}: a {target} launch needs an image; build tonight's wheels first")
    elif target == "docker":
        return launch.docker_plan(
            entry,
            image=image,
            model_ref=model_ref,
            port=port,
            container=container,
            hf_cache=str(hf_cache(cache_dir)),
            listen=candidate.profile.listen,
            gpus=candidate.profile.accelerator != "cpu",
            compile_cache=str(compile_cache(cache_dir, image)),
        )
    else:
        runtime = ContainerRuntime(
            image,
            str(hf_cache(cache_dir)),
            str(compile_cache(cache_dir, image)),
            gpus=candidate.profile.accelerator != "cpu",
        )
    return launch.ray_plan(
        entry,
        candidate.profile,
        runtime=runtime,
        model_ref=model_ref,
        port=port,
        container=container,
        cache_dir=str(cache_dir),
        weights=weights_folder(entry, cache_dir, model_ref),
    )


def weights_folder(entry: ModelEntry, cache_dir: Path, model_ref: str) -> str:
    """The model's folder under paths.cache, which every node of a cluster must hold ("" when it lies elsewhere)."""
    if entry.weights.source == "hub" and entry.revision:
        folder = hub.snapshot_folder(hub.hub_dir(hf_cache(cache_dir)), entry.model, entry.revision)
    else:
        folder = Path(model_ref)
    try:
        return folder.relative_to(cache_dir).as_posix()
    except ValueError:
        return ""


def weights_hashes(cache_dir: Path, folder: str) -> dict[str, str]:
    """Each file of a model folder under paths.cache and its sha256, as the weights stage verified them tonight: a
    package folder's manifest, or a Hub snapshot's blob names (the sha256 of its large files; small ones hashed)."""
    root = cache_dir / folder
    manifest = root / MANIFEST
    if manifest.is_file():
        files = json.loads(manifest.read_text())["files"]
        return {str(name): str(digest) for name, digest in files.items()}
    return hub.snapshot_hashes(root)


# Boots of one entry before a port taken between its pick and the server's bind is the build's to answer for: each
# boot picks a fresh port, so only a build (or a host) that takes the port itself fails every one.
PORT_ATTEMPTS = 3


@contextmanager
def boot(
    entry: ModelEntry,
    candidate: Candidate,
    *,
    cache_dir: Path,
    log_dir: Path,
    port: int | None = None,
    deadline_s: float | None = None,
    say: Say = quiet,
    on_cluster_ready: Callable[[float], None] | None = None,
) -> Iterator[Server]:
    """Serve an entry until the block ends; readiness, failure classification and clean-up as in running_server. A
    cluster entry's hosts come up first; on_cluster_ready hears how long that took, before the server boots.

    Without a `port` the boot picks one (server.free_port); a port taken before the server bound it (a host's race,
    "port in use") is not the build's doing, so the boot tries again on another, up to PORT_ATTEMPTS, each failed
    attempt's log kept beside the server's. A port the caller gave is not changed."""
    model_ref = served_model_reference(entry, cache_dir)

    def plan_on(chosen: int) -> launch.LaunchPlan:
        return plan_launch(entry, candidate, model_ref=model_ref, port=chosen, cache_dir=cache_dir)

    first_port = port or free_port()
    plan = plan_on(first_port)
    if plan.target != "local":  # a container engine may refuse a missing mount
        hf_cache(cache_dir).mkdir(parents=True, exist_ok=True)
        compile_cache(cache_dir, entry.launch.image or candidate.image or "").mkdir(parents=True, exist_ok=True)
    max_len = entry.serve.get("max_model_len")
    log_path = log_dir / f"{entry.id}-server.log"
    with ExitStack() as serving:
        if plan.cluster is not None:
            files = weights_hashes(cache_dir, plan.cluster.weights) if plan.cluster.weights else {}
            began = time.monotonic()
            running = serving.enter_context(
                cluster_up(
                    plan.cluster,
                    log_dir / "cluster",
                    files=files,
                    owner=owner_token(f"{entry.id}-{first_port}-cluster"),  # a sibling: the server's clean-up
                    say=say,  # must not count the cluster's processes as its leftovers
                )
            )
            if on_cluster_ready is not None:
                on_cluster_ready(time.monotonic() - began)
        server = serving.enter_context(
            _on_a_free_port(
                lambda chosen: running_server(
                    plan if chosen == first_port else plan_on(chosen),
                    model=entry.served_model_name,
                    max_model_len=max_len if isinstance(max_len, int) else None,  # 'auto': vLLM decides
                    port=chosen,
                    deadline_s=deadline_s or entry.launch.boot_timeout_s,
                    log_path=log_path,
                    owner=owner_token(f"{entry.id}-{chosen}"),
                    say=say,
                    alive=running.lost if plan.cluster is not None else None,
                ),
                first_port,
                log_path=log_path,
                retry=port is None,
                say=say,
            )
        )
        try:
            yield server
        except (EngineError, ProcessError) as exc:  # a node lost while serving is why, not what vLLM said
            if plan.cluster is not None and (lost := running.lost() or running.unreachable()) is not None:
                raise lost from exc
            raise


@contextmanager
def _on_a_free_port(
    start: Callable[[int], AbstractContextManager[Server]], first: int, *, log_path: Path, retry: bool, say: Say
) -> Iterator[Server]:
    """The server started on `first`, or (with `retry`: the port was picked, not given) on a fresh port each time the
    last one turned out taken, up to PORT_ATTEMPTS; each taken port's log is kept beside the server's."""
    tried = [first]
    while True:
        with ExitStack() as started:
            try:
                server = started.enter_context(start(tried[-1]))
            except BootError as exc:  # while booting only: what fails while it serves is never tried again
                if not retry or exc.cause != "port in use":
                    raise
                if len(tried) == PORT_ATTEMPTS:
                    detail = f"{exc.detail} (on each of {len(tried)} ports picked free: {', '.join(map(str, tried))})"
                    raise BootError(exc.cause, detail, exc.log_tail, exc.log_path) from exc
                kept = log_path.with_name(f"{log_path.stem}.port-{tried[-1]}-in-use.log")
                if log_path.exists():
                    log_path.replace(kept)
                say(f"port {tried[-1]} was taken before the server bound it ({kept.name}); booting on another")
                tried.append(free_port())
                continue
            yield server
            return


class Restartable:
    """A served entry that can be stopped and booted again in place: a request that poisons it is not the last, and
    on a host that holds one server it steps aside while another build takes its turn."""

    def __init__(self, start: Callable[[int], AbstractContextManager[Server]]) -> None:
        self._start = start
        self._stack = ExitStack()
        self.restarts = 0  # boots after the first: restarts after a NaN and returns after another build's turn
        self._server: Server | None = self._stack.enter_context(start(0))

    @property
    def up(self) -> bool:
        return self._server is not None

    @property
    def server(self) -> Server:
        """The serving server, booted again first if it stepped aside."""
        if self._server is None:
            self.restarts += 1
            self._server = self._stack.enter_context(self._start(self.restarts))
        return self._server

    def stop(self) -> None:
        """Stop serving (its clean-up done) until `server` is asked for again; a clean-up that fails still leaves
        the server forgotten, never handed out again."""
        try:
            self._stack.close()
        finally:
            self._server = None

    def restart(self) -> OpenAIClient:
        self.stop()
        return self.server.client

    def close(self) -> None:
        self.stop()


@contextmanager
def restartable(
    entry: ModelEntry,
    candidate: Candidate,
    *,
    cache_dir: Path,
    log_dir: Path,
    say: Say = quiet,
    on_cluster_ready: Callable[[float], None] | None = None,
) -> Iterator[Restartable]:
    """`boot`, with a restart that boots the same entry again (each later boot's log beside the first, numbered);
    on_cluster_ready hears each boot's cluster."""

    def start(restarts: int) -> AbstractContextManager[Server]:
        logs = log_dir if restarts == 0 else log_dir / f"boot-{restarts + 1}"
        return boot(entry, candidate, cache_dir=cache_dir, log_dir=logs, say=say, on_cluster_ready=on_cluster_ready)

    serving = Restartable(start)
    try:
        yield serving
    finally:
        serving.close()
