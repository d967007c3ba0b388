"""Build a configuration directory for one malformed-config case: the valid base plus the case's files."""

from __future__ import annotations

import shutil
from pathlib import Path

DATA = Path(__file__).parent / "data"
BASE = DATA / "base-config"
MALFORMED = DATA / "malformed"
CONTROL_FILES = {"expected.txt", "DELETE"}


def case_names() -> list[str]:
    return sorted(p.name for p in MALFORMED.iterdir() if p.is_dir())


def materialize(case: str, target: Path) -> Path:
    """Copy the base config into `target`, lay the case's files over it, remove what it lists in DELETE."""
    shutil.copytree(BASE, target, dirs_exist_ok=True)
    source = MALFORMED / case
    for path in source.rglob("*"):
        if path.is_file() and path.name not in CONTROL_FILES:
            destination = target / path.relative_to(source)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, destination)
    delete = source / "DELETE"
    if delete.exists():
        for line in delete.read_text().split():
            (target / line).unlink()
    return target


def expected_lines(case: str) -> list[str]:
    return (MALFORMED / case / "expected.txt").read_text(encoding="utf-8").splitlines()
