"""nightly.yml run by act on a lab of one Spark (this host), GitHub's stand-in as the API, every step as committed;
the one Spark-only part, the profile, is replaced by the CPU one through the environment."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.fakes.github import TOKEN, StandIn
from tests.integration.conftest import ROOT
from tests.workflow_act import Actions, Runner

WORKFLOW = ROOT / ".github" / "workflows" / "nightly.yml"


def spark_runner(tmp_path: Path) -> Runner:
    """The lab's one Spark (this host): every label the workflow names runs on it, and its home keeps the state."""
    return Runner(tmp_path / "runner")


def cpu_actions(runner: Runner, environment: dict[str, str], stand_in: StandIn) -> Actions:
    """nightly.yml on `runner` with the CPU profile for the Spark one; GitHub is the stand-in. (Its steps' commands
    are checked against the command line by tests/unit/test_workflow_stand_ins.py.)"""
    return Actions(
        WORKFLOW,
        ROOT,
        runner,
        repository=stand_in.repo,
        runner_env=environment,
        secrets={"GITHUB_TOKEN": TOKEN},
        env_overrides={"SPARK_NIGHTLY_PROFILE": "cpu"},  # a Spark's profile, replaced by the CPU one
    )


def runner_environment(runner: Runner, cache: Path, config: Path, stand_in: StandIn) -> dict[str, str]:
    """What the runner's own environment holds (its .env file): this machine's basics with uv on the PATH (as
    docs/runner.md asks of a runner: each job's ./scripts/setup uses it), the shared cache of runtimes and weights,
    the lab's configuration folder, and the API the stand-in answers for GitHub."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_NIGHTLY_", "GITHUB_", "PYTEST_"))}
    if owner := os.environ.get("SPARK_NIGHTLY_OWNER"):
        kept["SPARK_NIGHTLY_OWNER"] = owner  # the suite's mark on the processes it starts
    tools = runner.root / "tools"  # uv alone: the suite's python and commands stay off the runner's PATH
    tools.mkdir(parents=True, exist_ok=True)
    (tools / "uv").unlink(missing_ok=True)
    (tools / "uv").symlink_to(Path(sys.executable).parent / "uv")
    return kept | {
        "PATH": f"{tools}{os.pathsep}{kept.get('PATH', os.defpath)}",
        "SPARK_NIGHTLY_PATHS_CACHE": str(cache),
        "SPARK_NIGHTLY_PATHS_CONFIG": str(config),
        "SPARK_NIGHTLY_GITHUB_API_URL": stand_in.url,
        "SPARK_NIGHTLY_GITHUB_ALLOW_CUSTOM_API": "1",  # the stand-in answers on plain http
    }
