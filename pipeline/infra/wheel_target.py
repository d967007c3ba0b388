"""The machine a wheelhouse is made for: its Python version and its platform (`manylinux_2_39_aarch64`), which need not
be the preparing machine's. A runner installs from a wheelhouse only where both hold."""

from __future__ import annotations

import platform
import re
from dataclasses import dataclass
from typing import Any

from pipeline.errors import UsageError

_PLATFORM = re.compile(r"manylinux_2_(?P<minor>\d+)_(?P<arch>x86_64|aarch64)")
_PYTHON = re.compile(r"3\.\d+")
# The oldest glibc a manylinux_2_N tag is asked for down to (manylinux2014 is manylinux_2_17); older wheels carry the
# legacy names below.
_OLDEST_GLIBC_MINOR = 17
# the legacy manylinux tags and the glibc each stands for (PEP 600), newest first; the two oldest exist for x86 only
LEGACY_MANYLINUX = {"manylinux2014": (2, 17), "manylinux2010": (2, 12), "manylinux1": (2, 5)}
_X86_ONLY = frozenset({"manylinux2010", "manylinux1"})


def pip_platforms(host_platform: str | None, glibc: tuple[int, int] | None) -> tuple[str, ...]:
    """pip's --platform tags for a `linux_<arch>` host with that glibc (pip matches each tag exactly), so a lock or a
    wheelhouse made anywhere holds the target's wheels; empty (this host) when either is unknown."""
    if host_platform is None or glibc is None or not host_platform.startswith("linux_"):
        return ()
    arch = host_platform.removeprefix("linux_")
    manylinux = [f"manylinux_{glibc[0]}_{minor}_{arch}" for minor in range(glibc[1], _OLDEST_GLIBC_MINOR - 1, -1)]
    legacy = [
        f"{name}_{arch}"
        for name, needs in LEGACY_MANYLINUX.items()
        if needs <= glibc and (name not in _X86_ONLY or arch in ("x86_64", "i686"))
    ]
    return (*manylinux, *legacy, host_platform)


@dataclass(frozen=True)
class Target:
    """A runner's Python ("3.12") and platform ("manylinux_2_39_aarch64": its arch and the newest glibc it has)."""

    python: str
    platform: str

    @classmethod
    def parse(cls, python: str, platform_name: str) -> Target:
        """A target from what a person wrote; a usage error that shows the form when either is not one."""
        if not _PYTHON.fullmatch(python):
            raise UsageError(f"--target-python {python!r}: give the runner's Python as X.Y, e.g. 3.12")
        if not _PLATFORM.fullmatch(platform_name):
            raise UsageError(
                f"--target-platform {platform_name!r}: give manylinux_2_<glibc minor>_<arch>, e.g. "
                "manylinux_2_39_aarch64 for a Spark (DGX OS 7) or manylinux_2_28_x86_64"
            )
        return cls(python, platform_name)

    @staticmethod
    def profile_platform(profile_platform: str | None, glibc: str | None) -> str | None:
        """The platform a profile names (its `platform: linux_aarch64` and `glibc: "2.39"`), or None."""
        if not profile_platform or not glibc:
            return None
        return f"manylinux_{glibc.replace('.', '_')}_{profile_platform.removeprefix('linux_')}"

    @classmethod
    def here(cls, python: str) -> Target:
        """This machine as a target, for an interpreter of version `python`."""
        libc, version = platform.libc_ver()
        minor = version.split(".")[1] if libc == "glibc" and "." in version else str(_OLDEST_GLIBC_MINOR)
        return cls(python, f"manylinux_2_{minor}_{platform.machine()}")

    @property
    def arch(self) -> str:
        return self._parts()[1]

    @property
    def glibc_minor(self) -> int:
        return self._parts()[0]

    def _parts(self) -> tuple[int, str]:
        found = _PLATFORM.fullmatch(self.platform)
        if found is None:  # a platform this module did not make: an older index, or another OS
            return _OLDEST_GLIBC_MINOR, self.platform.rsplit("_", 1)[-1]
        return int(found["minor"]), found["arch"]

    @property
    def abi(self) -> str:
        return "cp" + self.python.replace(".", "")

    def platform_tags(self) -> list[str]:
        """Every manylinux tag a wheel for this target may carry, newest glibc first (the lock's rule)."""
        return [tag for tag in pip_platforms(f"linux_{self.arch}", (2, self.glibc_minor)) if tag.startswith("many")]

    def uv_platform(self) -> str:
        """The target as uv's `--python-platform` names it."""
        return f"{self.arch}-manylinux_2_{self.glibc_minor}"

    def describe(self) -> str:
        return f"Python {self.python} on {self.platform}"

    def to_json(self) -> dict[str, Any]:
        return {"python": self.python, "platform": self.platform}

    def refuses(self, runner: Target) -> str | None:
        """Why a wheelhouse made for this target cannot install on `runner`, or None where it can."""
        if self.python != runner.python:
            return f"it holds wheels for Python {self.python}, the runner's is {runner.python}"
        if self.arch != runner.arch:
            return f"it holds wheels for {self.arch}, the runner is {runner.arch}"
        if self.glibc_minor > runner.glibc_minor:
            return f"its wheels may need glibc 2.{self.glibc_minor}, the runner has 2.{runner.glibc_minor}"
        return None
