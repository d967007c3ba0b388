"""A base environment a runtime is layered over: an interpreter that already holds torch and CUDA (NGC's container
python, a stock image's, a host venv), read once into what it provides.

A layered runtime is a venv of the base's Python version whose own site-packages come first and the base's after
them (a `.pth` file), so tonight's locked files are installed over the base, never into it, and the base's torch
is the one that runs.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import EngineError, ProcessError, UsageError
from pipeline.infra import procs

# What the base's interpreter is asked (no pip needed): its version, where its packages are, and every distribution.
_PROBE = """
import importlib.metadata as m, json, sys, sysconfig
paths = [sysconfig.get_paths()[k] for k in ("purelib", "platlib")]
packages = {d.metadata["Name"]: d.version for d in m.distributions() if d.metadata["Name"]}
print(json.dumps({"executable": sys.executable, "version": "%d.%d" % sys.version_info[:2],
                  "site_packages": sorted(set(paths)), "packages": packages}))
"""
BASE_PTH = "spark-nightly-base.pth"


def normalize(name: str) -> str:
    """PEP 503 normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class BaseEnv:
    """What a base interpreter provides: its Python version, its package folders and every distribution in them."""

    python: str  # the interpreter as found ("" for a listing read from a file, made on another machine)
    version: str  # "3.12"
    site_packages: tuple[str, ...]
    packages: Mapping[str, str]  # normalised name -> version

    @property
    def listing_sha256(self) -> str:
        """The digest of the base's package listing: two bases with the same packages are the same base."""
        text = "".join(f"{name}=={version}\n" for name, version in sorted(self.packages.items()))
        return hashlib.sha256(text.encode()).hexdigest()

    @property
    def torch(self) -> str | None:
        return self.packages.get("torch")

    def provides(self, name: str) -> str | None:
        """The version of a project the base holds, or None."""
        return self.packages.get(normalize(name))

    def to_json(self) -> dict[str, Any]:
        """As the lock and the release manifest record it."""
        return {
            "python": self.python,
            "version": self.version,
            "torch": self.torch,
            "packages": len(self.packages),
            "listing_sha256": self.listing_sha256,
        }

    def describe(self) -> str:
        where = self.python or "a listing"
        return f"the base {where} (Python {self.version}, torch {self.torch or 'none'}, {len(self.packages)} packages)"


def python_version(python: str) -> str:
    """An interpreter's "X.Y"."""
    return procs.capture([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], timeout_s=60).strip()


def read_base(python: str) -> BaseEnv:
    """The base behind an interpreter, a path or a command on PATH; a usage error naming it when it cannot run."""
    found = shutil.which(python)
    if found is None:
        raise UsageError(f"base interpreter {python!r} not found: give a path or a command on PATH")
    try:
        data = json.loads(procs.capture([found, "-c", _PROBE], timeout_s=120))
    except (ProcessError, ValueError) as exc:
        raise EngineError(f"base interpreter {found} could not be read: {exc}") from None
    packages = {normalize(name): version for name, version in data["packages"].items()}
    return BaseEnv(found, data["version"], tuple(data["site_packages"]), packages)


def read_listing(path: Path, version: str) -> BaseEnv:
    """A base described by `pip list --format=json` taken on its machine (for a wheelhouse made elsewhere)."""
    try:
        rows = json.loads(path.read_text())
        packages = {normalize(row["name"]): row["version"] for row in rows}
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise UsageError(
            f"{path}: not a package listing ({exc}); make it on the base with `python -m pip list --format=json`"
        ) from None
    return BaseEnv("", version, (), packages)


def layer(root: Path, base: BaseEnv) -> None:
    """Make the venv at `root` see the base's packages after its own."""
    if not base.site_packages:
        raise EngineError(f"{base.describe()} has no package folders here: a runtime is layered over a local base")
    (site,) = root.glob("lib/python*/site-packages")
    (site / BASE_PTH).write_text("".join(f"{path}\n" for path in base.site_packages))
