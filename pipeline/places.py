"""The night's folders and files, resolved once from the settings: every name in a run or state folder lives here.

`Places` holds the configured folders (`paths.*`, `~` expanded); `StateDir` owns what nights remember (history,
confirmed builds, boot pairs, alerts, durations, the last good night, golden references), `CacheDir` what nights
keep to go faster (mirrors, wheels, bases, runtimes, weights, compile caches) and `RunDir` what one run writes (its
night, plan, build record, inspection, lock, reports, per-entry outcomes, logs and series). Each file or folder has
one property, named nowhere else: a layout test refuses these names anywhere but here. It sits below the
infrastructure, so the modules that read these files can take their places as types.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class StateDir:
    """What nights remember, outside any checkout (`paths.state`)."""

    root: Path

    @property
    def history(self) -> Path:
        return self.root / "history.sqlite"

    @property
    def confirmed(self) -> Path:
        return self.root / "confirmed.json"

    @property
    def pairs(self) -> Path:
        return self.root / "pairs.json"

    @property
    def alerts(self) -> Path:
        return self.root / "alerts.json"

    @property
    def durations(self) -> Path:
        return self.root / "durations.json"

    @property
    def last_good(self) -> Path:
        return self.root / "last_good.json"

    @property
    def golden(self) -> Path:
        """The golden references' folder (infra/references.py keeps one file per hardware and entry in it)."""
        return self.root / "golden"


@dataclass(frozen=True)
class CacheDir:
    """What nights keep to go faster, and may lose (`paths.cache`): each folder one property, so a folder's name is
    written here only (the layout test refuses these names joined anywhere else)."""

    root: Path

    @property
    def mirrors(self) -> Path:
        """Bare git mirrors of the sources, one per repository URL (infra/git.py names each)."""
        return self.root / "mirrors"

    @property
    def wheels(self) -> Path:
        """Built wheels by content key (infra/wheel_cache.py)."""
        return self.root / "wheels"

    @property
    def native_builds(self) -> Path:
        """This runner's own native builds, each usable as a later night's overlay base."""
        return self.wheels / "native-builds.json"

    @property
    def native_bases(self) -> Path:
        """The pinned bases' wheels, downloaded once."""
        return self.root / "native-bases"

    @property
    def native_base_wheelhouse(self) -> Path:
        """A pinned base's wheel taken from the runner's wheelhouse instead of a download."""
        return self.native_bases / "wheelhouse"

    @property
    def runtimes(self) -> Path:
        """Local runtimes (venvs) by content key."""
        return self.root / "runtimes"

    @property
    def judged(self) -> Path:
        """The transformers judge's scores by what they are a function of (stages/prove/judge.py)."""
        return self.root / "judged"

    @property
    def natives_checked(self) -> Path:
        """What native modules did when loaded, by their bytes and what they load beside (stages/prove/smoke.py): a
        new runtime over the same natives and torch reads the answer instead of loading them again."""
        return self.root / "natives-checked"

    @property
    def shared_files(self) -> Path:
        """One copy of each large file that runtimes share, hard-linked into them (infra/shared_files.py)."""
        return self.root / "shared-files"

    @property
    def wheelhouse(self) -> Path:
        """Files a wheelhouse supplied, verified."""
        return self.root / "wheelhouse"

    @property
    def sdists(self) -> Path:
        """Source distributions fetched to make a prepared repository."""
        return self.root / "sdists"

    @property
    def models(self) -> Path:
        """Model weights packaged for an entry (a package folder with its manifest)."""
        return self.root / "models"

    @property
    def downloads(self) -> Path:
        """Downloads in progress (`.partial`), renamed into place when verified."""
        return self.root / "downloads"

    @property
    def huggingface(self) -> Path:
        """The Hugging Face cache that servers and containers share."""
        return self.root / "huggingface"

    @property
    def hub_locks(self) -> Path:
        """One lock file per Hub repository, so two entries never fetch one model at once."""
        return self.root / "hub-locks"

    @property
    def compile(self) -> Path:
        """Compile caches (torch.compile, Triton, FlashInfer's JIT), one folder per build."""
        return self.root / "compile"

    def runtime_compile(self, key: str) -> Path:
        """A local runtime's own compile folder (vLLM's cache: torch.compile's graphs, its model-class records), named
        by the runtime's content key (hex), so it goes when the runtime does."""
        return self.compile / key


@dataclass(frozen=True)
class RunDir:
    """One run's folder (`paths.runs/<run id>`): what it planned, built, measured and reported."""

    root: Path

    @property
    def id(self) -> str:
        return self.root.name

    @property
    def night(self) -> Path:
        return self.root / "night.json"

    @property
    def plan(self) -> Path:
        return self.root / "plan.json"

    @property
    def build_record(self) -> Path:
        return self.root / "build.json"

    @property
    def build_work(self) -> Path:
        return self.root / "build"

    @property
    def inspection(self) -> Path:
        return self.root / "inspect.json"

    @property
    def lock(self) -> Path:
        return self.root / "lock.txt"

    @property
    def lock_notes(self) -> Path:
        return self.root / "lock-notes.json"

    @property
    def image_context(self) -> Path:
        return self.root / "image"

    @property
    def run_json(self) -> Path:
        return self.root / "run.json"

    @property
    def summary(self) -> Path:
        return self.root / "summary.md"

    @property
    def junit(self) -> Path:
        return self.root / "junit.xml"

    @property
    def report(self) -> Path:
        return self.root / "report.html"

    @property
    def alerts(self) -> Path:
        return self.root / "alerts"

    @property
    def culprit_search(self) -> Path:
        return self.root / "culprit" / "search.json"

    @property
    def bisection(self) -> Path:
        """The bisection of main's commits, where main alone failed."""
        return self.root / "culprit" / "bisect.json"

    def culprit_trial(self, trial_id: str) -> RunDir:
        """A culprit trial's own run folder inside this run's."""
        return RunDir(self.root / "culprit" / trial_id)

    def entry(self, entry_id: str) -> Path:
        """An entry's outcome, written as it ends (a resumed run takes it over)."""
        return self.root / "entries" / f"{entry_id}.json"

    def logs(self, entry_id: str) -> Path:
        """An entry's logs (servers, runtimes, turns), or a stage's such as `weights`."""
        return self.root / "logs" / entry_id

    def series(self, entry_id: str) -> Path:
        """An entry's trend series for the report, read from the history once."""
        return self.root / "series" / f"{entry_id}.json"


@dataclass(frozen=True)
class Places:
    """The configured folders and files, resolved once from the settings."""

    config: Path
    runs: Path
    wheels: Path
    cache: Path
    releases: Path
    cluster: Path
    state: StateDir
    wheelhouse: Path | None = None  # the wheelhouse runtimes are installed from, when the runner has one

    def run(self, run_id: str) -> RunDir:
        return RunDir(self.runs / run_id)

    def written(self) -> list[tuple[str, Path]]:
        """The folders a night writes to, by their settings' names (where a full disk is looked for)."""
        return [
            ("paths.runs", self.runs),
            ("paths.state", self.state.root),
            ("paths.cache", self.cache),
            ("paths.wheels", self.wheels),
            ("publish.local_dir", self.releases),
        ]
