"""A source's compiled kernels carried from an earlier build of the same native inputs (FlashInfer's AOT wheels).

FlashInfer's Python wheel is its Python and its kernel sources, built every night in seconds; its AOT wheels
(flashinfer-cubin, flashinfer-jit-cache and its per-architecture provider) are its kernels compiled for the target,
about 26 minutes on a Spark. Those are cached by the content of FlashInfer's native inputs (native_inputs.py), not by
the commit: a night whose FlashInfer changed only Python builds the Python wheel alone and carries the kernels of the
earlier build, relabeled to tonight's version (FlashInfer refuses AOT wheels of another version than its own) with
every other member byte for byte.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import SparkNightlyError
from pipeline.infra.git import Git
from pipeline.infra.runtime import parse_filename
from pipeline.infra.wheel_cache import CacheEntry, WheelCache, cache_key
from pipeline.infra.wheels import read_metadata
from pipeline.stages.build.builders.base import Builder, BuildSource, Toolchain
from pipeline.stages.build.native_inputs import native_digest
from pipeline.stages.build.overlay import relabel_kernels, relabel_problem

KERNEL_CARRY_REVISION = 1  # bump when what is carried, or how, changes: part of the kernels' cache key


@dataclass(frozen=True)
class KernelCarry:
    """Tonight's kernel families, the key of their native inputs, and the earlier build of them that tonight carries
    (None: they are built tonight, for the reason `built_because` gives)."""

    families: tuple[str, ...]
    key: str
    earlier: CacheEntry | None
    built_because: str = "no earlier build of these native inputs"

    def why(self) -> str:
        """What the build record and the plan say of the kernels."""
        names = ", ".join(self.families)
        if self.earlier is None:
            return f"kernels ({names}) built: {self.built_because}"
        commit = str(self.earlier.inputs.get("commit", "?"))[:12]
        return f"kernels ({names}) carried from {commit}: native inputs unchanged"


def kernel_carry(
    builder: Builder,
    source: BuildSource,
    toolchain: Toolchain,
    root: Path,
    cache: WheelCache,
    host: dict[str, str],
) -> KernelCarry | None:
    """None where the source has no kernel wheels, or no history to tell its native inputs by (an sdist)."""
    families = builder.kernel_families(root, toolchain.cuda_arch)
    if not families or source.mirror is None or source.commit is None:
        return None
    digest = native_digest(builder.family, Git(source.mirror), source.commit)
    key = cache_key(
        {
            "kernels": builder.family,
            "revision": [builder.revision, KERNEL_CARRY_REVISION],
            "native_inputs": digest,
            "families": list(families),
            "toolchain": toolchain.identity(host),
        }
    )
    earlier = cache.lookup(key)
    problems = [problem for wheel in earlier.paths() if (problem := relabel_problem(wheel))] if earlier else []
    if problems:  # decided before any step is skipped: such kernels are built again, never guessed at
        return KernelCarry(families, key, None, f"the earlier build cannot be relabeled ({problems[0]})")
    return KernelCarry(families, key, earlier)


def carry_kernels(carry: KernelCarry, built: Sequence[Path], staging: Path, epoch: int) -> list[Path]:
    """The earlier kernel wheels, relabeled to the version of tonight's Python wheel, into `staging`."""
    assert carry.earlier is not None
    python = [w for w in built if parse_filename(w.name)[0] not in carry.families]
    versions = {read_metadata(w).version for w in python}
    if len(versions) != 1:
        raise SparkNightlyError(f"cannot carry kernels: tonight's Python wheels have versions {sorted(versions)}")
    (version,) = versions
    return [relabel_kernels(wheel, version, staging, epoch) for wheel in carry.earlier.paths()]


def remember_kernels(carry: KernelCarry, built: Sequence[Path], cache: WheelCache, commit: str, seconds: float) -> None:
    """Keep tonight's freshly built kernel wheels under their native inputs' key for the nights after."""
    kernels = [w for w in built if parse_filename(w.name)[0] in carry.families]
    if kernels:
        cache.store(carry.key, kernels, {"commit": commit}, seconds)
