"""`spark-nightly build [--source S] [--dry-run]`: resolve, build (cached), inspect and lock the night's wheels."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from pipeline.config.bundle import Config
from pipeline.config.matrix import Profile
from pipeline.errors import UsageError
from pipeline.infra.fatbin import ensure_cuobjdump
from pipeline.infra.git import mirror_dir
from pipeline.infra.pypi import download_sdist
from pipeline.infra.runtime import sha256_of, write_atomically
from pipeline.infra.wheel_cache import WheelCache
from pipeline.progress import Say, to_stderr
from pipeline.settings import Settings
from pipeline.stages.build import (
    BuildResult,
    build_image_tag,
    build_source,
    docker_commands,
    image_paths,
    render_build_dockerfile,
)
from pipeline.stages.builders import BUILD_ORDER, BUILDERS
from pipeline.stages.builders.base import BuildSource, Paths, Toolchain
from pipeline.stages.inspect import ArtifactReport, Target, inspect_wheels
from pipeline.stages.lock import lock_wheel_set
from pipeline.stages.plan import BuildPlan
from pipeline.stages.resolve import Source, parse_pull_request, resolve_sources
from pipeline.status import Status


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    build = commands.add_parser(
        "build",
        parents=[common],
        help="resolve the sources, build their wheels (cached), inspect and lock them",
        description="Resolve vLLM and FlashInfer (main plus the selected PRs) to commits, build FlashInfer's wheels "
        "then vLLM's for the profile's architecture (an unchanged source is a cache hit), inspect every wheel and "
        "write the lock. Output: wheels/<run>/ and runs/<run>/{plan.json,build.json,inspect.json,lock.txt}.",
    )
    build.add_argument("--source", choices=BUILD_ORDER, action="append", help="build only this source (repeatable)")
    build.add_argument("--plan", metavar="FILE", help="build the commits of this plan.json instead of resolving")
    build.add_argument("--sdist", metavar="NAME==VERSION", help="build a released sdist from PyPI instead of git")
    build.add_argument("--run-id", help="name of the run directory (default: a timestamp)")
    build.add_argument("--no-lock", action="store_true", help="build and inspect only; write no lock")
    build.add_argument("--dry-run", action="store_true", help="print the exact commands, run nothing")


def toolchain_for(profile: Profile, settings: Settings) -> Toolchain:
    jobs = settings.build_max_jobs or max(1, (os.cpu_count() or 2) // 2)
    has_ccache = settings.build_mode == "docker" or shutil.which("ccache") is not None
    return Toolchain(
        cuda_arch=profile.arch,
        torch=f"torch=={profile.torch.version}",
        index_urls=(profile.torch.index_url,) if profile.torch.index_url else (),
        max_jobs=jobs,
        mode="docker" if settings.build_mode == "docker" else "host",
        ccache_dir=settings.path("cache_dir") / "ccache" if has_ccache else None,
        base_image=settings.build_image,
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


def run(args: argparse.Namespace, settings: Settings, config: Config) -> int:
    profile = config.matrix.profiles[settings.profile]
    families = args.source or list(BUILD_ORDER)
    for source in sources_from(settings):  # a bad PR selection stops the run before anything is fetched
        for spec in source.prs:
            parse_pull_request(spec, source)
    if args.sdist and len(families) != 1:
        raise UsageError("--sdist builds one source: add --source flashinfer or --source vllm")
    if profile.candidate_from == "pip" and not args.sdist:
        pinned = " ".join(profile.candidate_requirements)
        print(f"profile {profile.name} installs its candidate from pip ({pinned}): nothing to build")
        return 0
    toolchain = toolchain_for(profile, settings)
    if args.dry_run:
        _print_dry_run(families, settings, toolchain)
        return 0
    run_id = args.run_id or time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    run_dir = settings.path("runs_dir") / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    cache_dir = settings.path("cache_dir")
    sources = _build_sources(args, families, settings, run_dir)
    results = [
        build_source(
            BUILDERS[source.family],
            source,
            toolchain,
            cache=WheelCache(cache_dir / "wheels"),
            work_dir=run_dir / "build",
            out_dir=settings.path("wheels_dir") / run_id,
            cache_dir=cache_dir,
            say=to_stderr,
        )
        for source in sources
    ]
    wheels = [wheel for result in results for wheel in result.wheels]
    _write_build_record(run_dir / "build.json", results)
    target = Target.of(profile)
    cuobjdump = ensure_cuobjdump(cache_dir, run_dir, say=to_stderr) if target.gpu else None
    expected = [name for result in results for name in BUILDERS[result.family].families(None)] if not args.sdist else []
    report = inspect_wheels(wheels, target, cuobjdump, families=expected, say=to_stderr)
    write_report(run_dir / "inspect.json", report)
    print_report(report)
    if report.status == Status.FAIL:
        print(f"build: inspection refused the wheels; nothing locked (see {run_dir / 'inspect.json'})")
        return Status.FAIL.exit_code
    if args.no_lock:
        print(f"build: {len(wheels)} wheel(s) in {wheels[0].parent}; not locked (--no-lock)")
        return 0
    lock = lock_wheel_set(
        wheels,
        torch_version=profile.torch.version,
        gpu=target.gpu,
        index_urls=toolchain.index_urls,
        dest=run_dir,
        log_dir=run_dir,
        say=to_stderr,
    )
    print(f"build: {len(wheels)} wheel(s) in {wheels[0].parent if wheels else '-'}; lock {lock.path}")
    return 0


def _build_sources(
    args: argparse.Namespace, families: Sequence[str], settings: Settings, run_dir: Path
) -> list[BuildSource]:
    cache_dir = settings.path("cache_dir")
    if args.sdist:
        sdist = download_sdist(args.sdist, cache_dir / "sdists")
        return [BuildSource.from_sdist(families[0], sdist)]
    if args.plan:
        plan = BuildPlan.load(Path(args.plan))
    else:
        wanted = [s for s in sources_from(settings) if s.name in families]
        plan = resolve_sources(
            wanted,
            cache_dir=cache_dir,
            work_dir=run_dir,
            created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            say=to_stderr,
        )
    plan.save(run_dir / "plan.json")
    return [
        BuildSource.from_plan(plan.source(name), mirror_dir(cache_dir, plan.source(name).repo))
        for name in BUILD_ORDER
        if name in families and any(s.name == name for s in plan.sources)
    ]


def _write_build_record(path: Path, results: Sequence[BuildResult]) -> None:
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


def print_report(report: ArtifactReport, say: Say = print) -> None:
    for wheel in report.wheels:
        say(f"{wheel.status.value:4}  {wheel.wheel}")
        for library in wheel.libraries:
            say(
                f"      {library.status:8} {library.member}: cubins {', '.join(library.cubins) or 'none'}"
                + (f"; PTX {', '.join(library.ptx)}" if library.ptx else "")
            )
        for problem in wheel.problems:
            say(f"      problem: {problem}")
        for note in wheel.notes:
            say(f"      note: {note}")
    for problem in report.problems:
        say(f"FAIL  {problem}")
    say(f"inspection: {report.status.value}")


def _print_dry_run(families: Sequence[str], settings: Settings, toolchain: Toolchain) -> None:
    """The exact commands of a night, with the commits shown as what resolve will pin them to."""
    cache_dir = settings.path("cache_dir")
    if toolchain.ccache_dir is None:
        print("# ccache is not installed: builds run without a compiler cache")
    for source in sources_from(settings):
        if source.name not in families:
            continue
        mirror = mirror_dir(cache_dir, source.repo)
        prs = " ".join(f"refs/pull/{parse_pull_request(spec, source).number}/head" for spec in source.prs)
        print(f"# {source.name}: resolve {source.ref} and PRs [{', '.join(source.prs) or 'none'}]")
        print(f"git -C {mirror} ls-remote origin refs/heads/{source.ref} {prs}".rstrip())
        print(f"git -C {mirror} fetch --no-tags --progress origin <each ref found>")
        print("# each PR: git cherry-pick --no-commit <its tree on its merge-base with main> in a worktree of main")
        placeholder = BuildSource(
            source.name,
            f"git-tree:<{source.name} tree>",
            "g<commit>.d<date>",
            epoch=None,
            mirror=mirror,
            commit="<commit>",
        )
        builder = BUILDERS[source.name]
        src = Path(f"<worktree of {source.name}>")
        if toolchain.mode == "docker":
            dockerfile = render_build_dockerfile(
                toolchain, ("<[build-system] requires of the source>", toolchain.torch, "uv")
            )
            print(f"# build image {build_image_tag(dockerfile)}:")
            print("\n".join(f"#   {line}" for line in dockerfile.splitlines() if line))
            steps = builder.steps(None, placeholder, toolchain, image_paths())
            for argv in docker_commands(
                steps,
                image="<build image>",
                source_dir=str(src),
                out_dir="<staging>",
                ccache_dir=str(toolchain.ccache_dir) if toolchain.ccache_dir else None,
            ):
                print(" ".join(argv))
        else:
            runtime = f"{cache_dir}/runtimes/build-{source.name}-<key of its build requirements>"
            paths = Paths(f"{runtime}/bin/python", f"{runtime}/bin/uv", "<staging>")
            for step in builder.steps(None, placeholder, toolchain, paths):
                env = " ".join(f"{k}={v}" for k, v in sorted(step.env.items()))
                print(f"(cd {src}/{step.cwd} && env {env} {' '.join(step.argv)})")
