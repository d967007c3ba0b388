"""nightly.yml on an emulated lab of one Spark, its Spark-only parts replaced by name, GitHub's stand-in as the API."""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.cli import build_parser
from tests.fakes.github import TOKEN, StandIn
from tests.integration.conftest import ROOT
from tests.workflow_emulator import Emulator, Runner, cli_problems

WORKFLOW = ROOT / ".github" / "workflows" / "nightly.yml"
SETUP = "./scripts/setup"


def spark_runner(tmp_path: Path) -> Runner:
    """The lab's one Spark: it keeps the state, so it carries the label spark-nightly-0."""
    return Runner("spark-1", frozenset({"self-hosted", "spark-nightly-0"}), tmp_path / "runner")


def cpu_emulator(runner: Runner, environment: dict[str, str], stand_in: StandIn) -> Emulator:
    """nightly.yml on `runner`, with its Spark-only parts replaced by name: the CPU profile for the Spark one, the
    suite's installed environment for `./scripts/setup`; GitHub is the stand-in."""
    return Emulator(
        WORKFLOW,
        ROOT,
        [runner],
        repository=stand_in.repo,
        runner_env=environment,
        env_overrides={"SPARK_NIGHTLY_PROFILE": "cpu"},  # a Spark's profile, replaced by the CPU one
        secrets={"GITHUB_TOKEN": TOKEN},
        replace={SETUP: f"ln -sfn {ROOT / '.venv'} .venv  # the suite's installed environment"},
        check_command=lambda script: cli_problems(script, build_parser()),
        step_timeout_s=900,
    )


def runner_environment(cache: Path, config: Path, stand_in: StandIn) -> dict[str, str]:
    """What the runner's own environment holds (its .env file): this machine's basics, the shared cache of
    runtimes and weights, the lab's configuration folder, and the API the stand-in answers for GitHub."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_NIGHTLY_", "GITHUB_", "PYTEST_"))}
    if owner := os.environ.get("SPARK_NIGHTLY_OWNER"):
        kept["SPARK_NIGHTLY_OWNER"] = owner  # the suite's mark on the processes it starts
    return kept | {
        "SPARK_NIGHTLY_PATHS_CACHE": str(cache),
        "SPARK_NIGHTLY_PATHS_CONFIG": str(config),
        "SPARK_NIGHTLY_GITHUB_API_URL": stand_in.url,
        "SPARK_NIGHTLY_GITHUB_ALLOW_CUSTOM_API": "1",  # the stand-in answers on plain http
    }
