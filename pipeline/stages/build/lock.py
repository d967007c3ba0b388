"""The lock: the night's wheels and every dependency, pinned with hashes, and torch exactly the profile's build."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from pipeline.errors import EngineError
from pipeline.infra import procs
from pipeline.infra.runtime import LockedFile, lock_directory, render_lock, write_atomically
from pipeline.progress import Say, quiet

_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class Lock:
    """The locked files (in `files_dir`) and the requirements file that installs exactly them."""

    files: tuple[LockedFile, ...]
    path: Path
    files_dir: Path


def lock_wheel_set(
    wheels: Sequence[Path],
    *,
    torch_version: str,
    gpu: bool,
    index_urls: Sequence[str],
    dest: Path,
    log_dir: Path,
    say: Say = quiet,
) -> Lock:
    """Resolve the wheels with the pinned torch once, keep every file with its sha256, and refuse a drifted torch.

    The tested environment, the runtime image and a user's install all install this lock with
    `--require-hashes --no-deps`: nothing is resolved again, so torch cannot turn into another build.
    """
    files_dir = dest / "lock-files"
    shutil.rmtree(files_dir, ignore_errors=True)
    files_dir.mkdir(parents=True)
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
            *(arg for d in wheel_dirs for arg in ("--find-links", d)),
            *(arg for url in index_urls for arg in ("--extra-index-url", url)),
            *(str(w) for w in wheels),
            f"torch=={torch_version}",
        ],
        log_dir / "lock-download.log",
        timeout_s=_TIMEOUT_S,
        inactivity_s=900,
    )
    files = lock_directory(files_dir, ())
    _check_torch(files, torch_version, gpu)
    path = dest / "lock.txt"
    write_atomically(path, render_lock(files))
    say(f"lock: {len(files)} files pinned with sha256 in {path}")
    return Lock(files, path, files_dir)


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
