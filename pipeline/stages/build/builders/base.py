"""What every builder shares: the source it builds, the toolchain it builds with, and the steps it runs."""

from __future__ import annotations

import re
import shutil
import tarfile
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, Protocol

from pipeline.errors import SparkNightlyError
from pipeline.infra import git as gitlib
from pipeline.infra.files import sha256_of
from pipeline.stages.build.build_plan import SourcePlan

Mode = Literal["host", "docker"]


@dataclass(frozen=True)
class BuildSource:
    """One source to build: a pinned commit in a mirror, or a source distribution file."""

    family: str  # "flashinfer" | "vllm"
    identity: str  # what the bytes of the source are: "git-tree:<sha>" or "sdist-sha256:<hex>"
    version_label: str | None  # local version label for the wheels, g<commit>.d<commit date>
    epoch: int | None = None  # SOURCE_DATE_EPOCH: timestamps inside the wheels, so a rebuild is byte-identical
    mirror: Path | None = None
    commit: str | None = None
    sdist: Path | None = None
    main_commit: str | None = None  # main's commit the built one was grafted onto (the same where nothing was)

    @staticmethod
    def from_plan(plan: SourcePlan, mirror: Path) -> BuildSource:
        # The commit's own date, not tonight's: an unchanged source must give the same version and cache key.
        date = datetime.fromisoformat(plan.main_date)
        label = f"g{plan.commit[:9]}.d{date.astimezone(UTC):%Y%m%d}"
        return BuildSource(
            plan.name,
            f"git-tree:{plan.tree}",
            label,
            int(date.timestamp()),
            mirror,
            plan.commit,
            None,
            plan.main_commit,
        )

    @staticmethod
    def from_sdist(family: str, sdist: Path) -> BuildSource:
        with tarfile.open(sdist) as archive:
            epoch = max((member.mtime for member in archive.getmembers()[:100]), default=0)
        return BuildSource(family, f"sdist-sha256:{sha256_of(sdist)}", None, int(epoch), sdist=sdist)

    def materialize(self, where: Path) -> Path:
        """The source tree, checked out or unpacked at `where`; returns its root folder."""
        shutil.rmtree(where, ignore_errors=True)
        if self.mirror is not None and self.commit is not None:
            tree = gitlib.add_worktree(gitlib.Git(self.mirror), where, self.commit)
            if (where / ".gitmodules").exists():
                tree("submodule", "update", "--init", "--recursive", "--depth", "1")
            return where
        if self.sdist is None:
            raise SparkNightlyError(f"build source {self.family} has neither a commit nor an sdist")
        where.mkdir(parents=True)
        with tarfile.open(self.sdist) as archive:
            archive.extractall(where, filter="data")  # refuses links and paths that leave `where`
        roots = [p for p in where.iterdir() if p.is_dir()]
        if len(roots) != 1:
            raise SparkNightlyError(f"{self.sdist.name} does not unpack to one folder")
        return roots[0]

    def release(self, where: Path) -> None:
        if self.mirror is not None:
            gitlib.remove_worktree(gitlib.Git(self.mirror), where)
        shutil.rmtree(where, ignore_errors=True)


@dataclass(frozen=True)
class Toolchain:
    """How wheels are built tonight: target architecture, torch pin, parallelism, caches, host or image."""

    cuda_arch: str | None  # "12.1a"; None builds for no GPU (a CPU profile building a pure-Python sdist)
    torch: str  # "torch==2.13.0"
    index_urls: tuple[str, ...]
    max_jobs: int
    mode: Mode
    ccache_dir: Path | None
    base_image: str | None = None  # docker mode: a CUDA devel image
    timeout_s: float = 4 * 3600.0
    ccache_size: str = "50G"

    def identity(self, host: Mapping[str, str]) -> dict[str, object]:
        """What decides the wheels' bytes (MAX_JOBS and the cache do not)."""
        return {
            "cuda_arch": self.cuda_arch,
            "torch": self.torch,
            "index_urls": list(self.index_urls),
            "mode": self.mode,
            "base_image": self.base_image,
            "host": dict(host),
        }


@dataclass(frozen=True)
class Step:
    """One command of a build, run in `cwd` (relative to the source root) with `env` added."""

    name: str
    argv: tuple[str, ...]
    cwd: str = "."
    env: Mapping[str, str] = field(default_factory=dict)
    produces: str | None = None  # the wheel family this step writes


@dataclass(frozen=True)
class Paths:
    """Where a step finds things: the build interpreter and uv, and the folder that receives wheels."""

    python: str
    uv: str
    out: str


class Builder(Protocol):
    """Turns one source into its wheels."""

    family: str
    revision: int  # bump when the steps change: part of the cache key

    def families(self, root: Path | None, cuda_arch: str | None = None) -> tuple[str, ...]:
        """The wheel families this source yields for the architecture (root None: those of a full checkout that
        every night has; a source may add per-architecture families)."""
        ...

    def kernel_families(self, root: Path, cuda_arch: str | None = None) -> tuple[str, ...]:
        """Those of `families` that are compiled kernels alone, cached by the native inputs' content rather than the
        commit (kernel_carry.py); none where the whole source is one build."""
        ...

    def build_requirements(self, root: Path, toolchain: Toolchain) -> tuple[str, ...]: ...

    def compiles(self, root: Path, toolchain: Toolchain) -> bool:
        """Whether the build runs a compiler (headers, ccache and, for an architecture, nvcc are then needed)."""
        ...

    def rust_channel(self, root: Path | None) -> str | None:
        """The Rust toolchain the source builds with (its rust-toolchain.toml), or None when it has no Rust part."""
        ...

    def steps(self, root: Path | None, source: BuildSource, toolchain: Toolchain, paths: Paths) -> list[Step]: ...


def uv_build(name: str, directory: str, paths: Paths, env: Mapping[str, str]) -> Step:
    """`uv build --no-build-isolation --wheel` of one project, against the prepared build interpreter."""
    argv = (paths.uv, "build", "--no-build-isolation", "--wheel", "--python", paths.python, "--out-dir", paths.out)
    return Step(name, (*argv, directory), ".", env, produces=name)


def common_env(toolchain: Toolchain, source: BuildSource) -> dict[str, str]:
    env = {"MAX_JOBS": str(toolchain.max_jobs)}
    if source.epoch is not None:
        env["SOURCE_DATE_EPOCH"] = str(source.epoch)
    if toolchain.ccache_dir is not None:
        env |= {
            "CCACHE_DIR": str(toolchain.ccache_dir),
            "CCACHE_MAXSIZE": toolchain.ccache_size,
            "CCACHE_COMPRESS": "1",
            "CMAKE_C_COMPILER_LAUNCHER": "ccache",
            "CMAKE_CXX_COMPILER_LAUNCHER": "ccache",
            "CMAKE_CUDA_COMPILER_LAUNCHER": "ccache",
        }
    return env


def pyproject_build_requires(project: Path) -> tuple[str, ...]:
    """[build-system].requires of a project, which --no-build-isolation expects installed already."""
    try:
        data = tomllib.loads((project / "pyproject.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SparkNightlyError(f"cannot read {project / 'pyproject.toml'}: {exc}") from None
    return tuple(data.get("build-system", {}).get("requires", ()))


def without_torch(requirements: Sequence[str]) -> tuple[str, ...]:
    """Requirements minus any torch line: the toolchain's pinned torch replaces them (use_existing_torch)."""
    return tuple(r for r in requirements if re.split(r"[<>=!~\[; ]", r.strip(), maxsplit=1)[0].lower() != "torch")


def read_requirements(listed: Path, *, _seen: frozenset[Path] = frozenset()) -> tuple[str, ...]:
    """The requirement lines of a pip requirements file, following `-r` includes relative to it (as vLLM's own
    setup.py does); comments, blank lines and other options are dropped."""
    if listed.resolve() in _seen:
        raise SparkNightlyError(f"{listed} includes itself through -r")
    try:
        text = listed.read_text()
    except OSError as exc:
        raise SparkNightlyError(f"cannot read {listed}: {exc.strerror}") from None
    found: list[str] = []
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if line.startswith(("-r ", "--requirement ")):
            included = listed.parent / line.split(maxsplit=1)[1]
            found.extend(read_requirements(included, _seen=_seen | {listed.resolve()}))
        elif line and not line.startswith("-"):
            found.append(line)
    return tuple(dict.fromkeys(found))


def rust_toolchain_channel(root: Path) -> str | None:
    """The channel a source's rust-toolchain.toml pins, if it has one."""
    path = root / "rust-toolchain.toml"
    if not path.exists():
        return None
    try:
        channel = tomllib.loads(path.read_text()).get("toolchain", {}).get("channel")
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SparkNightlyError(f"cannot read {path}: {exc}") from None
    if not isinstance(channel, str) or not re.fullmatch(r"[\w.-]+", channel):
        raise SparkNightlyError(f"{path}: [toolchain] channel is missing or not a toolchain name")
    return channel
