"""What a command says to the GitHub Actions step running it: outputs, the step summary and annotations.

Each is a documented runner interface (workflow commands on stdout, files named by GITHUB_OUTPUT and
GITHUB_STEP_SUMMARY); outside Actions the files are not set and nothing is written.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def set_output(name: str, value: str) -> None:
    """`name=value` for later steps and jobs; a multi-line value goes in a heredoc with a delimiter it lacks."""
    path = os.environ.get("GITHUB_OUTPUT")
    if not path:
        return
    if "\n" in value or "\r" in value:
        delimiter = f"EOF-{secrets.token_hex(8)}"
        text = f"{name}<<{delimiter}\n{value}\n{delimiter}\n"
    else:
        text = f"{name}={value}\n"
    with Path(path).open("a", encoding="utf-8") as out:
        out.write(text)


def append_summary(markdown: str) -> None:
    """Markdown shown on the run's page under this step."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if path:
        with Path(path).open("a", encoding="utf-8") as out:
            out.write(markdown if markdown.endswith("\n") else markdown + "\n")


def annotate(level: str, title: str, message: str) -> None:
    """A `::warning` / `::error` / `::notice` line, escaped as the runner expects (a newline would end it early)."""
    print(f"::{level} title={_escape_property(title)}::{_escape_data(message)}", flush=True)


def annotate_verdict(verdict: str, what: str) -> None:
    """FAIL as an error, INCONCLUSIVE and ABORTED as warnings, the rest as a notice."""
    level = {"FAIL": "error", "INCONCLUSIVE": "warning", "ABORTED": "warning", "CRASH": "error"}.get(verdict, "notice")
    annotate(level, f"spark-nightly: {verdict}", what)


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")
