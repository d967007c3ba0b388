"""Build, inspect and lock one set of sources into a run directory: what `build` does and a culprit trial repeats."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from pipeline.config.matrix import Profile
from pipeline.infra.fatbin import ensure_cuobjdump
from pipeline.infra.files import sha256_of, write_atomically
from pipeline.infra.wheel_cache import WheelCache
from pipeline.places import RunDir
from pipeline.progress import Say, quiet
from pipeline.settings import Settings
from pipeline.stages.build.arch_rules import pip_platforms
from pipeline.stages.build.build_wheels import BuildResult, build_source
from pipeline.stages.build.builders import BUILDERS
from pipeline.stages.build.builders.base import BuildSource, Toolchain
from pipeline.stages.build.inspect import ArtifactReport, Target, inspect_wheels
from pipeline.stages.build.lock import lock_wheel_set
from pipeline.stages.build.resolve import Source
from pipeline.status import Status


@dataclass(frozen=True)
class BuiltNight:
    """The wheels of one set of sources, their inspection, and their lock (None when refused or not asked)."""

    wheels: tuple[Path, ...]
    report: ArtifactReport
    lock: Path | None


def build_inspect_lock(  # noqa: PLR0913 -- the build's folders and switches, by keyword
    sources: Sequence[BuildSource],
    profile: Profile,
    toolchain: Toolchain,
    *,
    run: RunDir,
    out_dir: Path,
    cache_dir: Path,
    expect_families: bool = True,
    lock: bool = True,
    min_free_gib: int = 0,
    say: Say = quiet,
) -> BuiltNight:
    """Writes the build record and the inspection (and the lock when the wheels pass and `lock`) into `run`."""
    results = [
        build_source(
            BUILDERS[source.family],
            source,
            toolchain,
            cache=WheelCache(cache_dir / "wheels"),
            work_dir=run.build_work,
            out_dir=out_dir,
            cache_dir=cache_dir,
            min_free_gib=min_free_gib,
            say=say,
        )
        for source in sources
    ]
    wheels = tuple(wheel for result in results for wheel in result.wheels)
    write_build_record(run.build_record, results)
    target = Target.of(profile)
    cuobjdump = ensure_cuobjdump(cache_dir, run.root, say=say) if target.gpu else None
    expected = [name for r in results for name in BUILDERS[r.family].families(None)] if expect_families else []
    report = inspect_wheels(list(wheels), target, cuobjdump, families=expected, say=say)
    write_report(run.inspection, report)
    if report.status == Status.FAIL or not lock:
        return BuiltNight(wheels, report, None)
    locked = lock_wheel_set(
        list(wheels),
        torch_version=profile.torch.version,
        gpu=target.gpu,
        index_urls=toolchain.index_urls,
        dest=run.root,
        log_dir=run.root,
        platforms=pip_platforms(target.platform, target.glibc),
        say=say,
    )
    write_atomically(run.lock_notes, json.dumps({"version": 1, "notes": list(locked.notes)}) + "\n")
    return BuiltNight(wheels, report, locked.path)


def toolchain_for(profile: Profile, settings: Settings) -> Toolchain:
    jobs = settings.build_max_jobs or max(1, (os.cpu_count() or 2) // 2)
    has_ccache = settings.build_mode == "docker" or shutil.which("ccache") is not None
    return Toolchain(
        cuda_arch=profile.arch,
        torch=f"torch=={profile.torch.version}",
        index_urls=(profile.torch.index_url,) if profile.torch.index_url else (),
        max_jobs=jobs,
        mode="docker" if settings.build_mode == "docker" else "host",
        ccache_dir=settings.places.cache / "ccache" if has_ccache else None,
        base_image=settings.build_image,
        ccache_size=settings.build_ccache_size or "50G",
    )


def sources_from(settings: Settings) -> list[Source]:
    return [
        Source(
            "flashinfer",
            settings.flashinfer_repo,
            settings.flashinfer_ref,
            settings.flashinfer_prs,
            "sources.flashinfer.prs",
        ),
        Source("vllm", settings.vllm_repo, settings.vllm_ref, settings.vllm_prs, "sources.vllm.prs"),
    ]


def write_build_record(path: Path, results: Sequence[BuildResult]) -> None:
    record = {
        "version": 1,
        "builds": [
            {
                "family": r.family,
                "cache_key": r.key,
                "cached": r.cached,
                "seconds": round(r.seconds, 3),
                "build_seconds": round(r.build_seconds, 3),
                "wheels": [{"filename": w.name, "sha256": sha256_of(w), "size": w.stat().st_size} for w in r.wheels],
            }
            for r in results
        ],
    }
    write_atomically(path, json.dumps(record, indent=2, sort_keys=True) + "\n")


def write_report(path: Path, report: ArtifactReport) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps({"version": 1} | asdict(report), indent=2, sort_keys=True) + "\n")
