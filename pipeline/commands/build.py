"""`spark-nightly build [--source S] [--dry-run]`: resolve, build (cached), inspect and lock the night's wheels."""

from __future__ import annotations

import argparse
import shlex
import time
from collections.abc import Sequence
from pathlib import Path

from pipeline.config.bundle import Config
from pipeline.config.matrix import Profile
from pipeline.errors import UsageError
from pipeline.infra.git import mirror_dir
from pipeline.infra.pypi import download_sdist
from pipeline.infra.safe_files import shown
from pipeline.places import CacheDir, RunDir
from pipeline.progress import Say, to_stderr
from pipeline.settings import Settings
from pipeline.stages.build.build_plan import BuildPlan
from pipeline.stages.build.build_wheels import (
    build_image_tag,
    docker_commands,
    image_paths,
    render_build_dockerfile,
)
from pipeline.stages.build.builders import BUILD_ORDER, BUILDERS
from pipeline.stages.build.builders.base import BuildSource, Paths, Toolchain
from pipeline.stages.build.inspect import ArtifactReport
from pipeline.stages.build.native_inputs import NATIVE_INPUTS
from pipeline.stages.build.night_build import (
    OVERLAY_FAMILIES,
    build_inspect_lock,
    build_tonight,
    sources_from,
    toolchain_for,
)
from pipeline.stages.build.resolve import parse_pull_request, resolve_sources
from pipeline.stages.prove.supplies import night_workshop
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


def run(args: argparse.Namespace, settings: Settings, config: Config) -> int:
    profile = config.matrix.profiles[settings.profile]
    families = args.source or list(BUILD_ORDER)
    for source in sources_from(settings, profile):  # a bad PR selection stops the run before anything is fetched
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
        _print_dry_run(families, settings, toolchain, profile)
        return 0
    run_id = args.run_id or time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    run = settings.places.run(run_id)
    run.root.mkdir(parents=True, exist_ok=True)
    shop = night_workshop(settings, profile, to_stderr)  # the runner's wheelhouse and base, as its night reads them
    if not args.sdist and not args.plan and not args.source:
        built = build_tonight(settings, profile, run, shop, lock=not args.no_lock)
    else:
        built = build_inspect_lock(
            _build_sources(args, families, settings, run),
            profile,
            toolchain,
            run=run,
            out_dir=settings.places.wheels / run_id,
            shop=shop,
            expect_families=not args.sdist,
            lock=not args.no_lock,
            min_free_gib=settings.build_min_free_gib,
        )
    for result in built.results:
        print(f"{result.family}: {'cached: ' if result.cached else ''}{result.why} ({result.build_seconds:.0f} s)")
    print_report(built.report)
    folder = built.wheels[0].parent if built.wheels else "-"
    if built.report.status == Status.FAIL:
        print(f"build: inspection refused the wheels; nothing locked (see {run.inspection})")
        return Status.FAIL.exit_code
    if built.lock is None:
        print(f"build: {len(built.wheels)} wheel(s) in {folder}; not locked (--no-lock)")
        return 0
    print(f"build: {len(built.wheels)} wheel(s) in {folder}; lock {built.lock}")
    return 0


def _build_sources(
    args: argparse.Namespace, families: Sequence[str], settings: Settings, run: RunDir
) -> list[BuildSource]:
    cache_dir = settings.places.cache
    if args.sdist:
        sdist = download_sdist(args.sdist, CacheDir(cache_dir).sdists)
        return [BuildSource.from_sdist(families[0], sdist)]
    if args.plan:
        plan = BuildPlan.load(Path(args.plan))
    else:
        wanted = [s for s in sources_from(settings) if s.name in families]
        plan = resolve_sources(
            wanted,
            cache_dir=cache_dir,
            work_dir=run.root,
            created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            say=to_stderr,
        )
    plan.save(run.plan)
    return [
        BuildSource.from_plan(plan.source(name), mirror_dir(cache_dir, plan.source(name).repo))
        for name in BUILD_ORDER
        if name in families and any(s.name == name for s in plan.sources)
    ]


def _build_rule(family: str, profile: Profile) -> str:
    """How tonight's build of the family is chosen, in one line."""
    if family not in OVERLAY_FAMILIES:
        return "built from its tree every night (an unchanged tree is a cache hit)"
    pin = profile.native_bases.get(family)
    bases = "this runner's own native builds" + (
        f" and {pin.project}=={pin.version} ({pin.sha256[:12]})" if pin else ""
    )
    inputs = ", ".join(NATIVE_INPUTS[family][:6])
    fallback = "a native build" if profile.builds_natively else "refused (this profile cannot compile natives)"
    return f"an overlay on {bases} where no native input ({inputs}, ...) differs, else {fallback}"


def print_report(report: ArtifactReport, say: Say = print) -> None:
    # names inside a wheel are the wheel author's: control characters are shown escaped, never sent to the terminal
    for wheel in report.wheels:
        say(f"{wheel.status.value:4}  {shown(wheel.wheel)}")
        for library in wheel.libraries:
            images = f"cubins {', '.join(library.cubins) or 'none'}" + (
                f"; PTX {', '.join(library.ptx)}" if library.ptx else ""
            )
            what = images if library.status == "ok" else shown(library.reason)
            say(f"      {library.status:8} {shown(library.member)}: {what}")
        for problem in wheel.problems:
            say(f"      problem: {shown(problem)}")
        for note in wheel.notes:
            say(f"      note: {shown(note)}")
    for problem in report.problems:
        say(f"FAIL  {shown(problem)}")
    for note in report.notes:
        say(f"note: {shown(note)}")
    say(f"inspection: {report.status.value}")


def _print_dry_run(families: Sequence[str], settings: Settings, toolchain: Toolchain, profile: Profile) -> None:
    """The exact commands of a night, with the commits shown as what resolve will pin them to."""
    cache_dir = settings.places.cache
    if toolchain.ccache_dir is None:
        print("# ccache is not installed: builds run without a compiler cache")
    for source in sources_from(settings, profile):
        if source.name not in families:
            continue
        print(f"# {source.name}: {_build_rule(source.name, profile)}")
        mirror = mirror_dir(cache_dir, source.repo)
        prs = [f"refs/pull/{parse_pull_request(spec, source).number}/head" for spec in source.prs]
        # values from settings are shown quoted, as a shell would need them: what is printed can be pasted
        print(f"# {source.name}: resolve {shlex.quote(source.ref)} and PRs {shlex.join(source.prs) or '(none)'}")
        print(shlex.join(["git", "-C", str(mirror), "ls-remote", "origin", f"refs/heads/{source.ref}", *prs]))
        print(
            f"{shlex.join(['git', '-C', str(mirror), 'fetch', '--no-tags', '--progress', 'origin'])} <each ref found>"
        )
        print("# each PR: git cherry-pick --no-commit <its tree on its merge-base with main> in a worktree of main")
        if source.name in OVERLAY_FAMILIES and not profile.builds_natively:
            print(f"# {source.name}: the overlay is written by spark-nightly itself; no build command runs")
            continue
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
                print(shlex.join(argv))
        else:
            runtime = f"{cache_dir}/runtimes/build-{source.name}-<key of its build requirements>"
            paths = Paths(f"{runtime}/bin/python", f"{runtime}/bin/uv", "<staging>")
            for step in builder.steps(None, placeholder, toolchain, paths):
                env = [f"{k}={v}" for k, v in sorted(step.env.items())]
                print(f"(cd {shlex.quote(f'{src}/{step.cwd}')} && {shlex.join(['env', *env, *step.argv])})")
