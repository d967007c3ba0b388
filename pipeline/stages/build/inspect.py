"""Inspect: refuse wheels that cannot work on the profile's hardware before any GPU time is spent on them."""

from __future__ import annotations

import fnmatch
import zipfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from pipeline.config.matrix import Profile
from pipeline.errors import EngineError
from pipeline.infra.fatbin import Cuobjdump, Image, Inventory, inventory_wheel
from pipeline.infra.safe_files import shown
from pipeline.infra.wheels import READ_ERRORS, check_archive, elf_problems, read_metadata
from pipeline.progress import Say, quiet
from pipeline.stages.build.arch_rules import cubin_runs_on, platform_problem, ptx_runs_on, split_arch
from pipeline.status import Status, worst

# PTX ISA version -> the CUDA release that introduced it (NVIDIA's PTX ISA release notes).
_PTX_TO_CUDA = {
    (7, 0): (11, 0), (7, 1): (11, 1), (7, 2): (11, 2), (7, 3): (11, 3), (7, 4): (11, 4), (7, 5): (11, 5),
    (7, 6): (11, 6), (7, 7): (11, 7), (7, 8): (11, 8), (8, 0): (12, 0), (8, 1): (12, 1), (8, 2): (12, 2),
    (8, 3): (12, 3), (8, 4): (12, 4), (8, 5): (12, 5), (8, 6): (12, 7), (8, 7): (12, 8), (8, 8): (12, 9),
    (9, 0): (13, 0),
}  # fmt: skip
RUST_FRONTEND = "vllm/vllm-rs"  # vLLM's Rust frontend binary (tools/build_rust.py), optional in its build
# What one native library's GPU code is on the target: a finding, not a verdict. ok: an image for it; flagged: usable,
# but only through a PTX JIT at first load; absent: no image for the target, in a library that upstream builds only
# for other GPUs by design (the profile's absent_by_design), so nothing the target runs loads it; refused: none. The
# wheel's report maps them to the night's Status at one edge (_inspect_readable): refused FAILs, the others are notes.
LibraryState = Literal["ok", "flagged", "refused", "absent"]


@dataclass(frozen=True)
class Target:
    """What the wheels must run on: from the hardware profile, the driver's CUDA optionally read off the host."""

    gpu: bool
    arch: str | None  # "sm_121a"
    driver_cuda: tuple[int, int] | None
    torch_version: str
    platform: str | None  # "linux_aarch64"
    glibc: tuple[int, int] | None = None  # the host's; manylinux_2_N wheels with N up to it install
    absent_by_design: Mapping[str, str] = field(default_factory=dict)  # member glob -> why it has no image here

    @staticmethod
    def of(profile: Profile, driver_cuda: str | None = None) -> Target:
        cuda = driver_cuda or profile.torch.cuda
        return Target(
            gpu=profile.accelerator != "cpu",
            arch=f"sm_{profile.arch.replace('.', '')}" if profile.arch else None,
            driver_cuda=_version_pair(cuda) if cuda else None,
            torch_version=profile.torch.version,
            platform=profile.platform,
            glibc=_version_pair(profile.glibc) if profile.glibc else None,
            absent_by_design=profile.absent_by_design,
        )

    def by_design(self, member: str) -> str | None:
        """Why this library has no image for the target by design, if the profile says so."""
        return next((why for pattern, why in self.absent_by_design.items() if fnmatch.fnmatch(member, pattern)), None)


@dataclass(frozen=True)
class LibraryFinding:
    """One native library of a wheel and what its GPU code means on the target."""

    member: str
    cubins: tuple[str, ...]
    ptx: tuple[str, ...]  # "sm_90 (PTX 9.0)"
    status: LibraryState
    reason: str


@dataclass(frozen=True)
class CubinSet:
    """A wheel's bare .cubin members, counted rather than listed (FlashInfer's cubin wheel holds about 16,000)."""

    total: int
    by_arch: Mapping[str, int]
    usable: int  # how many load on the target; the others' kernels are JIT-compiled at first use
    unreadable: tuple[str, ...] = ()


@dataclass(frozen=True)
class WheelReport:
    """Everything inspection found in one wheel."""

    wheel: str
    name: str
    version: str
    status: Status
    problems: tuple[str, ...]
    notes: tuple[str, ...]
    libraries: tuple[LibraryFinding, ...]
    cubins: CubinSet | None = None

    @property
    def absent(self) -> tuple[str, ...]:
        """The libraries with no image for the target by design."""
        return tuple(lib.member for lib in self.libraries if lib.status == "absent")


@dataclass(frozen=True)
class ArtifactReport:
    """The inspection of a whole wheel set."""

    status: Status
    wheels: tuple[WheelReport, ...]
    problems: tuple[str, ...]  # across wheels: families missing or doubled
    notes: tuple[str, ...] = ()  # across wheels: what works, but not as one might expect


def inspect_wheels(
    wheels: Sequence[Path],
    target: Target,
    cuobjdump: Cuobjdump | None,
    *,
    families: Sequence[str] = (),
    say: Say = quiet,
) -> ArtifactReport:
    """Inspect each wheel, then the set: exactly one wheel per family, and every expected family present."""
    reports = [inspect_wheel(wheel, target, cuobjdump, say=say) for wheel in wheels]
    problems = []
    names = [r.name for r in reports]
    for family in sorted(set(names)):
        if names.count(family) > 1:
            problems.append(f"{names.count(family)} wheels of {family}: exactly one per family is installable")
    problems.extend(f"no wheel of {family}" for family in families if family not in names)
    statuses = [r.status for r in reports] + [Status.FAIL] * bool(problems)
    status = worst(statuses) if statuses else Status.FAIL
    notes = tuple(companion_notes(reports))
    return ArtifactReport(status, tuple(reports), tuple(problems or (["no wheels"] if not reports else [])), notes)


AOT_KERNEL_WHEELS = ("flashinfer-cubin", "flashinfer-jit-cache")


def companion_notes(reports: Sequence[WheelReport]) -> list[str]:
    """FlashInfer loads its cubin and jit-cache wheels only at exactly its own version (flashinfer/jit/env.py):
    another version is ignored with a warning, and its kernels are JIT-compiled or downloaded instead. Without any
    of them, every kernel is JIT-compiled: the night runs on JIT, and says so."""
    versions = {r.name: r.version for r in reports}
    python = versions.get("flashinfer-python")
    if python and not any(name.startswith(AOT_KERNEL_WHEELS) for name in versions):
        return [
            f"flashinfer-python {python} has no AOT kernel wheel tonight ({', '.join(AOT_KERNEL_WHEELS)}): every "
            "FlashInfer kernel is JIT-compiled at first use (nvcc in the runtime), so each boot's time includes it"
        ]
    return [
        f"{name} {version} beside flashinfer-python {python}: FlashInfer ignores a companion of another version, "
        "so these kernels are JIT-compiled at first use"
        for name, version in sorted(versions.items())
        if python and name.startswith(AOT_KERNEL_WHEELS) and version != python
    ]


def inspect_wheel(wheel: Path, target: Target, cuobjdump: Cuobjdump | None, *, say: Say = quiet) -> WheelReport:
    """Archive, metadata, torch requirement and, for a GPU target, the fatbin inventory of every native library; a
    wheel that cannot even be read (a bad name, METADATA missing or not UTF-8, a member pip would refuse) is FAIL
    with the reason, never an error that stops the run."""
    try:
        report = _inspect_readable(wheel, target, cuobjdump, say)
    except READ_ERRORS as exc:
        report = WheelReport(wheel.name, "", "", Status.FAIL, (f"unreadable wheel: {shown(str(exc))[:300]}",), (), ())
    counted = [f"{len(report.libraries)} native libraries"] * bool(report.libraries)
    counted += [f"{len(report.absent)} absent on this GPU by design"] * bool(report.absent)
    counted += [f"{report.cubins.total:,} cubins, {report.cubins.usable:,} usable"] if report.cubins else []
    say(f"inspect {shown(wheel.name)}: {report.status.value}" + (f" ({'; '.join(counted)})" if counted else ""))
    return report


def _inspect_readable(wheel: Path, target: Target, cuobjdump: Cuobjdump | None, say: Say) -> WheelReport:
    archive = check_archive(wheel)
    if archive.problems and archive.members == 0:
        return WheelReport(wheel.name, "", "", Status.FAIL, archive.problems, (), ())
    meta = read_metadata(wheel)
    problems = list(archive.problems[:20])
    if len(archive.problems) > 20:
        problems.append(f"... and {len(archive.problems) - 20} more RECORD mismatches")
    if (meta.name, meta.version) != (meta.filename_name, meta.filename_version):
        problems.append(
            f"METADATA says {shown(meta.name)} {shown(meta.version)} but the file name says {meta.filename_name} "
            f"{meta.filename_version}"
        )
    if target.platform and (platform := platform_problem(meta.platform_tag, target.platform, target.glibc)):
        problems.append(platform)
    with zipfile.ZipFile(wheel) as opened:
        problems.extend(elf_problems(opened, meta.platform_tag))
        frontend = [rust_frontend_note(opened)] if meta.name == "vllm" else []
    notes, torch_problems = _torch_requirement(meta.requires, target)
    problems.extend(torch_problems)
    notes.extend(frontend)
    libraries: tuple[LibraryFinding, ...] = ()
    cubins: CubinSet | None = None
    if target.gpu and target.arch is None:
        notes.append(NO_ARCH_NOTE)
    elif target.gpu and cuobjdump is not None:
        libraries, cubins = _gpu_code(wheel, target, cuobjdump, say)
        problems.extend(f"{lib.member}: {lib.reason}" for lib in libraries if lib.status == "refused")
        notes.extend(f"{lib.member}: {lib.reason}" for lib in libraries if lib.status == "flagged")
        if absent := [lib.member for lib in libraries if lib.status == "absent"]:
            notes.append(f"{len(absent)} libraries absent on {target.arch} by design: {', '.join(absent)}")
        if cubins is not None:
            notes.append(cubin_note(cubins, target))
            problems.extend(f"{member}: cuobjdump cannot read it" for member in cubins.unreadable)
    status = Status.FAIL if problems else Status.PASS
    return WheelReport(wheel.name, meta.name, meta.version, status, tuple(problems), tuple(notes), libraries, cubins)


# A GPU profile for any NVIDIA GPU (gpu, gpu-built) names no architecture to hold the images to; the smoke stage
# loads every native library on the runner's own GPU instead.
NO_ARCH_NOTE = "the profile names no GPU architecture: the native images are not judged here (smoke loads each library)"


def rust_frontend_note(archive: zipfile.ZipFile) -> str:
    """Whether vLLM's optional Rust frontend was built: setuptools-rust skips it, with a warning, without cargo."""
    if RUST_FRONTEND in archive.namelist():
        return f"Rust frontend built ({RUST_FRONTEND})"
    return f"Rust frontend not built (no {RUST_FRONTEND}: the build had no cargo, or it failed and was skipped)"


def _torch_requirement(requires: Sequence[str], target: Target) -> tuple[list[str], list[str]]:
    """(notes, problems) of the wheel's torch requirement against the profile's pinned torch."""
    notes: list[str] = []
    problems: list[str] = []
    pinned = Version(target.torch_version)
    # a CPU profile's pinned torch is PyTorch's CPU build of that version: 2.13.0 is installed as 2.13.0+cpu
    builds = [pinned] if target.gpu or pinned.local else [pinned, Version(f"{pinned}+cpu")]
    torch = []
    for line in requires:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            problems.append(f"unparsable Requires-Dist: {line!r}")
            continue
        if requirement.name.lower() == "torch" and (
            requirement.marker is None or "extra" not in str(requirement.marker)
        ):
            torch.append(requirement)
    for requirement in torch:
        if target.gpu and "+cpu" in str(requirement.specifier):
            problems.append(f"requires {requirement}: a +cpu torch on a GPU profile")
        elif not any(requirement.specifier.contains(build, prereleases=True) for build in builds):
            problems.append(f"requires {requirement}, which the pinned torch {pinned} does not satisfy")
        else:
            notes.append(f"requires {requirement}: the pinned torch {pinned} satisfies it")
    if not torch:
        notes.append(f"no torch requirement (built with the existing torch); the lock pins torch {pinned}")
    return notes, problems


def _gpu_code(
    wheel: Path, target: Target, cuobjdump: Cuobjdump, say: Say
) -> tuple[tuple[LibraryFinding, ...], CubinSet | None]:
    """Every native member judged: libraries one by one, bare cubins counted by architecture."""
    findings: list[LibraryFinding] = []
    cubin_archs: Counter[str] = Counter()
    unreadable: list[str] = []
    for member, read in inventory_wheel(wheel, cuobjdump, say=say):
        name = shown(member)
        if isinstance(read, EngineError):
            reason = str(read).split(": ", 1)[-1][:300]
            if member.endswith(".cubin"):
                unreadable.append(name)
            else:
                findings.append(LibraryFinding(name, (), (), "refused", f"cuobjdump cannot read it: {reason}"))
        elif member.endswith(".cubin"):
            cubin_archs.update(read.cubin_archs)
        elif (finding := judge_library(name, read, target)) is not None:
            findings.append(finding)
    if not cubin_archs and not unreadable:
        return tuple(findings), None
    usable = sum(n for arch, n in cubin_archs.items() if target.arch and cubin_runs_on(arch, target.arch))
    by_arch = dict(sorted(cubin_archs.items(), key=lambda item: split_arch(item[0])))
    return tuple(findings), CubinSet(sum(cubin_archs.values()), by_arch, usable, tuple(unreadable))


def cubin_note(cubins: CubinSet, target: Target) -> str:
    """What a wheel's bare cubins give the target: those that load, and those whose kernels are compiled instead."""
    archs = ", ".join(f"{arch} {count:,}" for arch, count in cubins.by_arch.items())
    if cubins.usable == cubins.total:
        return f"{cubins.total:,} cubins ({archs}), all load on {target.arch}"
    rest = cubins.total - cubins.usable
    return (
        f"{cubins.total:,} cubins ({archs}): {cubins.usable:,} load on {target.arch}; the kernels of the other "
        f"{rest:,} are JIT-compiled at first use (FlashInfer's JIT, which needs nvcc in the runtime)"
    )


def judge_library(member: str, inventory: Inventory, target: Target) -> LibraryFinding | None:
    """PASS with a cubin the target runs; flagged when only PTX can serve it; FAIL with no usable image."""
    if not inventory.images:
        return None  # host code only
    cubins = inventory.cubin_archs
    ptx = inventory.ptx
    shown_ptx = tuple(f"{p.arch} (PTX {p.ptx_isa[0]}.{p.ptx_isa[1]})" if p.ptx_isa else p.arch for p in ptx)
    too_new = [p for p in ptx if _needs_newer_driver(p, target)]
    too_new_text = ", ".join(f"{p.arch} PTX {_isa(p)} needs CUDA {_needed_cuda(p)}" for p in too_new)
    driver = f"{target.driver_cuda[0]}.{target.driver_cuda[1]}" if target.driver_cuda else "?"

    def finding(status: LibraryState, reason: str) -> LibraryFinding:
        return LibraryFinding(member, cubins, shown_ptx, status, reason)

    matching = [arch for arch in cubins if target.arch and cubin_runs_on(arch, target.arch)]
    if matching:
        extra = f"; unused PTX newer than the driver's CUDA {driver}: {too_new_text}" if too_new else ""
        return finding("ok", f"cubins for {', '.join(matching)}{extra}")
    usable = [p for p in ptx if target.arch and ptx_runs_on(p.arch, target.arch) and p not in too_new]
    has = ", ".join(cubins) or "none"
    if usable:
        return finding(
            "flagged",
            f"no cubin for {target.arch}: its PTX ({', '.join(p.arch for p in usable)}) is JIT-compiled at first load; "
            f"cubins: {has}",
        )
    if too_new and any(target.arch and ptx_runs_on(p.arch, target.arch) for p in too_new):
        return finding(
            "refused",
            f"no cubin for {target.arch}, and its PTX is newer than the driver's CUDA {driver}: {too_new_text}",
        )
    images = f"cubins {has}" + (f", PTX {', '.join(shown_ptx)}" if ptx else "")
    if (why := target.by_design(member)) is not None:
        return finding("absent", f"absent on {target.arch} by design ({why}): {images}")
    return finding("refused", f"no image for {target.arch}: {images}")


def _isa(image: Image) -> str:
    return f"{image.ptx_isa[0]}.{image.ptx_isa[1]}" if image.ptx_isa else "?"


def _needed_cuda(image: Image) -> str:
    major, minor = _cuda_for_isa(image.ptx_isa) if image.ptx_isa else (0, 0)
    return f"{major}.{minor}"


def _cuda_for_isa(isa: tuple[int, int]) -> tuple[int, int]:
    if isa in _PTX_TO_CUDA:
        return _PTX_TO_CUDA[isa]
    if isa[0] >= 9:  # 9.N shipped with CUDA 13.N so far; a later ISA is newer than every table entry
        return (isa[0] + 4, isa[1])
    return (0, 0)  # older than CUDA 11: any current driver runs it


def _needs_newer_driver(image: Image, target: Target) -> bool:
    return (
        image.ptx_isa is not None
        and target.driver_cuda is not None
        and _cuda_for_isa(image.ptx_isa) > target.driver_cuda
    )


def _version_pair(text: str) -> tuple[int, int]:
    try:
        release = Version(text).release
    except InvalidVersion:
        raise ValueError(f"not a CUDA version: {text!r}") from None
    return (release[0], release[1] if len(release) > 1 else 0)
