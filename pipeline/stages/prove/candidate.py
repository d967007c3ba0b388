"""The night's candidate: the pinned runtime of a pip profile, or the wheels `build` made, ingested the same way."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.config.matrix import Profile
from pipeline.errors import EngineError, UsageError
from pipeline.infra.confirmed import BuildRef
from pipeline.infra.files import sha256_of, write_atomically
from pipeline.infra.image import build_image, image_tag, write_context
from pipeline.infra.runtime import Runtime, download_locked, lock_directory
from pipeline.infra.wheel_cache import WheelCache
from pipeline.infra.workshop import Workshop
from pipeline.places import RunDir
from pipeline.progress import Say
from pipeline.stages.build.build_record import BuildRecord
from pipeline.stages.build.night_build import built_runtime, serves_locally
from pipeline.stages.prove.boot import Candidate, prepare_candidate
from pipeline.stages.prove.last_good import image_build, runtime_build


@dataclass(frozen=True)
class NightCandidate:
    """What tonight serves and publishes: the candidate, its lock, its wheels and the plan they were built from."""

    candidate: Candidate
    lock: Path
    wheels: tuple[Path, ...]
    plan: dict[str, Any] | None
    refused: str | None = None  # why inspection refused the wheels (then nothing is booted)

    def build_ref(self, *, night: str, commits: dict[str, str]) -> BuildRef | None:
        """Tonight's build by what it is made of; None when inspection refused it (nothing is served)."""
        if self.refused is not None:
            return None
        if self.candidate.runtime is not None:
            return runtime_build(self.candidate.runtime, self.lock, night=night, commits=commits)
        assert self.candidate.image is not None  # a built night that was not refused has its image
        wheels = {w.name: sha256_of(w) for w in self.wheels}
        return image_build(self.candidate.image, self.lock, wheels, night=night, commits=commits)


def prepare_night_candidate(
    profile: Profile, shop: Workshop, *, run: RunDir, wheels_dir: Path, built: Runtime | None = None
) -> NightCandidate:
    """Tonight's candidate: the profile's pinned runtime, or the wheels tonight's build recorded in `run`, served from
    `built` where the build in this process made their runtime already (else made again from the record)."""
    if profile.candidate_from == "pip":
        candidate = prepare_candidate(profile, shop, run.root)
        assert candidate.runtime is not None
        lock = run.lock
        write_atomically(lock, (candidate.runtime.root / "lock.txt").read_text())
        shop.say(f"candidate: {' '.join(profile.candidate_requirements)}, {len(candidate.runtime.lock)} locked files")
        return NightCandidate(candidate, lock, (), None)
    return _ingest_build(profile, shop, run=run, wheels_dir=wheels_dir, built=built)


def _ingest_build(
    profile: Profile, shop: Workshop, *, run: RunDir, wheels_dir: Path, built: Runtime | None
) -> NightCandidate:
    """Tonight's built wheels (from `spark-nightly build --run-id` of the same run), checked, then their image."""
    say = shop.say
    needed = [run.build_record, run.inspection, run.plan]
    if missing := [p.name for p in needed if not p.exists()]:
        raise UsageError(f"{run.root} has no {', '.join(missing)}: run `spark-nightly build --run-id {run.id}` first")
    record = BuildRecord.read(run.build_record)
    plan = json.loads(run.plan.read_text())
    wheels = []
    for build in record.builds:
        for wheel in build.wheels:
            path = wheels_dir / run.id / wheel.filename
            if not path.exists() or sha256_of(path) != wheel.sha256:
                raise EngineError(f"{path} is missing or changed since the build recorded its sha256")
            wheels.append(path)
    inspection = json.loads(run.inspection.read_text())
    placeholder = Candidate(profile)
    if inspection["status"] == "FAIL":
        problems = [p for w in inspection["wheels"] for p in w["problems"]] + inspection["problems"]
        return NightCandidate(placeholder, run.lock, tuple(wheels), plan, "; ".join(problems)[:2000])
    lock = run.lock
    if not lock.exists():
        raise UsageError(f"{run.root} has no lock.txt: run `spark-nightly build --run-id {run.id}` without --no-lock")
    if serves_locally(profile):
        cache = WheelCache(shop.cache.wheels)
        cached = [path for build in record.builds for path in _cache_paths(cache, build.cache_key)]
        # the build made this runtime to read its lock: served as it is, never made twice (a cache hit, but its
        # folders read and its log lines said again)
        runtime = built or built_runtime(profile, cached, shop, run.root, bases=record.base_wheels)
        write_atomically(lock, (runtime.root / "lock.txt").read_text())
        say(f"candidate: tonight's {', '.join(p.name for p in cached)} in runtime {runtime.root.name}")
        return NightCandidate(Candidate(profile, runtime=runtime), lock, tuple(wheels), plan)
    image = build_runtime_image(profile, lock=lock, wheels=wheels, context=run.image_context, say=say)
    return NightCandidate(Candidate(profile, image=image), lock, tuple(wheels), plan)


def _cache_paths(cache: WheelCache, key: str) -> list[Path]:
    entry = cache.lookup(key)
    if entry is None:
        raise EngineError(f"the wheel cache lost build {key} since the build recorded it: run the build again")
    return entry.paths()


def build_runtime_image(profile: Profile, *, lock: Path, wheels: list[Path], context: Path, say: Say) -> str:
    """The runtime image of the lock: every locked file in the context (hashes checked), installed with --no-index."""
    folder = context / "fetched"
    folder.mkdir(parents=True, exist_ok=True)
    for wheel in wheels:
        shutil.copy2(wheel, folder / wheel.name)
    shutil.copy2(lock, folder / "lock.txt")
    download_locked(folder, context / "wheels", context)
    shutil.copy2(lock, context / "lock.txt")
    files = lock_directory(context / "wheels", ())
    write_context(context, profile, files)
    tag = image_tag(sha256_of(lock)[:16])
    say(f"candidate: building the runtime image {tag} from {len(files)} locked files")
    build_image(context, tag)
    return tag
