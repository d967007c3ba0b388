"""`spark-nightly nightly [--only MODEL...] [--resume RUN_ID] [--dry-run]`: one whole night, end to end."""

from __future__ import annotations

import argparse
import json
import sys

from pipeline.config.bundle import Config
from pipeline.errors import UsageError
from pipeline.nightly import STAGES, plan_night, run_nightly
from pipeline.progress import Progress
from pipeline.settings import Settings


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
    nightly.add_argument("--run-id", help="name the run (shards of one night share it; default: a timestamp)")
    nightly.add_argument(
        "--no-publish",
        action="store_true",
        help="a shard: run the entries, leave publishing and alerts to the merge (a --resume of the run)",
    )
    nightly.add_argument(
        "--shards", type=int, metavar="N", help="print the profile's entries split into N shards (JSON) and exit"
    )
    nightly.add_argument("--dry-run", action="store_true", help="print the stages and entries, run nothing")


def run(args: argparse.Namespace, settings: Settings, config: Config) -> int:
    if args.shards is not None:
        print(json.dumps(shards(config, settings.profile, args.shards, only=args.only)))
        return 0
    if args.dry_run:
        entries = [e.id for e in config.matrix.select(settings.profile, args.only)]
        print(f"nightly on profile {settings.profile}: {len(entries)} entries ({', '.join(entries)})")
        for number, stage in enumerate(STAGES, 1):
            print(f"  {number}. {stage.name}: {stage.does}")
        return 0
    plan = plan_night(settings, config, only=args.only, resume=args.resume, run_id=args.run_id)
    try:
        return run_nightly(settings, config, plan, progress=Progress(), publish=not args.no_publish)
    except KeyboardInterrupt:
        print(f"interrupted: continue with `spark-nightly nightly --resume {plan.run_id}`", file=sys.stderr)
        raise


def shards(config: Config, profile: str, count: int, *, only: list[str] | None = None) -> list[str]:
    """The profile's entries in `count` groups of space-separated ids (for a workflow matrix), cluster entries
    alone in theirs because they hold two Sparks at once."""
    if count < 1:
        raise UsageError("--shards needs at least 1")
    entries = config.matrix.select(profile, only or ())
    solo = [e.id for e in entries if e.topology == "solo"]
    groups = [" ".join(solo[index::count]) for index in range(count)]
    groups += [e.id for e in entries if e.topology != "solo"]
    return [group for group in groups if group]
