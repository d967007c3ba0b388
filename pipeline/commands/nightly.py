"""`spark-nightly nightly [--only MODEL...] [--resume RUN_ID] [--dry-run]`: one whole night, end to end."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pipeline.config.bundle import Config
from pipeline.errors import UsageError
from pipeline.infra import actions
from pipeline.nightly import STAGES, plan_night, run_nightly
from pipeline.places import RunDir
from pipeline.progress import Progress
from pipeline.settings import Settings

RUNNER_LABEL = "spark-nightly-{index}"  # shard i always runs on the runner with this label: its history is there


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    nightly = commands.add_parser(
        "nightly",
        parents=[common],
        help="run a whole night: candidate, every entry, decide, publish, alert, report",
        description="Run the night on the profile (--profile): every matrix entry ends with a status, its stage, "
        "reason, numbers and duration; only a passing night is published; alerts are opened, updated or closed; "
        "run.json, summary.md and junit.xml go to runs/<run>/. Exit code: the worst status of the required entries "
        "(with --actions: 0 for any verdict, which the step's annotation and summary carry).",
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
        "--merge",
        action="store_true",
        help="with --resume: the shards ran the entries; decide, publish, alert and report, running no entry "
        "(one no shard handed over is ABORTED)",
    )
    nightly.add_argument(
        "--shards",
        type=int,
        metavar="N",
        help="print the entries split over N runners (JSON: solo shards with their runner label, cluster entries) "
        "and exit; with --run-id, also start that run with this selection",
    )
    nightly.add_argument(
        "--actions",
        action="store_true",
        help="a GitHub Actions step: set the step's outputs, append the summary, annotate the verdict, and end "
        "with 0 whatever the verdict (non-zero only when the pipeline itself broke)",
    )
    nightly.add_argument("--dry-run", action="store_true", help="print the stages and entries, run nothing")


def run(args: argparse.Namespace, settings: Settings, config: Config) -> int:
    if args.merge and not args.resume:
        raise UsageError("--merge continues a run the shards ran: add --resume RUN_ID")
    if args.shards is not None:
        return _print_shards(args, settings, config)
    if args.dry_run:
        entries = [e.id for e in config.matrix.select(settings.profile, args.only)]
        print(f"nightly on profile {settings.profile}: {len(entries)} entries ({', '.join(entries)})")
        for number, stage in enumerate(STAGES, 1):
            print(f"  {number}. {stage.name}: {stage.does}")
        return 0
    plan = plan_night(settings, config, only=args.only, resume=args.resume, run_id=args.run_id)
    try:
        code = run_nightly(settings, config, plan, progress=Progress(), publish=not args.no_publish, merge=args.merge)
    except KeyboardInterrupt:
        print(f"interrupted: continue with `spark-nightly nightly --resume {plan.run_id}`", file=sys.stderr)
        raise
    if not args.actions:
        return code
    blind = report_to_actions(plan.run, shard=args.no_publish)
    return 1 if blind else 0  # a gate that measured nothing is not a green run, whatever the verdict


def _print_shards(args: argparse.Namespace, settings: Settings, config: Config) -> int:
    split = shards(config, settings.profile, args.shards, only=args.only)
    if args.run_id:  # the night starts here: its date and selection are what every shard and the merge use
        plan_night(settings, config, only=args.only, resume=None, run_id=args.run_id)
    print(json.dumps(split))
    if args.actions:
        actions.set_output("shards", json.dumps(split["shards"]))
        actions.set_output("cluster", str(split["cluster"]))
    return 0


def report_to_actions(folder: RunDir, *, shard: bool) -> bool:
    """Outputs and annotations for the step; True when the gate was blind tonight (the step then fails)."""
    run = json.loads(folder.run_json.read_text())
    actions.set_output("verdict", run["verdict"])
    actions.set_output("report", str(folder.report))
    if shard:
        actions.annotate("notice", "spark-nightly shard", "entries run; the night's verdict is the publish job's")
        return False
    actions.annotate_verdict(
        run["verdict"], f"night {run['night']}: {run['verdict']}; {run['publish'] or 'nothing published'}"
    )
    blind = run.get("blind") or []
    if blind:
        actions.set_output("blind", "true")
        actions.annotate("error", "spark-nightly measures nothing", blind[0].splitlines()[0])
    return bool(blind)


def shards(config: Config, profile: str, count: int, *, only: list[str] | None = None) -> dict[str, Any]:
    """The solo entries over `count` runners (shard i on the runner labelled spark-nightly-i, by position in the
    whole matrix so an entry keeps its runner, and its history, whatever `only` selects), and the cluster entries,
    which hold two Sparks at once and so run after the shards."""
    if count < 1:
        raise UsageError("--shards needs at least 1")
    wanted = {e.id for e in config.matrix.select(profile, only or ())}
    solo = [e.id for e in config.matrix.select(profile, ()) if e.topology == "solo"]
    split = []
    for index in range(count):
        ids = [entry for entry in solo[index::count] if entry in wanted]
        if ids:
            split.append({"runner": RUNNER_LABEL.format(index=index), "models": " ".join(ids)})
    cluster = [e.id for e in config.matrix.select(profile, only or ()) if e.topology != "solo"]
    return {"shards": split, "cluster": " ".join(cluster)}
