"""Where a night's runtimes and packages come from: pip with the network, or a wheelhouse; over a base environment
or on their own. One decision, made once from the settings and the profile, that every runtime of the night obeys.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import EngineError
from pipeline.infra import procs
from pipeline.infra.base_env import BaseEnv, layer
from pipeline.infra.cache_lock import exclusive
from pipeline.infra.runtime import (
    LockedFile,
    Runtime,
    create_venv,
    ensure_pip_runtime,
    install_runtime,
    load_runtime,
    runtime_root,
)
from pipeline.infra.wheelhouse import Wheelhouse, WheelSet, make_wheelhouse
from pipeline.infra.workshop import Workshop
from pipeline.places import CacheDir

# What the wheelhouse command is, said where a piece is missing
FETCH_COMMAND = "spark-nightly wheelhouse --profile {profile} --dest DIR"


@dataclass(frozen=True)
class Supply:
    """A night's source of files. `offline`: nothing is fetched, every runtime and package comes from the wheelhouse.
    `base`: runtimes are venvs layered over this base's packages."""

    wheelhouse: Wheelhouse | None = None
    offline: bool = False
    base: BaseEnv | None = None
    profile: str = ""

    @property
    def plain(self) -> bool:
        """pip with the network, no base: the runtimes as they have always been made."""
        return self.wheelhouse is None and self.base is None and not self.offline

    def missing(self, sets: Sequence[WheelSet], cache_dir: Path) -> list[str]:
        """What an offline night lacks before anything boots: each set whose runtime is not made yet and that the
        wheelhouse lacks or holds damaged."""
        if not self.offline:
            return []
        sets = [s for s in sets if s.no_deps or load_runtime(runtime_folder(s, self, cache_dir)) is None]
        if not sets:
            return []
        if self.wheelhouse is None:
            return [f"no wheelhouse is set (paths.wheelhouse): {self.fetch_command()}"]
        found = []
        for wheel_set in sets:
            files = self.wheelhouse.locked(wheel_set, self.base)
            if files is None:
                found.append(f"{wheel_set.name}: not in the wheelhouse {self.wheelhouse.root}")
            elif problems := self.wheelhouse.problems(files):
                found.append(f"{wheel_set.name}: {'; '.join(problems)}")
        return found

    def fetch_command(self) -> str:
        return "make one on a machine with the network: " + FETCH_COMMAND.format(profile=self.profile or "P")


ONLINE = Supply()


def ensure_runtime(wheel_set: WheelSet, shop: Workshop, log_dir: Path) -> Runtime:
    """The set's runtime, made once per content key: from pip as always, or from the wheelhouse over the base."""
    supply, say = shop.supply, shop.say
    if supply.plain:
        return ensure_pip_runtime(wheel_set.name, wheel_set.requirements, wheel_set.remove, shop, log_dir)
    key = wheel_set.key(supply.base)
    root = runtime_folder(wheel_set, supply, shop.cache_dir)
    with exclusive(root):
        existing = load_runtime(root)
        if existing is not None:
            say(f"runtime {root.name}: cached ({len(existing.lock)} locked files)")
            return existing
        python = supply.base.python if supply.base else sys.executable
        create_venv(root, python, log_dir, say=say)
        if supply.base is not None:
            layer(root, supply.base)
        lock = supplied_files(wheel_set, shop, root / "wheels", log_dir)
        base = supply.base.to_json() if supply.base else None
        return install_runtime(root, key, wheel_set.requirements, wheel_set.remove, lock, log_dir, shop, base=base)


def runtime_folder(wheel_set: WheelSet, supply: Supply, cache_dir: Path) -> Path:
    """Where the set's runtime lives under this supply (whether or not it exists yet): the pip runtime's folder as it
    has always been named, else one per set and base."""
    if supply.plain:
        return runtime_root(wheel_set.name, wheel_set.requirements, wheel_set.remove, cache_dir)
    layered = "-layered" if supply.base else ""
    return CacheDir(cache_dir).runtimes / f"{wheel_set.name}-{wheel_set.key(supply.base)}{layered}"


def supplied_files(wheel_set: WheelSet, shop: Workshop, dest: Path, log_dir: Path) -> tuple[LockedFile, ...]:
    """The set's files in `dest`, each checked: from the wheelhouse, or (with the network) resolved into the cache's
    own wheelhouse first. Offline without them: an error naming what is missing and how to fetch it."""
    supply, say = shop.supply, shop.say
    wheelhouse = supply.wheelhouse
    if wheelhouse is None or wheelhouse.locked(wheel_set, supply.base) is None:
        if supply.offline:
            where = f"the wheelhouse {wheelhouse.root} has no set" if wheelhouse else "no wheelhouse is set"
            raise EngineError(f"offline, and {where} for {wheel_set.name}: {supply.fetch_command()}")
        say(f"runtime {wheel_set.name}: resolving over {supply.base.describe() if supply.base else 'nothing'}")
        wheelhouse = make_wheelhouse(
            [wheel_set],
            shop.cache.wheelhouse,
            resolver_python=supply.base.python if supply.base else sys.executable,
            base=supply.base,
            command=FETCH_COMMAND.format(profile=supply.profile or "P"),
            log_dir=log_dir,
            say=say,
        )
    return wheelhouse.copy_set(wheel_set, supply.base, dest)


def fetch_package(wheel_set: WheelSet, supply: Supply, dest: Path, log_dir: Path) -> None:
    """A package's files (no dependencies) in `dest`: from the wheelhouse where it has them, else from pip."""
    if supply.wheelhouse is not None and supply.wheelhouse.locked(wheel_set, None) is not None:
        supply.wheelhouse.copy_set(wheel_set, None, dest)
        return
    if supply.offline:
        raise EngineError(f"offline, and no wheelhouse holds {wheel_set.name}: {supply.fetch_command()}")
    shutil.rmtree(dest, ignore_errors=True)
    procs.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", str(dest), *wheel_set.requirements],
        log_dir / f"{wheel_set.name}-download.log",
        timeout_s=900,
        inactivity_s=300,
    )
