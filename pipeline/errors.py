"""Every exit code of spark-nightly and the one exception tree behind them; each class has its code and a hint.

Exit codes (the README lists the same table; a unit test keeps the two equal):

    0    PASS         the night (or command) passed; XFAIL and SKIPPED entries count as passed
    1    ERROR        a failure with no finer class (a tampered download, a store or webhook that failed for good)
    2    USAGE        the command line, the configuration, the settings or the history are not usable as given
    3    PROCESS      a subprocess or the candidate engine failed, hung, or served the wrong model
    4    INCONCLUSIVE the host was unhealthy or the measurement too noisy: nothing is blamed on the wheels
    5    ABORTED      a prerequisite failed, so an entry was not run
    6    FAIL         a regression: a required entry failed its checks
    70   CRASH        a bug in spark-nightly itself, never blamed on the wheels
    130  INTERRUPTED  Ctrl-C or the runner's SIGTERM; `nightly --resume RUN` continues the run

The tree (exit code beside each class):

    SparkNightlyError             1
    ├── UsageError                2  the command line itself is wrong
    ├── ConfigError               2  configuration files or settings are invalid (lists every issue)
    ├── HistoryError              2  the history database (or the book of confirmed builds) cannot be used
    ├── HostUnhealthy             4  foreign load or a throttled GPU spoiled a measurement window
    │   ├── HostCannotRun         4  this host lacks what the candidate needs (an instruction set)
    │   └── HostOutOfSpace        4  a disk the night writes to is full
    ├── ProcessError              3  a subprocess failed, timed out or went silent (carries its log tail)
    │   └── CapturedFailure       3  a captured command exited non-zero (its code and stderr)
    ├── EngineError               3  a candidate engine could not be set up, booted or reached
    │   ├── BootError             3  the server died, hung or served the wrong model while booting
    │   └── NonFiniteLogprobsError 3 the server computed logprobs JSON cannot hold (NaN logits)
    ├── BuildPreflightError       1  the runner lacks what a build needs (each missing piece with its fix)
    ├── PublishRefused            1  publishing refused before anything was uploaded
    ├── TamperedAsset             1  a downloaded file does not match its manifest
    │   └── StoreContentError     1  a store served malformed JSON, an unsafe name or a link
    ├── ReleaseStoreError         1  a release store failed an operation after its retries
    │   └── TagTaken              1  the tag has (or had) a release: a new night takes the next suffix
    ├── GitHubIssueError          1  an alert issue could not be found, opened, commented on or closed
    ├── WebhookError              1  a post to the alert webhook failed for good
    └── PipelineCrash            70  a bug in spark-nightly itself

The statuses' codes (4, 5, 6) are the worst required entry's (pipeline/status.py maps them from here).
The CLI prints one line per error (`error: what happened. what to do`) and the traceback only with
`--debug`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class ExitCode(IntEnum):
    """Every exit code the program uses, as the docstring above explains them."""

    PASS = 0
    ERROR = 1
    USAGE = 2
    PROCESS = 3
    INCONCLUSIVE = 4
    ABORTED = 5
    FAIL = 6
    CRASH = 70
    INTERRUPTED = 130

    def meaning(self) -> str:
        """The code's line in the table above, for `--help`."""
        return EXIT_MEANINGS[self]


# The table above, one short line a code (the CLI's --help epilog is made of it)
EXIT_MEANINGS = {
    ExitCode.PASS: "passed",
    ExitCode.ERROR: "an error with no finer class",
    ExitCode.USAGE: "bad command line, configuration, settings or history",
    ExitCode.PROCESS: "a subprocess or the candidate engine failed",
    ExitCode.INCONCLUSIVE: "INCONCLUSIVE, the host not the wheels",
    ExitCode.ABORTED: "ABORTED, a prerequisite failed",
    ExitCode.FAIL: "FAIL, a required entry failed its checks",
    ExitCode.CRASH: "a bug in spark-nightly",
    ExitCode.INTERRUPTED: "interrupted (nightly --resume RUN continues)",
}


class SparkNightlyError(Exception):
    """Base class: a failure the user can act on."""

    exit_code: int = ExitCode.ERROR
    hint = "rerun with --debug for the traceback"

    def lines(self) -> list[str]:
        """The lines shown to the user, without the traceback."""
        return [f"error: {self}. {self.hint}"]


class UsageError(SparkNightlyError):
    """The command line is wrong."""

    exit_code = ExitCode.USAGE
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
        if not self.line:  # an environment variable or a flag: the origin names the setting
            return f"{self.file}: {self.path}: {self.message}" if self.path else f"{self.file}: {self.message}"
        return f"{self.file}:{self.line}:{self.column}: {self.path or '(root)'}: {self.message}"


class ConfigError(SparkNightlyError):
    """Configuration is invalid; carries every issue found, not just the first."""

    exit_code = ExitCode.USAGE
    hint = "fix the files above, then run spark-nightly validate"

    def __init__(self, issues: list[ConfigIssue]) -> None:
        self.issues = sorted(issues, key=lambda i: (i.file, i.line, i.column, i.message))
        count = len(self.issues)
        super().__init__(f"{count} configuration issue{'s' if count != 1 else ''}")

    def lines(self) -> list[str]:
        return [str(issue) for issue in self.issues] + [f"error: {self}. {self.hint}"]


class HistoryError(SparkNightlyError):
    """The history database cannot be used as it is."""

    exit_code = ExitCode.USAGE
    hint = "check paths.state; never edit the database by hand"


class HostUnhealthy(SparkNightlyError):
    """Foreign load or a throttled GPU spoiled a measurement window: its numbers cannot judge the build."""

    exit_code = ExitCode.INCONCLUSIVE
    hint = "measure again on a quiet host"


class HostCannotRun(HostUnhealthy):
    """The host lacks what every build of the candidate needs (an instruction set no variant of a native does
    without): the host's, never the build's."""

    hint = "run it on a host that has what the message names (docs/testing.md lists the CPU classes)"


class HostOutOfSpace(HostUnhealthy):
    """A disk the night writes to filled (ENOSPC, EDQUOT): the host's, never the build's. Nothing after the write
    ran, so nothing was published."""

    hint = (
        "free space on the disk named first (cached runtimes go with a lower cache.runtimes_max_gib), then run the "
        "night again"
    )


class ProcessError(SparkNightlyError):
    """A subprocess failed; the message carries the tail of its log."""

    exit_code = ExitCode.PROCESS
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


class CapturedFailure(ProcessError):
    """A captured command that exited non-zero: its code and stderr, for callers to whom some codes are answers."""

    def __init__(self, message: str, returncode: int, stderr: str) -> None:
        super().__init__(message, log_tail=stderr)
        self.returncode = returncode
        self.stderr = stderr


class EngineError(SparkNightlyError):
    """A candidate engine could not be set up, booted or reached."""

    exit_code = ExitCode.PROCESS
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


class ClusterError(EngineError):
    """A node of a cluster failed a step of the launch, or was lost while serving: which node, which step."""

    exit_code = ExitCode.PROCESS
    hint = "see the cluster logs beside the server log, and docs/runbook.md, 'Adding a second Spark'"

    def __init__(self, node: str, step: str, detail: str, *, host_lost: bool = False) -> None:
        self.node = node
        self.step = step
        self.detail = detail
        self.host_lost = host_lost  # the host, not the build: unreachable, gone, or on the wrong network
        super().__init__(f"{node}: {step}: {detail}")


class NonFiniteLogprobsError(EngineError):
    """The server computed logprobs it cannot put in JSON (NaN or infinity): evidence of NaN logits."""


class PublishRefused(SparkNightlyError):
    """Publishing was refused before anything was uploaded (a failed night, a file over the size limit)."""


class TamperedAsset(SparkNightlyError):
    """A downloaded file does not match the manifest: it was removed, and nothing of the night is used."""

    exit_code = ExitCode.ERROR
    hint = "do not use this night; report it, and fetch another night or retry the download"


class StoreContentError(TamperedAsset):
    """A release store served something malformed (a JSON file, a name, a link): nothing of it is used."""

    hint = "do not use this store's night; report it to whoever keeps the store"


class BuildPreflightError(SparkNightlyError):
    """The runner lacks what a build needs; nothing was built."""

    hint = "install what is named (the runbook's 'Preparing a Spark runner'), then run the night again"


class ReleaseStoreError(SparkNightlyError):
    """A release store refused or failed an operation after its retries."""


class TagTaken(ReleaseStoreError):
    """The tag has (or had, with immutable releases) a release: a new night takes the next suffix."""


class GitHubIssueError(SparkNightlyError):
    """An alert issue could not be found, opened, commented on or closed."""


class WebhookError(SparkNightlyError):
    """A post to the webhook failed for good (the message never holds the URL)."""


class PipelineCrash(SparkNightlyError):
    """An unexpected exception inside spark-nightly: a bug of ours, not a regression."""

    exit_code = ExitCode.CRASH
    hint = "this is a bug in spark-nightly; rerun with --debug and report the traceback"
