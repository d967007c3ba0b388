"""Boot: make the candidate environment and the weights ready, render the launch plan, and serve an entry."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from pipeline.config.matrix import ModelEntry, Profile
from pipeline.errors import EngineError
from pipeline.infra import launch
from pipeline.infra.image import compile_cache_key, image_tag
from pipeline.infra.openai_client import OpenAIClient
from pipeline.infra.runtime import Runtime, ensure_pip_runtime
from pipeline.infra.server import Server, free_port, owner_token, running_server
from pipeline.infra.weights import model_reference
from pipeline.progress import Say, quiet


@dataclass(frozen=True)
class Candidate:
    """What one profile serves tonight: a local runtime, or an image tag built from tonight's lock."""

    profile: Profile
    runtime: Runtime | None = None
    image: str | None = None


def prepare_candidate(profile: Profile, cache_dir: Path, log_dir: Path, *, say: Say = quiet) -> Candidate:
    """The candidate environment of a profile (the CPU profile: its pinned pip requirements)."""
    if profile.candidate_from == "pip":
        runtime = ensure_pip_runtime(
            profile.name, profile.candidate_requirements, profile.candidate_remove, cache_dir, log_dir, say=say
        )
        return Candidate(profile, runtime=runtime)
    raise EngineError(f"profile {profile.name} serves tonight's built wheels; run `spark-nightly build` first")


def placeholder_candidate(profile: Profile) -> Candidate:
    """For a dry run of a profile whose wheels are not built yet: the image tag the build would produce."""
    return Candidate(profile, image=image_tag("tonight"))


def hf_cache(cache_dir: Path) -> Path:
    """The Hugging Face cache that containers mount: under `paths.cache`, shared by every entry and night."""
    return cache_dir / "huggingface"


def compile_cache(cache_dir: Path, image: str) -> Path:
    """The host folder a runtime image's containers compile into (torch.compile, Triton, FlashInfer's JIT), made on
    first use (by boot): one per image, so a build never reads another's kernels and its second boot skips the
    compiling."""
    return cache_dir / "compile" / compile_cache_key(image)


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
        )
    image = entry.launch.image or candidate.image
    if image is None:
        raise EngineError(f"{entry.id}: a {target} launch needs an image; build tonight's wheels first")
    if target == "docker":
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
    return launch.ray_plan(
        entry,
        candidate.profile,
        image=image,
        model_ref=model_ref,
        port=port,
        container=container,
        hf_cache=str(hf_cache(cache_dir)),
        compile_cache=str(compile_cache(cache_dir, image)),
    )


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
) -> Iterator[Server]:
    """Serve an entry until the block ends; readiness, failure classification and clean-up as in running_server."""
    model_ref = model_reference(entry, cache_dir, log_dir, say=say)
    chosen_port = port or free_port()
    plan = plan_launch(entry, candidate, model_ref=model_ref, port=chosen_port, cache_dir=cache_dir)
    if plan.target != "local":  # a container engine may refuse a missing mount
        hf_cache(cache_dir).mkdir(parents=True, exist_ok=True)
        compile_cache(cache_dir, entry.launch.image or candidate.image or "").mkdir(parents=True, exist_ok=True)
    max_len = entry.serve.get("max_model_len")
    with running_server(
        plan,
        model=entry.served_model_name,
        max_model_len=max_len if isinstance(max_len, int) else None,  # 'auto': vLLM decides, nothing to compare
        port=chosen_port,
        deadline_s=deadline_s or entry.launch.boot_timeout_s,
        log_path=log_dir / f"{entry.id}-server.log",
        owner=owner_token(f"{entry.id}-{chosen_port}"),
        say=say,
    ) as server:
        yield server


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
    entry: ModelEntry, candidate: Candidate, *, cache_dir: Path, log_dir: Path, say: Say = quiet
) -> Iterator[Restartable]:
    """`boot`, with a restart that boots the same entry again (each later boot's log beside the first, numbered)."""

    def start(restarts: int) -> AbstractContextManager[Server]:
        logs = log_dir if restarts == 0 else log_dir / f"boot-{restarts + 1}"
        return boot(entry, candidate, cache_dir=cache_dir, log_dir=logs, say=say)

    serving = Restartable(start)
    try:
        yield serving
    finally:
        serving.close()
