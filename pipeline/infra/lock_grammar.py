"""The lock's grammar is ours: exactly the lines `render_lock` writes, `name==version --hash=sha256:HEX`, one a line.

pip's requirements files can also carry options (`--index-url`, `--extra-index-url`, `--trusted-host`, `-r`, `-e`),
URLs and paths; a lock that reaches pip must never carry any of them, so anything else is refused by line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from pipeline.infra.safe_files import shown

# a PEP 503 normalised name, as render_lock writes it; a PEP 440 version, checked again by packaging below
_LINE = re.compile(
    r"(?P<name>[a-z0-9]+(?:-[a-z0-9]+)*)==(?P<version>[A-Za-z0-9.+!_-]+) --hash=sha256:(?P<sha>[0-9a-f]{64})"
)
_FORM = "name==version --hash=sha256:<64 hex digits>"


@dataclass(frozen=True)
class LockLine:
    """One pinned file of a lock."""

    number: int
    name: str
    version: str
    sha256: str


class LockRefused(ValueError):
    """The lock holds a line outside the grammar; the message names the file and the line."""


def parse_lock(text: str, source: str) -> tuple[LockLine, ...]:
    """Every line of the lock, or LockRefused naming `source:line` and what was found there."""
    if not text.endswith("\n") or not text.strip():
        raise LockRefused(f"{source}: not a lock written by spark-nightly (empty, or no final newline)")
    lines = []
    names: dict[str, int] = {}
    for number, line in enumerate(text.split("\n")[:-1], start=1):
        match = _LINE.fullmatch(line)
        if match is None:
            raise LockRefused(f"{source}:{number}: '{shown(line[:120])}' is not a locked file ({_FORM})")
        try:
            Version(match["version"])
        except InvalidVersion:
            raise LockRefused(f"{source}:{number}: {match['version']!r} is not a version") from None
        if match["name"] in names:
            raise LockRefused(
                f"{source}:{number}: {match['name']} is pinned twice (first on line {names[match['name']]})"
            )
        names[match["name"]] = number
        lines.append(LockLine(number, match["name"], match["version"], match["sha"]))
    return tuple(lines)
