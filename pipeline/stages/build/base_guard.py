"""Whether a native base can carry tonight's Python on this profile, from the evidence a real base carries.

vLLM's PyPI CUDA wheels pin plain `torch==X` (no `+cuNNN` label), so the CUDA a base was built for is read from what
its natives link (`libcudart.so.N`) and from its `nvidia-*-cuNN` requirements, and its requirements' markers are
evaluated for the profile's target (packaging), never matched by substring. A base is refused, naming both sides,
when its torch is another than the profile's or cannot be told (no exact pin), when it was built for another CUDA,
for ROCm, for a GPU on a CPU profile or the CPU on a GPU profile, for another OS or architecture (Linux platform
tags of the profile's arch only), or for a Python the runtime's interpreter is not.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement

from pipeline.config.matrix import Profile
from pipeline.errors import ExitCode, SparkNightlyError
from pipeline.infra.elf import NotElf, needed_libraries
from pipeline.infra.wheels import read_metadata

_LINUX_TAG = re.compile(r"^(?:manylinux_\d+_\d+|manylinux\d+|musllinux_\d+_\d+|linux)_(?P<arch>.+)$")
_CUDART = re.compile(r"^libcudart\.so\.(?P<major>\d+)")
_ROCM = re.compile(r"^lib(?:amdhip64|hiprtc|rocblas|MIOpen)\.so")
_NVIDIA_CU = re.compile(r"^nvidia-[a-z0-9-]+-cu(?P<major>\d+)$")
_NATIVE = re.compile(r"\.so(\.\d+)*$")


class BaseRefused(SparkNightlyError):
    """A native base that cannot carry tonight's tree: another torch, CUDA, Python or arch, or another history. The
    base is the profile's configuration (or the runner's cache), never tonight's wheels."""

    exit_code = ExitCode.USAGE


@dataclass(frozen=True)
class Target:
    """What the runtime is: its machine, its Python, and what the profile runs on."""

    machine: str  # "x86_64", "aarch64"
    python: tuple[int, int]

    def environment(self) -> dict[str, str]:
        """The marker environment of the target, not of the harness's host."""
        env: dict[str, str] = {key: str(value) for key, value in default_environment().items()}
        version = f"{self.python[0]}.{self.python[1]}"
        env.update(
            platform_machine=self.machine,
            sys_platform="linux",
            platform_system="Linux",
            os_name="posix",
            python_version=version,
            python_full_version=f"{version}.0",
            implementation_name="cpython",
            platform_python_implementation="CPython",
        )
        return env


def check_compatible(wheel: Path, profile: Profile, target: Target) -> None:
    """Refuses a base built for another torch, CUDA, Python, OS or arch than the profile's, naming both."""
    meta = read_metadata(wheel)
    requires = _applying(meta.requires, target)
    problems = [
        *_torch_problems(requires, profile),
        *_accelerator_problems(_linked(wheel), requires, profile),
        *_platform_problems(meta.platform_tag, target.machine),
        *_python_problems(wheel.name, target.python),
    ]
    if problems:
        raise BaseRefused(f"the native base {wheel.name} was built for {'; '.join(problems)}")


def _applying(lines: Iterable[str], target: Target) -> list[Requirement]:
    """The requirements whose markers hold on the target (no extra asked)."""
    env = target.environment() | {"extra": ""}
    found = []
    for line in lines:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.marker is None or requirement.marker.evaluate(env):
            found.append(requirement)
    return found


def _torch_problems(requires: Sequence[Requirement], profile: Profile) -> list[str]:
    torch = [r for r in requires if r.name.lower() == "torch"]
    exact = [s.version for r in torch for s in r.specifier if s.operator in {"==", "==="} and "*" not in s.version]
    if len(exact) != 1:
        said = ", ".join(str(r) for r in torch) or "no torch requirement"
        return [
            f"a torch that cannot be told ({said}; the profile pins {profile.torch.version} and needs an exact pin)"
        ]
    if exact[0].partition("+")[0] != profile.torch.version:
        return [f"torch {exact[0]} (the profile pins {profile.torch.version})"]
    return []


def _linked(wheel: Path) -> list[str]:
    """Every library the wheel's natives need (DT_NEEDED), read from their headers inside the archive."""
    needed: list[str] = []
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            if _NATIVE.search(info.filename):
                with archive.open(info) as member:
                    try:
                        needed += needed_libraries(member)  # type: ignore[arg-type]
                    except NotElf:
                        continue
    return needed


def _accelerator_problems(linked: Sequence[str], requires: Sequence[Requirement], profile: Profile) -> list[str]:
    """The base's accelerator from its evidence: the torch pin's local label, the CUDA runtime its natives link, its
    nvidia-*-cuNN requirements; ROCm from the HIP libraries or a +rocm label."""
    torch = next((r for r in requires if r.name.lower() == "torch"), None)
    labels = [s.version.partition("+")[2] for s in (torch.specifier if torch else ()) if "+" in s.version]
    cuda = {int(m["major"]) for lib in linked if (m := _CUDART.match(lib))}
    cuda |= {int(m["major"]) for r in requires if (m := _NVIDIA_CU.match(r.name.lower()))}
    cuda |= {int(m[1]) // 10 for label in labels if (m := re.fullmatch(r"cu(\d+)", label))}
    rocm = any(_ROCM.match(lib) for lib in linked) or any(label.startswith("rocm") for label in labels)
    if rocm:
        runs = f"CUDA {profile.torch.cuda}" if profile.accelerator == "cuda" else "the CPU"
        return [f"ROCm (the profile runs {runs})"]
    if profile.accelerator == "cpu":
        return [f"CUDA {'/'.join(map(str, sorted(cuda)))} (the profile's: none)"] if cuda else []
    wanted = int((profile.torch.cuda or "0").split(".")[0])
    if not cuda:
        told = "a +cpu torch" if "cpu" in labels else "no CUDA runtime linked or required"
        return [f"no CUDA ({told}; the profile's: {profile.torch.cuda})"]
    if cuda != {wanted}:
        return [f"CUDA {'/'.join(map(str, sorted(cuda)))} (the profile's: {profile.torch.cuda})"]
    return []


def _platform_problems(tag: str, machine: str) -> list[str]:
    """Every tag of a compressed set must be Linux of the profile's arch: a macOS x86_64 or `any` base is none."""
    tags = tag.split(".")
    arches = [m["arch"] if (m := _LINUX_TAG.match(t)) else None for t in tags]
    if None in arches or set(arches) != {machine}:
        return [f"platform {tag} (the profile runs linux {machine})"]
    return []


def _python_problems(filename: str, python: tuple[int, int]) -> list[str]:
    python_tag, abi_tag = filename.removesuffix(".whl").split("-")[-3:-1]
    if _python_fits(python_tag, abi_tag, python):
        return []
    return [f"Python {python_tag} (the runtime's is {python[0]}.{python[1]})"]


def _python_fits(python_tag: str, abi_tag: str, python: tuple[int, int]) -> bool:
    """A pure-Python tag fits any Python 3; an abi3 module fits its Python and later ones; any other CPython module
    only its own."""
    if python_tag.startswith("py3"):
        return True
    match = re.fullmatch(r"cp(\d)(\d+)", python_tag)
    if match is None:
        return False
    built = (int(match[1]), int(match[2]))
    return python >= built if abi_tag == "abi3" else python == built
