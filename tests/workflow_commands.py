"""The `spark-nightly` commands a workflow's steps name, checked against the command line: a renamed command or
flag fails here, before a night on a runner finds it."""

from __future__ import annotations

import argparse
import re
import shlex

import yaml


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


def workflow_problems(workflow_text: str, parser: argparse.ArgumentParser) -> list[str]:
    """`cli_problems` over every `run` step of a workflow file's jobs."""
    jobs = yaml.safe_load(workflow_text)["jobs"]
    scripts = [str(step.get("run", "")) for job in jobs.values() for step in job["steps"]]
    return [problem for script in scripts for problem in cli_problems(script, parser)]
