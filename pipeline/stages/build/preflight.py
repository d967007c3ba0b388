"""Before a build spends hours: what the runner lacks for it (Python headers, nvcc, ccache, docker, disk), each with
its fix. A stock DGX Spark has no python3-dev, no ccache and no nvcc on its PATH; a cold vLLM build takes 2-4 hours.
"""

from __future__ import annotations

import os
import shutil
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import BuildPreflightError
from pipeline.stages.build.builders.base import Toolchain

Which = Callable[[str], str | None]


@dataclass(frozen=True)
class Check:
    """One prerequisite: whether it is there, what was found, and the fix when it is not."""

    name: str
    ok: bool
    found: str
    fix: str = ""
    required: bool = True  # False: the build runs without it, with less (a skipped optional part)


def build_checks(
    toolchain: Toolchain,
    work_dir: Path,
    *,
    min_free_gib: int,
    rust: bool,
    compiles: bool = True,
    which: Which = shutil.which,
    environ: dict[str, str] | None = None,
    python_include: Path | None = None,
) -> list[Check]:
    """Every prerequisite of tonight's build in this toolchain's mode; `rust` when a source has a Rust part;
    `compiles` False for a source that is packaging alone (flashinfer-python with no AOT kernels: no compiler)."""
    environ = dict(os.environ) if environ is None else environ
    # a CUDA build holds the source, its objects and wheels and fills the compiler cache; a pure-Python one does not
    checks = [disk_check(work_dir, min_free_gib if toolchain.cuda_arch else 0, "or lower build.min_free_gib")]
    if not compiles and toolchain.mode == "host":
        return checks
    if toolchain.mode == "docker":
        docker = which("docker")
        return [*checks, Check("docker", docker is not None, docker or "not on PATH", "install Docker Engine")]
    include = python_include or Path(sysconfig.get_paths()["include"])
    checks.append(
        Check(
            "Python headers",
            (include / "Python.h").is_file(),
            str(include / "Python.h"),
            "sudo apt-get install python3-dev (the build compiles Python extensions)",
        )
    )
    if toolchain.cuda_arch:
        nvcc = _nvcc(which, environ)
        checks.append(
            Check(
                "nvcc",
                nvcc is not None,
                nvcc or "not on PATH, nor in $CUDA_HOME/bin",
                "install the CUDA 13.0 toolkit (apt: cuda-toolkit-13-0) and export CUDA_HOME=/usr/local/cuda-13.0, "
                "PATH=$CUDA_HOME/bin:$PATH",
            )
        )
    ccache = which("ccache")
    checks.append(
        Check(
            "ccache",
            ccache is not None,
            ccache or "not on PATH",
            "sudo apt-get install ccache (without it every night is a cold build: 2-4 hours for vLLM on a Spark)",
        )
    )
    if rust:
        cargo = which("cargo")
        checks.append(
            Check(
                "cargo",
                cargo is not None,
                cargo or "not on PATH",
                "install rustup (https://rustup.rs); without cargo vLLM's optional Rust frontend is not built",
                required=False,
            )
        )
    return checks


def require(checks: list[Check]) -> None:
    """Raise naming every missing required prerequisite with its fix."""
    missing = [c for c in checks if c.required and not c.ok]
    if missing:
        lines = "; ".join(f"{c.name}: {c.found} ({c.fix})" for c in missing)
        raise BuildPreflightError(f"the build cannot start: {lines}")


def _nvcc(which: Which, environ: dict[str, str]) -> str | None:
    home = environ.get("CUDA_HOME") or environ.get("CUDA_PATH")
    if home and (Path(home) / "bin" / "nvcc").is_file():
        return str(Path(home) / "bin" / "nvcc")
    return which("nvcc")


def disk_check(path: Path, need_gib: int, fix: str) -> Check:
    """Free disk where `path` is (or will be made), against what is needed there."""
    probe = next((p for p in (path, *path.parents) if p.exists()), Path("/"))
    free = shutil.disk_usage(probe).free / 1024**3
    return Check(
        "disk",
        free >= need_gib,
        f"{free:.0f} GiB free at {probe} (needs {need_gib})",
        f"free at least {need_gib} GiB there, {fix}",
    )
