"""The one exception tree of spark-nightly: each class has an exit code and a hint for the user.

    SparkNightlyError           1  something went wrong that has no finer class
    ├── UsageError              2  the command line itself is wrong
    ├── ConfigError             2  configuration files or settings are invalid (lists every issue)
    ├── ProcessError            3  a subprocess failed, timed out or went silent (carries its log tail)
    ├── EngineError             3  a candidate engine could not be set up, booted or reached
    │   └── BootError           3  the server died, hung or served the wrong model while booting
    └── PipelineCrash          70  a bug in spark-nightly itself, never blamed on the wheels

The CLI prints one line per error (`error: what happened. what to do`) and the traceback only
with `--debug`.
"""

from __future__ import annotations

from dataclasses import dataclass


class SparkNightlyError(Exception):
    """Base class: a failure the user can act on."""

    exit_code = 1
    hint = "rerun with --debug for the traceback"

    def lines(self) -> list[str]:
        """The lines shown to the user, without the traceback."""
        return [f"error: {self}. {self.hint}"]


class UsageError(SparkNightlyError):
    """The command line is wrong."""

    exit_code = 2
    hint = "see spark-nightly --help"


@dataclass(frozen=True)
class ConfigIssue:
    """One problem in one configuration file, located by line, column and JSON path."""

    file: str
    line: int
    column: int
    path: str
    message: str

    def __str__(self) -> str:
        # line 0 marks a value that came from no file (an environment variable, a flag)
        where = f"{self.file}:{self.line}:{self.column}" if self.line else self.file
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class ConfigError(SparkNightlyError):
    """Configuration is invalid; carries every issue found, not just the first."""

    exit_code = 2
    hint = "fix the files above, then run spark-nightly validate"

    def __init__(self, issues: list[ConfigIssue]) -> None:
        self.issues = sorted(issues, key=lambda i: (i.file, i.line, i.column, i.message))
        count = len(self.issues)
        super().__init__(f"{count} configuration issue{'s' if count != 1 else ''}")

    def lines(self) -> list[str]:
        return [str(issue) for issue in self.issues] + [f"error: {self}. {self.hint}"]


class ProcessError(SparkNightlyError):
    """A subprocess failed; the message carries the tail of its log."""

    exit_code = 3
    hint = "see the full log named above"

    def __init__(self, message: str, log_tail: str = "", log_path: str = "") -> None:
        self.log_tail = log_tail
        self.log_path = log_path
        super().__init__(message)

    def lines(self) -> list[str]:
        out = [f"error: {self}. {self.hint}"]
        if self.log_path:
            out.append(f"log: {self.log_path}")
        if self.log_tail:
            out.extend("  | " + line for line in self.log_tail.splitlines())
        return out


class EngineError(SparkNightlyError):
    """A candidate engine could not be set up, booted or reached."""

    exit_code = 3
    hint = "see the engine log named above"


class BootError(EngineError):
    """The server did not become ready: `cause` is the classified reason, the log tail the evidence."""

    def __init__(self, cause: str, detail: str, log_tail: str = "", log_path: str = "") -> None:
        self.cause = cause
        self.detail = detail
        self.log_tail = log_tail
        self.log_path = log_path
        super().__init__(f"boot failed ({cause}): {detail}")

    def lines(self) -> list[str]:
        out = [f"error: {self}. {self.hint}"]
        if self.log_path:
            out.append(f"log: {self.log_path}")
        out.extend("  | " + line for line in self.log_tail.splitlines())
        return out


class PipelineCrash(SparkNightlyError):
    """An unexpected exception inside spark-nightly: a bug of ours, not a regression."""

    exit_code = 70
    hint = "this is a bug in spark-nightly; rerun with --debug and report the traceback"
