"""The last confirmed build served beside tonight's: a build's identity, and booting one on demand.

Tonight's build is named by what it is made of (the runtime's content key and lock digest, or the
image tag derived from the lock), so the same build on two nights has one name and A == B is seen.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from pipeline.config.matrix import ModelEntry, Profile
from pipeline.errors import EngineError, ProcessError
from pipeline.infra.confirmed import BuildRef
from pipeline.infra.files import sha256_of
from pipeline.infra.openai_client import OpenAIClient
from pipeline.infra.runtime import Runtime, load_runtime
from pipeline.progress import Say
from pipeline.stages.prove.boot import Candidate, boot


def runtime_build(runtime: Runtime, lock: Path, *, night: str, commits: dict[str, str]) -> BuildRef:
    """A local runtime as a build: its content key and the digest of its lock."""
    digest = sha256_of(lock)
    return BuildRef(f"runtime-{runtime.key}-{digest[:12]}", "runtime", str(runtime.root), digest, {}, commits, night)


def image_build(image: str, lock: Path, wheels: dict[str, str], *, night: str, commits: dict[str, str]) -> BuildRef:
    """A runtime image as a build: its tag (named after the lock's digest), the lock and the wheels in it."""
    return BuildRef(image, "image", image, sha256_of(lock), wheels, commits, night)


def candidate_of(build: BuildRef, profile: Profile) -> Candidate | None:
    """The build as something to boot, or None when it is gone (a runtime folder removed by hand)."""
    if build.kind == "image":
        return Candidate(profile, image=build.ref)
    runtime = load_runtime(Path(build.ref))
    return Candidate(profile, runtime=runtime) if runtime is not None else None


def last_good_server(
    entry: ModelEntry,
    profile: Profile,
    stack: ExitStack,
    *,
    cache_dir: Path,
    log_dir: Path,
    say: Say,
) -> Callable[[BuildRef], OpenAIClient | None]:
    """Boots a build on first demand and keeps it serving until `stack` closes; None when it cannot be served."""
    served: dict[str, OpenAIClient | None] = {}

    def serve(build: BuildRef) -> OpenAIClient | None:
        if build.id in served:
            return served[build.id]
        candidate = candidate_of(build, profile)
        if candidate is None:
            say(f"{entry.id}: the last confirmed build {build.describe()} is gone from {build.ref}; no pairs")
            served[build.id] = None
            return None
        say(f"{entry.id}: booting the last confirmed build {build.describe()} beside tonight's")
        try:
            server = stack.enter_context(
                boot(entry, candidate, cache_dir=cache_dir, log_dir=log_dir / "last-good", say=say)
            )
        except (EngineError, ProcessError) as exc:
            say(f"{entry.id}: the last confirmed build {build.describe()} did not boot: {exc}")
            served[build.id] = None
            return None
        served[build.id] = server.client
        return server.client

    return serve
