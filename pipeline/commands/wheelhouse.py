"""`spark-nightly wheelhouse --profile P --dest DIR`: every file a night of the profile installs, fetched once on a
machine with the network, for a runner that has none."""

from __future__ import annotations

import argparse
import importlib.metadata
import shlex
import sys
import tempfile
import time
from pathlib import Path

from pipeline.config.bundle import Config
from pipeline.errors import UsageError
from pipeline.infra.base_env import BaseEnv, python_version, read_listing
from pipeline.infra.wheelhouse import WheelSet, make_wheelhouse
from pipeline.progress import to_stderr
from pipeline.settings import Settings
from pipeline.stages.prove.supplies import base_of, night_sets


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    wheelhouse = commands.add_parser(
        "wheelhouse",
        parents=[common],
        help="fetch every file a night of the profile installs into one folder, for a runner without the network",
        description="Resolve the profile's candidate, the golden judge's and converter's environment and its "
        "entries' package weights, less what the base environment already provides, and download every file with "
        "its sha256 into DIR (files/ and the index wheelhouse.json). A second run fetches nothing; a damaged file is "
        "named and fetched again. The base is the runner's (candidate.base_python, else the profile's "
        "candidate.base), or, for a runner elsewhere, --base-listing with --python of the base's version.",
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
        help="an interpreter of the target's Python version to resolve with (default: the base's, else this one)",
    )


def run(args: argparse.Namespace, settings: Settings, config: Config) -> int:
    profile = config.matrix.profiles[settings.profile]
    entries = config.matrix.for_profile(profile.name)
    resolver = args.python or sys.executable
    base: BaseEnv | None
    if args.base_listing:
        if not args.python:
            raise UsageError("--base-listing needs --python: an interpreter of the base's Python version")
        base = read_listing(Path(args.base_listing), python_version(args.python))
    else:
        base = base_of(settings, profile)
        resolver = args.python or (base.python if base else sys.executable)
    sets = night_sets(profile, entries) + ([gate_set()] if args.gate else [])
    if not sets:
        raise UsageError(f"profile {profile.name} installs nothing a wheelhouse holds (its wheels are built)")
    strips = [arg for glob in args.strip for arg in ("--strip", glob)] + (["--gate"] if args.gate else [])
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
            say=to_stderr,
        )
    total = house.index["total_bytes"] / 2**20
    print(f"wheelhouse {args.dest}: {len(sets)} sets, {total:.0f} MiB, in {time.monotonic() - started:.0f} s")
    return 0


def gate_set() -> WheelSet:
    """spark-nightly's own dependencies, as its installed metadata declares them (no extras)."""
    requires = importlib.metadata.requires("spark-nightly") or []
    return WheelSet("spark-nightly", tuple(r for r in requires if "extra ==" not in r))
