"""One entry's servers on a host that holds one at a time: tonight's build (B) steps aside while another takes its turn.

Every boot is a boot of its own: a new port, so a new container name (`spark-nightly-<entry>-<port>`), a new
owner token and a numbered log folder; a clean-up only ever stops the server its own boot started. Before each
boot made in turns the memory stage makes room again (a Spark drops the page cache the last model left and waits
for the entry's need), and each boot's time is kept, a failed one too: the cost of a night whose cell tripped is
boots x boot time. A build that failed to boot is not booted again that night. The profile's boot budget caps the
boots in turns an entry makes a night (`boots_left`): the pairs ask it before each boot pair.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.config.matrix import ModelEntry, Profile
from pipeline.errors import EngineError, HostUnhealthy, ProcessError
from pipeline.infra.confirmed import BuildRef
from pipeline.infra.openai_client import OpenAIClient
from pipeline.progress import Say
from pipeline.stages.prove.boot import Restartable, boot
from pipeline.stages.prove.last_good import candidate_of
from pipeline.stages.prove.memory import make_room

# What boots_left says with no budget: more than any cell asks
MAX_UNBUDGETED = 1000


@dataclass(frozen=True)
class BootRecord:
    """One boot made in turns: whose (tonight's or a build's id), why, and launch to ready in seconds."""

    build: str
    why: str
    boot_s: float


@dataclass
class Turns:
    """Tonight's server and the builds served in its place, one at a time."""

    entry: ModelEntry
    profile: Profile
    tonight_serving: Restartable
    cache_dir: Path
    log_dir: Path
    say: Say
    room: Callable[[], str | None] | None = None  # makes room before a boot; the reason it could not, else None
    budget: int | None = None  # boots in turns this entry may make tonight (None: no limit)
    boots: list[BootRecord] = field(default_factory=list)
    unservable: dict[str, str] = field(default_factory=dict)  # build id -> why it did not boot tonight

    def __post_init__(self) -> None:
        if self.room is None:
            self.room = self._make_room

    @property
    def tonight(self) -> OpenAIClient:
        """Tonight's server, booted again first if it stepped aside for another build's turn."""
        if self.tonight_serving.up:
            return self.tonight_serving.server.client
        return self._boot_tonight("back after a turn")

    def fresh_tonight(self, why: str) -> OpenAIClient:
        """A new boot of tonight's build (its last one stopped first): a boot pair needs a boot of its own."""
        self.tonight_serving.stop()
        return self._boot_tonight(why)

    def _boot_tonight(self, why: str) -> OpenAIClient:
        self._ready("tonight's build")
        started = time.monotonic()
        server = self.tonight_serving.server  # boots it, the server being down
        self.boots.append(BootRecord("tonight", why, time.monotonic() - started))
        return server.client

    @contextmanager
    def turn(self, build: BuildRef, why: str) -> Iterator[OpenAIClient]:
        """`build` served alone until the block ends (tonight's stopped first). EngineError or ProcessError when it
        cannot be served; HostUnhealthy when the host cannot make room for it."""
        if build.id in self.unservable:  # it failed once tonight: another try would cost a boot timeout again
            raise EngineError(f"the build {build.describe()} did not boot earlier tonight: {self.unservable[build.id]}")
        candidate = candidate_of(build, self.profile)
        if candidate is None:
            raise EngineError(f"the build {build.describe()} is gone from {build.ref}")
        self.tonight_serving.stop()
        self._ready(f"the build {build.describe()}")
        logs = self.log_dir / "turns" / f"boot-{len(self.boots) + 1}"
        started = time.monotonic()
        with ExitStack() as serving:  # its close stops the server however the block ends
            try:
                server = serving.enter_context(
                    boot(self.entry, candidate, cache_dir=self.cache_dir, log_dir=logs, say=self.say)
                )
            except (EngineError, ProcessError) as exc:
                self.boots.append(BootRecord(build.id, f"{why}, did not boot", time.monotonic() - started))
                self.unservable[build.id] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise
            self.boots.append(BootRecord(build.id, why, time.monotonic() - started))
            yield server.client

    def boots_left(self) -> int:
        """Boots in turns this entry may still make tonight: its budget less the boots made."""
        return MAX_UNBUDGETED if self.budget is None else max(0, self.budget - len(self.boots))

    def cost(self) -> str:
        """The boots made in turns so far, for the night's numbers and its log."""
        total = sum(b.boot_s for b in self.boots)
        return f"{len(self.boots)} boots in turn, {total:.0f} s booting"

    def _ready(self, what: str) -> None:
        assert self.room is not None
        problem = self.room()
        if problem is not None:
            raise HostUnhealthy(f"no room to boot {what}: {problem}")
        self.say(f"{self.entry.id}: booting {what} (one server at a time on this host; boot {len(self.boots) + 1})")

    def _make_room(self) -> str | None:
        room = make_room(self.entry, self.profile, self.log_dir, say=self.say)
        return None if room is None or room.ok else room.reason
