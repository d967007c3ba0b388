"""The lock: the night's wheels and every dependency, pinned with hashes, and torch exactly the profile's build.

Tonight's wheels stand in for whatever they pin each other to: vLLM pins the FlashInfer release it was tested with
(`flashinfer-python==0.7.2.post1`), so a lock of tonight's FlashInfer `main` beside tonight's vLLM resolves only once
that pin is replaced by the wheel built tonight. Every replacement is said (the lock's notes, in the manifest).
torchvision and torchaudio, which vLLM's `use_existing_torch.py` strips with torch, are locked from torch's index.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import Version

from pipeline.errors import EngineError
from pipeline.infra import procs
from pipeline.infra.base_env import normalize
from pipeline.infra.files import write_atomically
from pipeline.infra.runtime import LockedFile, lock_directory, render_lock
from pipeline.infra.wheels import WheelMetadata, read_metadata
from pipeline.progress import Say, quiet

_TIMEOUT_S = 3600.0
# built with torch and stripped with it by use_existing_torch.py; Qwen3.5/3.6's processors need them
TORCH_COMPANIONS = ("torchvision", "torchaudio")


@dataclass(frozen=True)
class Lock:
    """The locked files (in `files_dir`), the requirements file that installs exactly them, and what was replaced."""

    files: tuple[LockedFile, ...]
    path: Path
    files_dir: Path
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Resolution:
    """What pip resolves: tonight's wheels as their files (never by name: an index may hold another file of the same
    version), except those whose pins were replaced, which are added afterwards without dependencies, their other
    requirements resolved in their place; then torch and its companions."""

    resolved: tuple[str, ...]  # the names of the wheels handed to pip as files, their requirements resolved
    requirements: tuple[str, ...]  # requirement strings beside them
    added_as_is: tuple[str, ...]  # the names of the wheels copied in without resolving their own requirements
    notes: tuple[str, ...]


def plan_resolution(metas: Sequence[WheelMetadata], *, torch_version: str, gpu: bool) -> Resolution:
    """The requirements that resolve tonight's wheels together, and a note for every pin a built wheel replaces."""
    built = {m.name: m for m in metas}
    wanted: dict[str, list[Requirement]] = {m.name: unconditional_requirements(m) for m in metas}
    notes: list[str] = []
    requirements: list[str] = []
    resolved: list[str] = []
    as_is: list[str] = []
    for meta in metas:
        replaced = [(r, note) for r in wanted[meta.name] if (note := _replaced(meta, r, built, wanted)) is not None]
        if not replaced:
            resolved.append(meta.name)
            continue
        notes.extend(note for _, note in replaced)
        as_is.append(meta.name)  # its own pins would not resolve: its other requirements are resolved instead
        gone = [r for r, _ in replaced]
        requirements.extend(str(r) for r in wanted[meta.name] if r not in gone and normalize(r.name) != "torch")
    requirements.append(f"torch=={torch_version}")
    if gpu:  # unpinned: pip takes the build that matches torch (their metadata pins it), or a wheel's own pin
        requirements.extend(TORCH_COMPANIONS)
    return Resolution(tuple(resolved), tuple(dict.fromkeys(requirements)), tuple(as_is), tuple(notes))


def unconditional_requirements(meta: WheelMetadata) -> list[Requirement]:
    """A wheel's unconditional requirements (those of extras are not installed)."""
    found = []
    for line in meta.requires:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            raise EngineError(f"{meta.name} {meta.version}: unparsable Requires-Dist {line!r}") from None
        if requirement.marker is None or "extra" not in str(requirement.marker):
            found.append(requirement)
    return found


def _replaced(
    meta: WheelMetadata,
    requirement: Requirement,
    built: Mapping[str, WheelMetadata],
    wanted: Mapping[str, Sequence[Requirement]],
) -> str | None:
    """Why this requirement gives way to tonight's wheels, or None when it stays."""
    name = normalize(requirement.name)
    if name in built and name != meta.name:
        tonight = built[name].version
        if requirement.specifier.contains(tonight, prereleases=True):
            return None
        return f"{meta.name} pins {requirement}; tonight's {name} {tonight} stands in its place"
    pinned = [s.version for s in requirement.specifier if s.operator in ("==", "===")]
    for other, needs in wanted.items():
        for need in needs:
            same = other != meta.name and normalize(need.name) == name
            if same and pinned and not need.specifier.contains(pinned[0], prereleases=True):
                return (
                    f"{meta.name} pins {requirement}, which tonight's {other} does not accept ({need}): "
                    f"{other}'s requirement decides"
                )
    return None


def lock_wheel_set(
    wheels: Sequence[Path],
    *,
    torch_version: str,
    gpu: bool,
    index_urls: Sequence[str],
    dest: Path,
    log_dir: Path,
    platforms: Sequence[str] = (),
    say: Say = quiet,
) -> Lock:
    """Resolve the wheels with the pinned torch once, keep every file with its sha256, and refuse a drifted torch.

    The tested environment, the runtime image and a user's install all install this lock with
    `--require-hashes --no-deps`: nothing is resolved again, so torch cannot turn into another build. `platforms`
    (pip's platform tags) makes the lock for the target wherever it is made; empty means this host.
    """
    files_dir = dest / "lock-files"
    shutil.rmtree(files_dir, ignore_errors=True)
    files_dir.mkdir(parents=True)
    metas = [read_metadata(w) for w in wheels]
    resolution = plan_resolution(metas, torch_version=torch_version, gpu=gpu)
    for note in resolution.notes:
        say(f"lock: {note}")
    wheel_dirs = sorted({str(w.parent) for w in wheels})
    say(f"lock: resolving {len(wheels)} wheel(s) with torch=={torch_version}")
    procs.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--only-binary=:all:",
            "--dest",
            str(files_dir),
            *(arg for tag in platforms for arg in ("--platform", tag)),
            *(arg for d in wheel_dirs for arg in ("--find-links", d)),
            *(arg for url in index_urls for arg in ("--extra-index-url", url)),
            *(str(w) for w, m in zip(wheels, metas, strict=True) if m.name in resolution.resolved),
            *resolution.requirements,
        ],
        log_dir / "lock-download.log",
        timeout_s=_TIMEOUT_S,
        inactivity_s=900,
    )
    for wheel, meta in zip(wheels, metas, strict=True):
        if meta.name in resolution.added_as_is:
            shutil.copy2(wheel, files_dir / wheel.name)
    files = lock_directory(files_dir, ())
    _check_torch(files, torch_version, gpu)
    path = dest / "lock.txt"
    write_atomically(path, render_lock(files))
    say(f"lock: {len(files)} files pinned with sha256 in {path}")
    return Lock(files, path, files_dir, resolution.notes)


def _check_torch(files: Sequence[LockedFile], torch_version: str, gpu: bool) -> None:
    torch = [f for f in files if f.name == "torch"]
    if len(torch) != 1:
        raise EngineError(f"the lock holds {len(torch)} torch builds; expected exactly torch {torch_version}")
    locked = Version(torch[0].version)
    if locked.public != Version(torch_version).public:
        raise EngineError(f"the lock resolved torch {locked}, not the pinned {torch_version}")
    if gpu and (locked.local or "").startswith("cpu"):
        raise EngineError(
            f"the lock resolved torch {locked} ({torch[0].filename}): a +cpu torch on a GPU profile; "
            "point build index_urls at the CUDA index of the pinned torch"
        )
    for companion in (f for f in files if gpu and f.name in TORCH_COMPANIONS):
        if Version(companion.version).local != locked.local:
            raise EngineError(
                f"the lock resolved {companion.name} {companion.version} beside torch {locked}: another build of "
                "torch's companion; lock them from the same index"
            )
