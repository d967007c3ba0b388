"""Inspect: refuse wheels that cannot work on the profile's hardware before any GPU time is spent on them."""

from __future__ import annotations

import re
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from pipeline.config.matrix import Profile
from pipeline.errors import EngineError
from pipeline.infra.fatbin import Cuobjdump, Image, Inventory
from pipeline.infra.safe_files import shown
from pipeline.infra.wheels import (
    READ_ERRORS,
    check_archive,
    elf_problems,
    extracted_member,
    native_members,
    read_metadata,
)
from pipeline.progress import Say, quiet
from pipeline.status import Status, worst

# PTX ISA version -> the CUDA release that introduced it (NVIDIA's PTX ISA release notes).
_PTX_TO_CUDA = {
    (7, 0): (11, 0), (7, 1): (11, 1), (7, 2): (11, 2), (7, 3): (11, 3), (7, 4): (11, 4), (7, 5): (11, 5),
    (7, 6): (11, 6), (7, 7): (11, 7), (7, 8): (11, 8), (8, 0): (12, 0), (8, 1): (12, 1), (8, 2): (12, 2),
    (8, 3): (12, 3), (8, 4): (12, 4), (8, 5): (12, 5), (8, 6): (12, 7), (8, 7): (12, 8), (8, 8): (12, 9),
    (9, 0): (13, 0),
}  # fmt: skip
# flagged: usable, but only through a PTX JIT at first load
Verdict = Literal["ok", "flagged", "refused"]


@dataclass(frozen=True)
class Target:
    """What the wheels must run on: from the hardware profile, the driver's CUDA optionally read off the host."""

    gpu: bool
    arch: str | None  # "sm_121a"
    accepted_cubins: tuple[str, ...]
    driver_cuda: tuple[int, int] | None
    torch_version: str
    platform: str | None

    @staticmethod
    def of(profile: Profile, driver_cuda: str | None = None) -> Target:
        cuda = driver_cuda or profile.torch.cuda
        return Target(
            gpu=profile.accelerator != "cpu",
            arch=f"sm_{profile.arch.replace('.', '')}" if profile.arch else None,
            accepted_cubins=profile.accepted_cubins,
            driver_cuda=_version_pair(cuda) if cuda else None,
            torch_version=profile.torch.version,
            platform=profile.platform,
        )


@dataclass(frozen=True)
class LibraryFinding:
    """One native library of a wheel and what its GPU code means on the target."""

    member: str
    cubins: tuple[str, ...]
    ptx: tuple[str, ...]  # "sm_90 (PTX 9.0)"
    status: Verdict
    reason: str


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


@dataclass(frozen=True)
class ArtifactReport:
    """The inspection of a whole wheel set."""

    status: Status
    wheels: tuple[WheelReport, ...]
    problems: tuple[str, ...]  # across wheels: families missing or doubled


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
    return ArtifactReport(status, tuple(reports), tuple(problems or (["no wheels"] if not reports else [])))


def inspect_wheel(wheel: Path, target: Target, cuobjdump: Cuobjdump | None, *, say: Say = quiet) -> WheelReport:
    """Archive, metadata, torch requirement and, for a GPU target, the fatbin inventory of every native library; a
    wheel that cannot even be read (a bad name, METADATA missing or not UTF-8, a member pip would refuse) is FAIL
    with the reason, never an error that stops the run."""
    try:
        report = _inspect_readable(wheel, target, cuobjdump)
    except READ_ERRORS as exc:
        report = WheelReport(wheel.name, "", "", Status.FAIL, (f"unreadable wheel: {shown(str(exc))[:300]}",), (), ())
    shown_libraries = f" ({len(report.libraries)} native libraries)" if report.libraries else ""
    say(f"inspect {shown(wheel.name)}: {report.status.value}{shown_libraries}")
    return report


def _inspect_readable(wheel: Path, target: Target, cuobjdump: Cuobjdump | None) -> WheelReport:
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
    if target.platform and meta.platform_tag != "any" and not meta.platform_tag.endswith(target.platform):
        problems.append(f"built for {meta.platform_tag}, the profile runs {target.platform}")
    with zipfile.ZipFile(wheel) as opened:
        problems.extend(elf_problems(opened, meta.platform_tag))
    notes, torch_problems = _torch_requirement(meta.requires, target)
    problems.extend(torch_problems)
    libraries: tuple[LibraryFinding, ...] = ()
    if target.gpu and cuobjdump is not None:
        libraries = _libraries(wheel, target, cuobjdump)
        problems.extend(f"{lib.member}: {lib.reason}" for lib in libraries if lib.status == "refused")
        notes.extend(f"{lib.member}: {lib.reason}" for lib in libraries if lib.status == "flagged")
    status = Status.FAIL if problems else Status.PASS
    return WheelReport(wheel.name, meta.name, meta.version, status, tuple(problems), tuple(notes), libraries)


def _torch_requirement(requires: Sequence[str], target: Target) -> tuple[list[str], list[str]]:
    """(notes, problems) of the wheel's torch requirement against the profile's pinned torch."""
    notes: list[str] = []
    problems: list[str] = []
    pinned = Version(target.torch_version)
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
        elif not requirement.specifier.contains(pinned, prereleases=True):
            problems.append(f"requires {requirement}, which the pinned torch {pinned} does not satisfy")
        else:
            notes.append(f"requires {requirement}: the pinned torch {pinned} satisfies it")
    if not torch:
        notes.append(f"no torch requirement (built with the existing torch); the lock pins torch {pinned}")
    return notes, problems


def _libraries(wheel: Path, target: Target, cuobjdump: Cuobjdump) -> tuple[LibraryFinding, ...]:
    """Each native library extracted on its own, inventoried and removed, so the disk holds one at a time."""
    findings = []
    with tempfile.TemporaryDirectory(prefix="inspect-") as scratch:
        for member in native_members(wheel):
            try:
                with extracted_member(wheel, member, Path(scratch)) as path:
                    inventory = cuobjdump.inventory(path)
            except EngineError as exc:  # a corrupt ELF: the member is refused, the run goes on
                reason = str(exc).split(": ", 1)[-1][:300]
                findings.append(LibraryFinding(shown(member), (), (), "refused", f"cuobjdump cannot read it: {reason}"))
                continue
            if (finding := judge_library(shown(member), inventory, target)) is not None:
                findings.append(finding)
    return tuple(findings)


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

    def finding(status: Verdict, reason: str) -> LibraryFinding:
        return LibraryFinding(member, cubins, shown_ptx, status, reason)

    matching = [arch for arch in cubins if arch in target.accepted_cubins]
    if matching:
        extra = f"; unused PTX newer than the driver's CUDA {driver}: {too_new_text}" if too_new else ""
        return finding("ok", f"cubins for {', '.join(matching)}{extra}")
    usable = [p for p in ptx if target.arch and ptx_runs_on(p.arch, target.arch) and p not in too_new]
    has = ", ".join(cubins) or "none"
    if usable:
        return finding(
            "flagged",
            f"PTX only for {target.arch} ({', '.join(p.arch for p in usable)}): JIT-compiled at first load; "
            f"cubins: {has}",
        )
    if too_new and any(target.arch and ptx_runs_on(p.arch, target.arch) for p in too_new):
        return finding(
            "refused",
            f"no cubin for {target.arch}, and its PTX is newer than the driver's CUDA {driver}: {too_new_text}",
        )
    return finding(
        "refused", f"no image for {target.arch}: cubins {has}" + (f", PTX {', '.join(shown_ptx)}" if ptx else "")
    )


def ptx_runs_on(ptx_arch: str, target: str) -> bool:
    """Whether the driver can JIT this PTX for the target: plain PTX for any newer GPU, family PTX within its
    major version, arch-specific ('a') PTX for that exact architecture only."""
    ptx_number, ptx_suffix = _split(ptx_arch)
    target_number, _ = _split(target)
    if ptx_suffix == "a":
        return ptx_number == target_number
    if ptx_suffix == "f":
        return ptx_number // 10 == target_number // 10 and ptx_number <= target_number
    return ptx_number <= target_number


def _split(arch: str) -> tuple[int, str]:
    match = re.fullmatch(r"(?:sm|compute)_(\d+)([af]?)", arch)
    if not match:
        raise ValueError(f"not a GPU architecture: {arch!r}")
    return int(match[1]), match[2]


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
