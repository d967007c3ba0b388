"""The last confirmed build served beside tonight's: a build's identity, and booting one on demand.

Tonight's build is named by what it is made of (the runtime's content key and lock digest, or the
image tag derived from the lock), so the same build on two nights has one name and A == B is seen.
"""

from __future__ import annotations

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


class LastGoodServers:
    """The last confirmed builds beside tonight's: each booted on first demand and kept serving until the night's
    stack closes, or booted again (its earlier boot stopped first) when the pairs swap which server is the newer."""

    def __init__(
        self, entry: ModelEntry, profile: Profile, stack: ExitStack, *, cache_dir: Path, log_dir: Path, say: Say
    ) -> None:
        self.entry, self.profile, self.cache_dir, self.log_dir, self.say = entry, profile, cache_dir, log_dir, say
        self._served: dict[str, tuple[OpenAIClient, ExitStack] | None] = {}
        self._boots = 0
        stack.callback(self._stop_all)

    def __call__(self, build: BuildRef) -> OpenAIClient | None:
        """The build's server, booted on first demand; None when it cannot be served (said why)."""
        if build.id not in self._served:
            self._served[build.id] = self._boot(build, "beside tonight's")
        return self._client(build)

    def again(self, build: BuildRef) -> OpenAIClient | None:
        """A new boot of the build, its earlier one stopped first; None when it cannot be served (said why)."""
        earlier = self._served.pop(build.id, None)
        if earlier is not None:
            earlier[1].close()
        self._served[build.id] = self._boot(build, "again, its earlier boot stopped")
        return self._client(build)

    def _client(self, build: BuildRef) -> OpenAIClient | None:
        served = self._served[build.id]
        return served[0] if served is not None else None

    def _boot(self, build: BuildRef, how: str) -> tuple[OpenAIClient, ExitStack] | None:
        candidate = candidate_of(build, self.profile)
        if candidate is None:
            self.say(f"{self.entry.id}: the last confirmed build {build.describe()} is gone from {build.ref}; no pairs")
            return None
        self.say(f"{self.entry.id}: booting the last confirmed build {build.describe()} {how}")
        self._boots += 1
        logs = self.log_dir / ("last-good" if self._boots == 1 else f"last-good-{self._boots}")
        own = ExitStack()
        try:
            server = own.enter_context(
                boot(self.entry, candidate, cache_dir=self.cache_dir, log_dir=logs, say=self.say)
            )
        except (EngineError, ProcessError) as exc:
            own.close()
            self.say(f"{self.entry.id}: the last confirmed build {build.describe()} did not boot: {exc}")
            return None
        return server.client, own

    def _stop_all(self) -> None:
        for served in self._served.values():
            if served is not None:
                served[1].close()
