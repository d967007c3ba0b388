"""Which GPU images and which wheel platform tags a target can use: computed from NVIDIA's and PEP 600's rules, not
listed, so a new architecture or glibc needs no new table."""

from __future__ import annotations

import re

from pipeline.infra.wheel_target import LEGACY_MANYLINUX

_MANYLINUX = re.compile(r"manylinux_(\d+)_(\d+)_(\w+)")


def split_arch(arch: str) -> tuple[int, str]:
    """`sm_120f` -> (120, "f"); `compute_90a` -> (90, "a")."""
    match = re.fullmatch(r"(?:sm|compute)_(\d+)([af]?)", arch)
    if not match:
        raise ValueError(f"not a GPU architecture: {arch!r}")
    return int(match[1]), match[2]


def cubin_runs_on(cubin: str, target: str) -> bool:
    """Whether a cubin loads on the target GPU (CUDA's binary compatibility rules):
    a plain `sm_XY` cubin on the same major version with a minor of Y or more (sm_120 on sm_121);
    a family `sm_XYf` cubin within its family, at XY or later (sm_120f on sm_121);
    an arch-specific `sm_XYa` cubin on XY only (sm_120a does not load on sm_121)."""
    number, suffix = split_arch(cubin)
    target_number, _ = split_arch(target)
    if suffix == "a":
        return number == target_number
    return number // 10 == target_number // 10 and number <= target_number


def ptx_runs_on(ptx_arch: str, target: str) -> bool:
    """Whether the driver can JIT this PTX for the target: plain PTX for any later GPU, family PTX within its
    major version, arch-specific ('a') PTX for that exact architecture only."""
    number, suffix = split_arch(ptx_arch)
    target_number, _ = split_arch(target)
    if suffix == "a":
        return number == target_number
    if suffix == "f":
        return number // 10 == target_number // 10 and number <= target_number
    return number <= target_number


def platform_problem(tag: str, platform: str, glibc: tuple[int, int] | None) -> str | None:
    """Why a wheel's platform tag cannot install on a target `linux_<arch>` host with that glibc; None when one of
    the tag's platforms can (a compressed tag set such as `manylinux_2_17_aarch64.manylinux2014_aarch64` needs one)."""
    if tag == "any" or not platform.startswith("linux_"):
        return None if tag == "any" or tag.endswith(platform) else f"built for {tag}, the profile runs {platform}"
    arch = platform.removeprefix("linux_")
    needs = []
    for one in tag.split("."):
        if one == platform:
            return None
        needed = _manylinux_glibc(one, arch)
        if needed is None:
            continue
        if glibc is None or needed <= glibc:
            return None
        needs.append(f"{one} needs glibc {needed[0]}.{needed[1]}")
    if needs:
        return f"built for {tag}: {'; '.join(needs)}, the profile's host has glibc {glibc[0]}.{glibc[1]}"  # type: ignore[index]
    return f"built for {tag}, which does not install on {platform}"


def _manylinux_glibc(tag: str, arch: str) -> tuple[int, int] | None:
    """The glibc a manylinux tag for `arch` needs; None when the tag is for another architecture or not manylinux."""
    if match := _MANYLINUX.fullmatch(tag):
        return (int(match[1]), int(match[2])) if match[3] == arch else None
    legacy, _, tag_arch = tag.partition("_")
    return LEGACY_MANYLINUX.get(legacy) if tag_arch == arch else None
