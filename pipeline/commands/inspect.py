"""`spark-nightly inspect WHEEL...`: the checks a wheel must pass before any GPU time is spent on it."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from pipeline.commands.build import print_report
from pipeline.config.bundle import Config
from pipeline.errors import UsageError
from pipeline.infra.fatbin import ensure_cuobjdump
from pipeline.progress import to_stderr
from pipeline.settings import Settings
from pipeline.stages.build.inspect import Target, inspect_wheels
from pipeline.stages.build.night_build import write_report
from pipeline.stages.prove.supplies import night_workshop


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    inspect = commands.add_parser(
        "inspect",
        parents=[common],
        help="check wheels: archive and RECORD, metadata, torch pin, cubins and PTX per native library",
        description="Check each wheel against the profile (--profile): the archive and its RECORD hashes, the "
        "metadata, exactly one wheel per family, the torch requirement against the profile's pin, and, on a GPU "
        "profile, every native library's cubins (the target architecture must be there) and PTX (not newer than "
        "the driver's CUDA). Exit 6 when a wheel is refused.",
    )
    inspect.add_argument("wheels", nargs="+", metavar="WHEEL", help="wheel files")
    inspect.add_argument("--driver-cuda", metavar="X.Y", help="the driver's CUDA version (default: the profile's)")
    inspect.add_argument("--json", metavar="FILE", help="also write the full report as JSON")


def run(args: argparse.Namespace, settings: Settings, config: Config) -> int:
    wheels = [Path(w) for w in args.wheels]
    for wheel in wheels:
        if not wheel.is_file():
            raise UsageError(f"{wheel}: no such wheel file")
    try:
        target = Target.of(config.matrix.profiles[settings.profile], args.driver_cuda)
    except ValueError as exc:
        raise UsageError(f"--driver-cuda: {exc}") from None
    with tempfile.TemporaryDirectory(prefix="spark-nightly-inspect-") as logs:
        cuobjdump = (
            ensure_cuobjdump(
                night_workshop(settings, config.matrix.profiles[settings.profile], to_stderr),
                Path(logs),
            )
            if target.gpu and target.arch
            else None
        )
        report = inspect_wheels(wheels, target, cuobjdump, say=to_stderr)
    if args.json:
        write_report(Path(args.json), report)
    print_report(report)
    return report.status.exit_code
