"""`spark-nightly wheelhouse --profile P --dest DIR`: every file a night of the profile installs, fetched once on a
machine with the network, for a runner that has none."""

from __future__ import annotations

import argparse
import importlib.metadata
import platform
import shlex
import sys
import tempfile
import time
from pathlib import Path

from pipeline.config.bundle import Config
from pipeline.config.matrix import Profile
from pipeline.errors import UsageError
from pipeline.infra.base_env import BaseEnv, python_version, read_listing
from pipeline.infra.wheel_target import Target
from pipeline.infra.wheelhouse import WheelSet, make_wheelhouse
from pipeline.progress import to_stderr
from pipeline.settings import Settings
from pipeline.stages.build.night_build import tree_build_sets
from pipeline.stages.prove.supplies import base_of, night_sets


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    wheelhouse = commands.add_parser(
        "wheelhouse",
        parents=[common],
        help="fetch every file a night of the profile installs into one folder, for a runner without the network",
        description="Resolve the profile's candidate, the golden judge's and converter's environment and its "
        "entries' package weights, the build environment of each source a built profile builds from its tree on the "
        "host (read from the source's main now: gpu-built's FlashInfer), less what the base environment already "
        "provides, and download every file with "
        "its sha256 into DIR (files/ and the index wheelhouse.json). A second run fetches nothing; a damaged file is "
        "named and fetched again. The base is the runner's (candidate.base_python, else the profile's "
        "candidate.base), or, for a runner elsewhere, --base-listing. For a runner unlike this machine (another "
        "Python, another platform: a Spark is aarch64) name it with --target-python and --target-platform; no "
        "interpreter of its Python is needed here.",
    )
    wheelhouse.add_argument("--dest", required=True, metavar="DIR", help="the wheelhouse folder (made or updated)")
    wheelhouse.add_argument(
        "--base-listing",
        metavar="FILE",
        help="the base's `python -m pip list --format=json`, taken on the runner, when the base is not here",
    )
    wheelhouse.add_argument(
        "--strip",
        action="append",
        default=[],
        metavar="GLOB",
        help="take members matching GLOB out of the wheels (a library the runner's GPU never loads, such as "
        "vllm/vllm_flash_attn/_vllm_fa2_C*.so on Hopper); recorded in the index with each wheel's original sha256",
    )
    wheelhouse.add_argument(
        "--gate",
        action="store_true",
        help="also fetch spark-nightly's own dependencies (the set `spark-nightly`), to install the gate itself on a "
        "runner without the network",
    )
    wheelhouse.add_argument(
        "--python",
        metavar="PY",
        help="an interpreter of the target's Python version to resolve with (default: the base's, else this one); "
        "not needed with --target-python",
    )
    wheelhouse.add_argument(
        "--target-python",
        metavar="X.Y",
        help="the runner's Python version (e.g. 3.12), resolved for without an interpreter of it",
    )
    wheelhouse.add_argument(
        "--target-platform",
        metavar="TAG",
        help="the runner's platform as manylinux_2_<glibc minor>_<arch> (default: the profile's `platform` and "
        "`glibc`, the Spark's manylinux_2_39_aarch64; else this machine's)",
    )


def run(args: argparse.Namespace, settings: Settings, config: Config) -> int:
    profile = config.matrix.profiles[settings.profile]
    entries = config.matrix.for_profile(profile.name)
    target = target_of(args, profile)
    resolver = args.python or sys.executable
    base: BaseEnv | None
    if args.base_listing:
        if not (args.python or target):
            raise UsageError(
                "--base-listing needs the base's Python: --target-python X.Y (or --python, an interpreter of it)"
            )
        base = read_listing(Path(args.base_listing), target.python if target else python_version(args.python))
    else:
        base = base_of(settings, profile)
        resolver = args.python or (base.python if base else sys.executable)
    sets = night_sets(profile, entries) + tree_build_sets(settings, profile, say=to_stderr)
    sets += [gate_set()] if args.gate else []
    if not sets:
        raise UsageError(f"profile {profile.name} installs nothing a wheelhouse holds (its wheels are built)")
    strips = [arg for glob in args.strip for arg in ("--strip", glob)] + (["--gate"] if args.gate else [])
    if target is not None:
        strips += ["--target-python", target.python, "--target-platform", target.platform]
    command = shlex.join(["spark-nightly", "wheelhouse", "--profile", profile.name, "--dest", args.dest, *strips])
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="spark-nightly-wheelhouse-") as logs:
        house = make_wheelhouse(
            sets,
            Path(args.dest),
            resolver_python=resolver,
            base=base,
            command=command,
            log_dir=Path(logs),
            strip=args.strip,
            target=target,
            say=to_stderr,
        )
    total = house.index["total_bytes"] / 2**20
    made_for = Target(**house.index["target"]).describe()
    print(
        f"wheelhouse {args.dest}: {len(sets)} sets, {total:.0f} MiB for {made_for}, "
        f"in {time.monotonic() - started:.0f} s"
    )
    return 0


def target_of(args: argparse.Namespace, profile: Profile) -> Target | None:
    """The runner named on the command line or by the profile, or None where it is this machine (resolved by pip
    in an interpreter of the base's version, as before targets)."""
    named = Target.profile_platform(profile.platform, profile.glibc)
    unlike_here = named is not None and not named.endswith("_" + platform.machine())
    if not (args.target_python or args.target_platform or unlike_here):
        return None
    platform_name = args.target_platform or named
    if not args.target_python:
        raise UsageError(
            f"profile {profile.name} runs on {platform_name}, not this machine: name the runner's Python with "
            "--target-python X.Y (a Spark's DGX OS 7 has 3.12)"
        )
    return Target.parse(args.target_python, platform_name or Target.here(args.target_python).platform)


def gate_set() -> WheelSet:
    """spark-nightly's own dependencies, as its installed metadata declares them (no extras)."""
    requires = importlib.metadata.requires("spark-nightly") or []
    return WheelSet("spark-nightly", tuple(r for r in requires if "extra ==" not in r))
