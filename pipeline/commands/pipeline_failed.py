"""`spark-nightly pipeline-failed --what TEXT [--run-id RUN_ID]`: raise the pipeline-failure alert for a broken job."""

from __future__ import annotations

import argparse
import json
import time

from pipeline.infra.cache_lock import exclusive
from pipeline.progress import to_stderr
from pipeline.settings import Settings
from pipeline.stages.aftermath.alert import raise_pipeline_failure
from pipeline.stages.aftermath.alert_backends import deliver_alerts


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    failed = commands.add_parser(
        "pipeline-failed",
        parents=[common],
        help="raise the pipeline-failure alert: a job of the night broke before it could decide",
        description="Open the pipeline-failure alert (or update it while it is open) through the configured alert "
        "target; the next night that runs through closes it. No wheel is blamed and no regression alert changes.",
    )
    failed.add_argument(
        "--what", required=True, help="what broke, e.g. each job and its result, and where the logs are"
    )
    failed.add_argument("--run-id", help="the run that broke (its night is named in the alert)")


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Needs no configuration: a broken models.yaml is one of the things that break a night's jobs."""
    run_id = args.run_id or time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    run = settings.places.run(run_id)
    started = run.night
    night = json.loads(started.read_text())["night"] if started.exists() else time.strftime("%Y-%m-%d", time.gmtime())
    state_path = settings.places.state.alerts
    with exclusive(state_path):
        events = raise_pipeline_failure(state_path, what=args.what, night=night, run_id=run_id)
        problems = deliver_alerts(events, settings=settings, state_path=state_path, run=run, say=to_stderr)
    for event in events:
        print(f"pipeline-failure alert {event.action}: {event.title}")
    for problem in problems:
        print(f"alert not delivered yet (kept for the next run): {problem}")
    return 0
