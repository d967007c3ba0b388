"""`spark-nightly nightly [--only MODEL...] [--resume RUN_ID] [--dry-run]`: one whole night, end to end."""

from __future__ import annotations

import argparse

from pipeline.config.bundle import Config
from pipeline.nightly import plan_night, run_nightly
from pipeline.progress import to_stderr
from pipeline.settings import Settings

STAGES = ("candidate (build and inspect, or the pinned runtime)", "for each entry: health, smoke, boot, golden, perf",
          "decide", "publish (only a passing night)", "alert", "report")  # fmt: skip


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    nightly = commands.add_parser(
        "nightly",
        parents=[common],
        help="run a whole night: candidate, every entry, decide, publish, alert, report",
        description="Run the night on the profile (--profile): every matrix entry ends with a status, its stage, "
        "reason, numbers and duration; only a passing night is published; alerts are opened, updated or closed; "
        "run.json, summary.md and junit.xml go to runs/<run>/. Exit code: the worst status of the required entries.",
    )
    nightly.add_argument("--only", nargs="+", default=[], metavar="MODEL", help="run only these entries")
    nightly.add_argument("--resume", metavar="RUN_ID", help="continue an interrupted run without redoing entries")
    nightly.add_argument("--dry-run", action="store_true", help="print the stages and entries, run nothing")


def run(args: argparse.Namespace, settings: Settings, config: Config) -> int:
    if args.dry_run:
        profile = config.matrix.profiles[settings.profile]
        entries = [
            e.id for e in config.matrix.entries if e.profile == profile.name and (not args.only or e.id in args.only)
        ]
        print(f"nightly on profile {profile.name}: {len(entries)} entries ({', '.join(entries)})")
        for number, stage in enumerate(STAGES, 1):
            print(f"  {number}. {stage}")
        return 0
    plan = plan_night(settings, config, only=args.only, resume=args.resume)
    return run_nightly(settings, config, plan, say=to_stderr)
