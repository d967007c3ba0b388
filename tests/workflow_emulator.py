"""Self-hosted runners executing a workflow file as GitHub Actions would, for the tests.

It reads the workflow itself and runs each job's steps in order, in that runner's persistent workspace:
`actions/checkout` with its default clean (`git clean -ffdx`, `git reset --hard`), then the commit's files;
`upload-artifact` / `download-artifact` by their documented rules (names unique in a run unless `overwrite`, the
least common ancestor as the artifact's root, hidden files left out, a pattern's artifacts each in a folder of its
name unless `merge-multiple`); `run` steps in `bash --noprofile --norc -eo pipefail` with `GITHUB_OUTPUT`,
`GITHUB_STEP_SUMMARY` and the job's environment; job `if`s, `needs`, outputs and matrices from expressions.
Steps a test cannot run as written (a Spark's setup) are replaced by name, and every replacement is reported.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.workflow_expressions import Evaluator, as_string, has_status_function, truthy

CHECKOUT, UPLOAD, DOWNLOAD = "actions/checkout", "actions/upload-artifact", "actions/download-artifact"
PAGES_UPLOAD, PAGES_DEPLOY = "actions/upload-pages-artifact", "actions/deploy-pages"
PAGES_ARTIFACT = "github-pages"  # the artifact upload-pages-artifact makes and deploy-pages serves


@dataclass
class Runner:
    """A self-hosted runner: its labels, its user's home and the workspace that outlives every job."""

    name: str
    labels: frozenset[str]
    root: Path

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def workspace(self) -> Path:
        return self.root / "_work" / "repo" / "repo"


@dataclass
class StepRun:
    name: str
    outcome: str  # success, failure, skipped
    log: str = ""
    replaced_by: str | None = None


@dataclass
class JobRun:
    job: str
    result: str  # success, failure, skipped
    runner: str = ""
    matrix: Mapping[str, Any] = field(default_factory=dict)
    steps: list[StepRun] = field(default_factory=list)
    outputs: dict[str, str] = field(default_factory=dict)
    summary: str = ""


@dataclass
class WorkflowRun:
    run_id: int
    attempt: int
    jobs: dict[str, list[JobRun]] = field(default_factory=dict)
    artifacts: Path | None = None

    def result(self, job: str) -> str:
        runs = self.jobs.get(job, [])
        if not runs or all(r.result == "skipped" for r in runs):
            return "skipped"
        return "failure" if any(r.result == "failure" for r in runs) else "success"

    def log(self) -> str:
        lines = []
        for name, runs in self.jobs.items():
            for job in runs:
                lines.append(f"== job {name} {dict(job.matrix) or ''} on {job.runner or '-'}: {job.result}")
                for step in job.steps:
                    replaced = f" (replaced by: {step.replaced_by})" if step.replaced_by else ""
                    lines.append(f"-- step {step.name}: {step.outcome}{replaced}\n{step.log[-3000:]}")
        return "\n".join(lines)


@dataclass(frozen=True)
class _StepPlace:
    """Where a step runs: its runner and run, a key naming its files, the job's contexts and its environment."""

    runner: Runner
    run: WorkflowRun
    key: str
    contexts: dict[str, Any]
    env: dict[str, str]


class WorkflowError(AssertionError):
    """The workflow asks for something the runner or the command line cannot do."""


class Emulator:
    """Runs `workflow` from `source` (a checkout whose tracked files are the commit) on `runners`."""

    def __init__(
        self,
        workflow: Path,
        source: Path,
        runners: Sequence[Runner],
        *,
        repository: str,
        runner_env: Mapping[str, str],
        vars: Mapping[str, str] | None = None,
        secrets: Mapping[str, str] | None = None,
        replace: Mapping[str, str] | None = None,
        env_overrides: Mapping[str, str] | None = None,
        check_command: Callable[[str], list[str]] | None = None,
        step_timeout_s: float = 1800,
    ) -> None:
        data = yaml.safe_load(workflow.read_text())
        data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads `on` as a boolean
        self.workflow = data
        self.source = source
        self.runners = list(runners)
        self.repository = repository
        self.runner_env = dict(runner_env)
        self.vars = dict(vars or {})
        self.secrets = dict(secrets or {})
        self.replace = dict(replace or {})
        self.env_overrides = dict(env_overrides or {})
        self.step_timeout_s = step_timeout_s
        self.next_run_id = 7000
        problems = [
            p for job in data["jobs"].values() for s in job["steps"] for p in (check_command or _no)(s.get("run", ""))
        ]
        if problems:
            raise WorkflowError("; ".join(problems))

    def run(self, event: str, inputs: Mapping[str, Any] | None = None, artifacts: Path | None = None) -> WorkflowRun:
        """One run of the workflow (a new run id), every job in the order its `needs` allow."""
        self.next_run_id += 1
        run = WorkflowRun(self.next_run_id, 1, artifacts=artifacts)
        assert run.artifacts is not None
        run.artifacts.mkdir(parents=True, exist_ok=True)
        github = {
            "event_name": event,
            "repository": self.repository,
            "run_id": str(run.run_id),
            "run_attempt": "1",
            "server_url": "https://github.com",
        }
        contexts = {"github": github, "inputs": dict(inputs or {}), "vars": self.vars, "secrets": self.secrets}
        for name in _job_order(self.workflow["jobs"]):
            run.jobs[name] = self._job(name, run, contexts)
        return run

    def _job(self, name: str, run: WorkflowRun, contexts: dict[str, Any]) -> list[JobRun]:
        job = self.workflow["jobs"][name]
        needs = [job["needs"]] if isinstance(job.get("needs"), str) else list(job.get("needs", []))
        needs_context = {n: {"result": run.result(n), "outputs": _merged_outputs(run.jobs[n])} for n in needs}
        ancestors = _ancestors(self.workflow["jobs"], name)
        status = {
            "success": lambda: all(run.result(a) == "success" for a in ancestors),
            "failure": lambda: any(run.result(a) == "failure" for a in ancestors),
            "always": lambda: True,
            "cancelled": lambda: False,
        }
        base = {**contexts, "needs": needs_context, "env": {}, "steps": {}, "matrix": {}, "strategy": {}}
        condition = str(job.get("if", "success()"))
        if not has_status_function(condition):
            condition = f"success() && ({condition})"
        if not truthy(Evaluator(base, status).evaluate(_bare(condition))):
            return [JobRun(name, "skipped")]
        combos = self._matrix(job, Evaluator(base, status))
        return [self._one_job(name, run, base, status, (index, matrix)) for index, matrix in enumerate(combos)]

    def _matrix(self, job: Mapping[str, Any], evaluator: Evaluator) -> list[dict[str, Any]]:
        matrix = job.get("strategy", {}).get("matrix")
        if matrix is None:
            return [{}]
        if isinstance(matrix, str):
            matrix = evaluator.value_of(matrix)
        include = evaluator.value_of(matrix.get("include", []))
        vectors = {k: evaluator.value_of(v) for k, v in matrix.items() if k not in {"include", "exclude"}}
        combos: list[dict[str, Any]] = [{}]
        for key, values in vectors.items():
            combos = [{**c, key: v} for c in combos for v in values]
        combos = [c for c in combos if c] + list(include or [])
        if not combos:
            raise WorkflowError(f"the matrix of {job} has no combination (GitHub fails such a job)")
        return combos

    def _one_job(
        self,
        name: str,
        run: WorkflowRun,
        base: dict[str, Any],
        status: dict[str, Callable[[], bool]],
        combination: tuple[int, dict[str, Any]],
    ) -> JobRun:
        index, matrix = combination
        job = self.workflow["jobs"][name]
        contexts = {**base, "matrix": matrix, "strategy": {"job-index": index}, "steps": {}}
        evaluator = Evaluator(contexts, status)
        wanted = {as_string(evaluator.value_of(label)) for label in _as_list(job["runs-on"])}
        runner = next((r for r in self.runners if wanted <= r.labels), None)
        result = JobRun(name, "failure", matrix=matrix)
        if runner is None:
            result.steps.append(StepRun("runs-on", "failure", f"no runner has the labels {sorted(wanted)}"))
            return result
        result.runner = runner.name
        env = {k: as_string(evaluator.value_of(v)) for k, v in (self.workflow.get("env") or {}).items()}
        env |= {k: as_string(evaluator.value_of(v)) for k, v in (job.get("env") or {}).items()}
        contexts["env"] = env
        failed = False
        job_status = {
            "success": lambda: not failed,
            "failure": lambda: failed,
            "always": lambda: True,
            "cancelled": lambda: False,
        }
        step_evaluator = Evaluator(contexts, job_status)
        for number, step in enumerate(job["steps"]):
            label = step.get("name") or step.get("uses") or step.get("run", "").splitlines()[0]
            condition = str(step.get("if", "success()"))
            if not has_status_function(condition):
                condition = f"success() && ({condition})"
            if not truthy(step_evaluator.evaluate(_bare(condition))):
                result.steps.append(StepRun(label, "skipped"))
                continue
            step_env = env | {k: as_string(step_evaluator.value_of(v)) for k, v in (step.get("env") or {}).items()}
            place = _StepPlace(runner, run, f"{run.run_id}-{name}-{index}-{number}", contexts, step_env)
            outcome = self._step(step, step_evaluator, place)
            result.steps.append(outcome)
            failed = failed or outcome.outcome == "failure"
        result.result = "failure" if failed else "success"
        result.outputs = {k: as_string(step_evaluator.value_of(v)) for k, v in (job.get("outputs") or {}).items()}
        result.summary = "".join(
            p.read_text() for p in sorted((runner.root / "temp").glob(f"summary-{run.run_id}-{name}-{index}-*"))
        )
        return result

    def _step(self, step: Mapping[str, Any], evaluator: Evaluator, place: _StepPlace) -> StepRun:
        label = step.get("name") or step.get("uses") or step.get("run", "").splitlines()[0]
        inputs = {k: as_string(evaluator.value_of(v)) for k, v in (step.get("with") or {}).items()}
        try:
            if "uses" in step:
                action = step["uses"].split("@", 1)[0]
                handlers = {CHECKOUT: self._checkout, UPLOAD: _upload, DOWNLOAD: _download}
                handler = (handlers | {PAGES_UPLOAD: _upload_pages, PAGES_DEPLOY: _deploy_pages}).get(action)
                if handler is None:
                    raise WorkflowError(f"no emulation of {action}")
                return StepRun(label, "success", handler(inputs, place.runner, place.run))
            return self._run(step, evaluator, place, label)
        except WorkflowError as problem:
            return StepRun(label, "failure", str(problem))

    def _checkout(self, inputs: Mapping[str, str], runner: Runner, run: WorkflowRun) -> str:
        """The documented default: clean (`git clean -ffdx`, `git reset --hard HEAD`), then the commit's files."""
        workspace = runner.workspace
        if not (workspace / ".git").exists():
            workspace.mkdir(parents=True, exist_ok=True)
            _git(workspace, "init", "-q", "-b", "main")
        elif inputs.get("clean", "true") == "true":
            _git(workspace, "clean", "-ffdx", "-q")
            _git(workspace, "reset", "-q", "--hard", "HEAD")
        tracked = _git(self.source, "ls-files", "-z").split("\0")
        for name in filter(None, tracked):
            origin, copy = self.source / name, workspace / name
            if origin.is_file():
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, copy)
        _git(workspace, "add", "-A")
        _git(
            workspace,
            "-c",
            "user.name=ci",
            "-c",
            "user.email=ci@localhost",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "the commit",
        )
        return f"checked out {len(tracked)} files into {workspace}"

    def _run(self, step: Mapping[str, Any], evaluator: Evaluator, place: _StepPlace, label: str) -> StepRun:
        runner, run, key, contexts, env = place.runner, place.run, place.key, place.contexts, place.env
        script = str(step["run"])
        replaced = self.replace.get(script.strip())
        body = evaluator.interpolate(replaced if replaced is not None else script)
        temp = runner.root / "temp"
        temp.mkdir(parents=True, exist_ok=True)
        output, summary = temp / f"output-{key}", temp / f"summary-{key}"
        output.write_text("")
        script_file = temp / f"step-{key}.sh"
        script_file.write_text(body + "\n")
        environment = {
            **self.runner_env,
            "HOME": str(runner.home),
            "CI": "true",
            "GITHUB_ACTIONS": "true",
            "GITHUB_WORKSPACE": str(runner.workspace),
            "GITHUB_REPOSITORY": self.repository,
            "GITHUB_RUN_ID": str(run.run_id),
            "GITHUB_RUN_ATTEMPT": str(run.attempt),
            "GITHUB_SERVER_URL": "https://github.com",
            "GITHUB_OUTPUT": str(output),
            "GITHUB_STEP_SUMMARY": str(summary),
            "RUNNER_TEMP": str(temp),
            **env,
            **self.env_overrides,
        }
        runner.home.mkdir(parents=True, exist_ok=True)
        try:
            finished = subprocess.run(
                ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script_file)],
                cwd=runner.workspace,
                env=environment,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=self.step_timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired as late:
            return StepRun(label, "failure", f"timed out after {late.timeout} s")
        if "id" in step:
            contexts["steps"][step["id"]] = {"outputs": _read_outputs(output.read_text())}
        outcome = "success" if finished.returncode == 0 else "failure"
        log = finished.stdout + (f"\n[exit code {finished.returncode}]" if finished.returncode else "")
        overridden = ", ".join(f"{k}={v}" for k, v in self.env_overrides.items() if env.get(k, v) != v)
        replaced_by = "; ".join(filter(None, [replaced, overridden and f"env {overridden}"])) or None
        return StepRun(label, outcome, log, replaced_by)


def _upload(inputs: Mapping[str, str], runner: Runner, run: WorkflowRun) -> str:
    assert run.artifacts is not None
    name = inputs["name"]
    target = run.artifacts / name
    if target.exists():
        if inputs.get("overwrite", "false") != "true":
            raise WorkflowError(
                "Failed to CreateArtifact: (409) Conflict: an artifact with this name already exists on the workflow "
                f"run: {name}"
            )
        shutil.rmtree(target)
    patterns = [line.strip() for line in inputs["path"].splitlines() if line.strip()]
    include = [runner.workspace / p for p in patterns if not p.startswith("!")]
    exclude = [str(runner.workspace / p[1:]) for p in patterns if p.startswith("!")]
    files: list[Path] = []
    for path in include:
        if any(c in str(path) for c in "*?["):
            found = sorted(
                p for p in _search_path(path).rglob("*") if p.is_file() and fnmatch.fnmatch(str(p), str(path))
            )
        elif path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file())
        else:
            found = [path] if path.is_file() else []
        files += [f for f in found if not any(fnmatch.fnmatch(str(f), e) for e in exclude)]
    files = [f for f in files if not any(part.startswith(".") for part in f.relative_to(runner.workspace).parts)]
    if not files:
        mode = inputs.get("if-no-files-found", "warn")
        if mode == "error":
            raise WorkflowError(f"No files were found with the provided path: {inputs['path']}")
        return f"warning: no files were found with the provided path; no artifact {name} uploaded"
    # the root is the least common ancestor of the patterns' search paths (matched or not); one file alone is
    # stored without its folders
    searched = [_search_path(p) for p in include]
    root = Path(os.path.commonpath([str(p) for p in searched])) if len(searched) > 1 else searched[0]
    if root.is_file():
        root = root.parent
    for file in files:
        copy = target / file.relative_to(root)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(file, copy)
    return f"artifact {name}: {len(files)} files from {root.relative_to(runner.workspace)}"


def _search_path(pattern: Path) -> Path:
    """A pattern's fixed part: the folders before its first wildcard."""
    parts = pattern.parts
    fixed = next((i for i, part in enumerate(parts) if any(c in part for c in "*?[")), len(parts))
    return Path(*parts[:fixed])


def _download(inputs: Mapping[str, str], runner: Runner, run: WorkflowRun) -> str:
    assert run.artifacts is not None
    destination = runner.workspace / inputs.get("path", "") if inputs.get("path") else runner.workspace
    if inputs.get("name"):
        source = run.artifacts / inputs["name"]
        if not source.exists():
            raise WorkflowError(f"Unable to download artifact(s): Artifact not found for name: {inputs['name']}")
        shutil.copytree(source, destination, dirs_exist_ok=True)
        return f"artifact {inputs['name']} into {destination}"
    pattern = inputs.get("pattern", "*")
    found = sorted(p for p in run.artifacts.iterdir() if fnmatch.fnmatchcase(p.name, pattern))
    for artifact in found:
        into = destination if inputs.get("merge-multiple") == "true" else destination / artifact.name
        shutil.copytree(artifact, into, dirs_exist_ok=True)
    return f"{len(found)} artifacts matching {pattern} into {destination}"


def _upload_pages(inputs: Mapping[str, str], runner: Runner, run: WorkflowRun) -> str:
    """The site folder as the `github-pages` artifact (the action tars the folder; a missing one fails the step)."""
    assert run.artifacts is not None
    folder = runner.workspace / inputs.get("path", "_site")
    if not folder.is_dir():
        raise WorkflowError(f"tar: {inputs.get('path', '_site')}: Cannot open: No such file or directory")
    shutil.copytree(folder, run.artifacts / PAGES_ARTIFACT, dirs_exist_ok=False)
    return f"{PAGES_ARTIFACT} from {folder}"


def _deploy_pages(inputs: Mapping[str, str], runner: Runner, run: WorkflowRun) -> str:
    """Serves the `github-pages` artifact of this run; without one the action fails as GitHub's does."""
    assert run.artifacts is not None
    if not (run.artifacts / PAGES_ARTIFACT / "index.html").is_file():
        raise WorkflowError("No uploaded artifact was found! Please check if there are any errors at build step.")
    return f"deployed {PAGES_ARTIFACT}"


def _read_outputs(text: str) -> dict[str, str]:
    """`name=value` lines and `name<<DELIMITER` heredocs, as the runner reads GITHUB_OUTPUT."""
    outputs, lines = {}, iter(text.splitlines())
    for line in lines:
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            value = []
            for more in lines:
                if more == delimiter:
                    break
                value.append(more)
            outputs[name] = "\n".join(value)
        elif "=" in line:
            name, value_text = line.split("=", 1)
            outputs[name] = value_text
    return outputs


def _merged_outputs(jobs: Sequence[JobRun]) -> dict[str, str]:
    merged: dict[str, str] = {}
    for job in jobs:
        merged |= {k: v for k, v in job.outputs.items() if v}
    return merged


def _job_order(jobs: Mapping[str, Any]) -> list[str]:
    order: list[str] = []
    while len(order) < len(jobs):
        ready = [n for n in jobs if n not in order and set(_needs(jobs[n])) <= set(order)]
        if not ready:
            raise WorkflowError("the jobs' needs form a cycle")
        order += ready
    return order


def _needs(job: Mapping[str, Any]) -> list[str]:
    needs = job.get("needs", [])
    return [needs] if isinstance(needs, str) else list(needs)


def _ancestors(jobs: Mapping[str, Any], name: str) -> set[str]:
    found: set[str] = set()
    for need in _needs(jobs[name]):
        found |= {need} | _ancestors(jobs, need)
    return found


def _bare(condition: str) -> str:
    text = condition.strip()
    return text[3:-2] if text.startswith("${{") and text.endswith("}}") else text


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _git(where: Path, *argv: str) -> str:
    return subprocess.run(["git", "-C", str(where), *argv], check=True, capture_output=True, text=True).stdout


def _no(script: str) -> list[str]:
    return []


def cli_problems(script: str, parser: argparse.ArgumentParser) -> list[str]:
    """The commands and flags a step's `spark-nightly` calls name that the command line does not have."""
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    problems = []
    for argv in spark_nightly_calls(script):
        if not argv or argv[0] not in commands:
            problems.append(f"`spark-nightly {' '.join(argv[:1])}`: no such command")
            continue
        known = set(commands[argv[0]]._option_string_actions)
        for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", " ".join(argv[1:])):
            if flag not in known:
                problems.append(f"`spark-nightly {argv[0]}` has no flag {flag}")
    return problems


def spark_nightly_calls(script: str) -> list[list[str]]:
    """Each `spark-nightly ...` command of a step's script, as argv up to the next shell operator (expressions and
    variables read as placeholders)."""
    text = re.sub(r"\$\{\{.*?\}\}", "X", script).replace("$", "X")
    calls = []
    for line in text.splitlines():
        if line.strip().startswith("#") or "spark-nightly" not in line:
            continue
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
        for index, word in enumerate(words):
            if word.endswith("bin/spark-nightly") or word == "spark-nightly":
                rest = words[index + 1 :]
                end = next((i for i, w in enumerate(rest) if w and set(w) <= set("|&;()<>")), len(rest))
                calls.append(rest[:end])
    return calls
