"""A wheelhouse: every file a night installs, fetched once on a machine with the network, kept with its sha256 in
one folder with an index, so that a night without the network installs from it alone.

Each set is one runtime's requirements resolved for the target's Python, less what the target's base environment
already provides: the resolver sees the base's distributions (as metadata only), so it reports just what must be
installed over the base. For this machine's own platform pip resolves in a scratch venv of the target's Python; for a
named target (another Python or platform, a Spark's aarch64 from an x86-64 host) uv resolves, evaluating every
marker for the target, and pip downloads the target's wheels alone: a package with no wheel for the target is named,
never built here for the wrong platform.

    DIR/wheelhouse.json   the index: sets, their locked files, the base they were resolved over, the total size
    DIR/files/            the files themselves
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from packaging.version import InvalidVersion, Version

from pipeline.errors import EngineError, ProcessError, UsageError
from pipeline.infra import procs
from pipeline.infra.base_env import BaseEnv, normalize, python_version
from pipeline.infra.files import sha256_of, write_atomically
from pipeline.infra.runtime import LockedFile, parse_filename
from pipeline.infra.wheel_target import Target
from pipeline.progress import Say, quiet

INDEX = "wheelhouse.json"
FILES = "files"
WHEELHOUSE_FORMAT = 1
_PIP_TIMEOUT_S = 3600.0
# The projects whose base version a runtime must keep: a candidate that needs another torch does not run on this base.
KEPT_FROM_BASE = ("torch",)


@dataclass(frozen=True)
class WheelSet:
    """One runtime's requirements: `tool` sets take what the base provides whatever its version (a converter needs a
    torch, not a pin of it); a candidate's pins must hold on the base as they are."""

    name: str
    requirements: tuple[str, ...]
    remove: tuple[str, ...] = ()
    no_deps: bool = False  # a package fetched for its files (package weights), never installed
    tool: bool = False

    def over(self, base: BaseEnv | None) -> tuple[str, ...]:
        """The requirements as resolved over a base: a tool's pins of what the base holds are loosened to its name."""
        if base is None or not self.tool:
            return self.requirements
        return tuple(_project(r) if base.provides(_project(r)) else r for r in self.requirements)

    def key(self, base: BaseEnv | None) -> str:
        """What identifies the set's files: its requirements, removals and the base it was resolved over."""
        fields = {
            "requirements": sorted(self.requirements),
            "remove": sorted(self.remove),
            "no_deps": self.no_deps,
            "base": base.listing_sha256 if base and not self.no_deps else None,  # a package's files are no base's
        }
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Wheelhouse:
    """A wheelhouse folder read from its index."""

    root: Path
    index: Mapping[str, Any]

    @property
    def files(self) -> Path:
        return self.root / FILES

    @property
    def target(self) -> Target | None:
        """The runner it was made for (None for an index older than targets: its Python alone is known)."""
        found = self.index.get("target")
        return Target(found["python"], found["platform"]) if found else None

    def refuses(self, runner: Target) -> str | None:
        """Why this wheelhouse cannot install on `runner`, naming both; None where it can."""
        target = self.target
        if target is None:
            python = self.index.get("python")
            if python and python != runner.python:
                return f"the wheelhouse {self.root} holds wheels for Python {python}, the runner's is {runner.python}"
            return None
        why = target.refuses(runner)
        if why is None:
            return None
        return (
            f"the wheelhouse {self.root} was made for {target.describe()}, this runner is {runner.describe()}: {why}; "
            f"make one for it with `spark-nightly wheelhouse ... --target-python {runner.python} "
            f"--target-platform {runner.platform}`"
        )

    def locked(self, wheel_set: WheelSet, base: BaseEnv | None) -> tuple[LockedFile, ...] | None:
        """The set's locked files, or None when the wheelhouse was not made for it (or over another base)."""
        found = self.index["sets"].get(wheel_set.key(base))
        return None if found is None else tuple(LockedFile(**f) for f in found["files"])

    def problems(self, files: Iterable[LockedFile]) -> list[str]:
        """Each file that is missing or whose sha256 changed, named."""
        found = []
        for f in files:
            path = self.files / f.filename
            if not path.is_file():
                found.append(f"{f.filename} is missing")
            elif sha256_of(path) != f.sha256:
                found.append(f"{f.filename} is damaged (sha256 {sha256_of(path)[:12]}, the index says {f.sha256[:12]})")
        return found

    def copy_set(self, wheel_set: WheelSet, base: BaseEnv | None, dest: Path) -> tuple[LockedFile, ...]:
        """The set's files copied into `dest`, every one checked; an error naming what is missing or damaged."""
        files = self.require(wheel_set, base)
        dest.mkdir(parents=True, exist_ok=True)
        for f in files:
            shutil.copy2(self.files / f.filename, dest / f.filename)
        return files

    def require(self, wheel_set: WheelSet, base: BaseEnv | None) -> tuple[LockedFile, ...]:
        files = self.locked(wheel_set, base)
        over = f" over {base.describe()}" if base else ""
        if files is None:
            raise EngineError(f"the wheelhouse {self.root} has no set for {wheel_set.name}{over}: {_refetch(self)}")
        if problems := self.problems(files):
            raise EngineError(
                f"the wheelhouse {self.root}, set {wheel_set.name}: {'; '.join(problems)}: {_refetch(self)}"
            )
        return files


def _refetch(wheelhouse: Wheelhouse) -> str:
    return (
        f"fetch it on a machine with the network with `{wheelhouse.index.get('command', 'spark-nightly wheelhouse')}`"
    )


def _project(requirement: str) -> str:
    for stop in "<>=!~[; @":
        requirement = requirement.split(stop, maxsplit=1)[0]
    return requirement.strip()


def open_wheelhouse(root: Path) -> Wheelhouse:
    """The wheelhouse at `root`; a usage error naming the folder when it has no readable index."""
    try:
        index = json.loads((root / INDEX).read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"{root / INDEX}: no wheelhouse index ({exc}); make one with `spark-nightly wheelhouse`"
        ) from None
    if index.get("version") != WHEELHOUSE_FORMAT:
        raise UsageError(f"{root / INDEX}: wheelhouse format {index.get('version')}, expected {WHEELHOUSE_FORMAT}")
    return Wheelhouse(root, index)


def make_wheelhouse(  # noqa: PLR0913 -- what to fetch, for which Python and base, where, and what to strip
    sets: Sequence[WheelSet],
    dest: Path,
    *,
    resolver_python: str,
    base: BaseEnv | None,
    command: str,
    log_dir: Path,
    index_urls: Sequence[str] = (),
    strip: Sequence[str] = (),
    target: Target | None = None,
    say: Say = quiet,
) -> Wheelhouse:
    """Resolve and fetch every set into `dest`; files already there with their sha256 are kept (a second run fetches
    nothing), a damaged one is named and fetched again. `strip`: members (globs inside wheels, such as a library the
    runner's GPU never loads) taken out of the fetched wheels, each recorded with the wheel's original sha256.
    `target`: a runner unlike this machine (resolved by uv for it, no interpreter of its Python needed); else this
    machine's platform and `resolver_python`'s version. The index is written last."""
    files_dir = dest / FILES
    files_dir.mkdir(parents=True, exist_ok=True)
    earlier = _earlier_index(dest)
    previous = {f["filename"]: f["sha256"] for s in earlier.get("sets", {}).values() for f in s["files"]}
    previous_stripped: dict[str, Any] = dict(earlier.get("stripped", {}))
    stripped: dict[str, Any] = {}
    index_sets: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="wheelhouse-") as scratch_dir:
        scratch = Path(scratch_dir)
        resolver: Path | None = None
        if target is not None:
            _check_base_version(base, target.python, f"--target-python {target.python}")
        else:
            resolver = _resolver(resolver_python, base, scratch, log_dir)
            target = Target.here(base.version if base else python_version(str(resolver)))
        kept = _previous_files(earlier, target)
        index_sets.update(_other_sets(earlier, dest, target, base, sets))
        for wheel_set in sets:
            dropped = {normalize(n) for n in wheel_set.remove}
            if resolver is None:
                wanted = _resolve_for(target, wheel_set, base, scratch, log_dir, index_urls)
                pins = _fetch_for(
                    target, [w for w in wanted if w[0] not in dropped], files_dir, kept, log_dir, index_urls, say=say
                )
            else:
                pins = [
                    p
                    for p in _resolve(resolver, wheel_set, base, scratch, log_dir, index_urls)
                    if p.name not in dropped
                ]
                _fetch(resolver, pins, files_dir, previous, log_dir, index_urls, say=say)
            stripped.update(_strip(pins, files_dir, strip, previous_stripped, say=say))
            locked = _lock(pins, files_dir)
            index_sets[wheel_set.key(base)] = {
                "name": wheel_set.name,
                "requirements": list(wheel_set.requirements),
                "remove": list(wheel_set.remove),
                "files": [asdict(f) for f in locked],
            }
            size = sum((files_dir / f.filename).stat().st_size for f in locked)
            say(f"wheelhouse: {wheel_set.name}: {len(locked)} files, {size / 2**20:.0f} MiB")
    used = {f["filename"] for s in index_sets.values() for f in s["files"]}
    for unused in sorted(set(p.name for p in files_dir.iterdir()) - used):  # left by an earlier set or a failed run
        (files_dir / unused).unlink()
    total = sum((files_dir / name).stat().st_size for name in used)
    stripped = {name: found for name, found in (previous_stripped | stripped).items() if name in used}
    index = {
        "version": WHEELHOUSE_FORMAT,
        "command": command,
        "python": target.python,
        "target": target.to_json(),
        "base": base.to_json() if base else None,
        "sets": index_sets,
        "stripped": stripped,
        "total_bytes": total,
    }
    write_atomically(dest / INDEX, json.dumps(index, indent=2, sort_keys=True) + "\n")
    say(f"wheelhouse: {dest}: {len(used)} files, {total / 2**20:.0f} MiB in all")
    return Wheelhouse(dest, index)


@dataclass(frozen=True)
class _Pin:
    name: str
    version: str
    filename: str
    sha256: str | None  # what the index said, when it said it


def _earlier_index(dest: Path) -> dict[str, Any]:
    """The index an earlier run left in `dest` (empty where there is none, or it cannot be read)."""
    try:
        index: dict[str, Any] = json.loads((dest / INDEX).read_text())
    except (OSError, ValueError):
        return {}
    return index


def _strip(
    pins: Sequence[_Pin], files_dir: Path, globs: Sequence[str], previous: Mapping[str, Any], *, say: Say
) -> dict[str, Any]:
    """Take the members matching `globs` out of each wheel (its RECORD too); what was taken and from which file."""
    done: dict[str, Any] = {}
    for pin in pins:
        path = files_dir / pin.filename
        if not globs or not path.name.endswith(".whl"):
            continue
        if pin.filename in previous and sha256_of(path) == previous[pin.filename]["sha256"]:
            done[pin.filename] = previous[pin.filename]  # stripped on an earlier run
            continue
        original = sha256_of(path)
        with zipfile.ZipFile(path) as wheel:
            members = [m for m in wheel.namelist() if any(fnmatch.fnmatch(m, g) for g in globs)]
            if not members:
                continue
            slim = path.with_name(path.name + ".partial")
            with zipfile.ZipFile(slim, "w", zipfile.ZIP_DEFLATED) as out:
                for info in wheel.infolist():
                    if info.filename in members:
                        continue
                    data = wheel.read(info)
                    if info.filename.endswith(".dist-info/RECORD"):
                        kept = [line for line in data.decode().splitlines() if line.split(",")[0] not in members]
                        data = ("\n".join(kept) + "\n").encode()
                    out.writestr(info, data)
        slim.replace(path)
        done[pin.filename] = {"members": members, "original_sha256": original, "sha256": sha256_of(path)}
        say(f"wheelhouse: {pin.filename}: stripped {', '.join(members)}")
    return done


def _resolver(python: str, base: BaseEnv | None, scratch: Path, log_dir: Path) -> Path:
    """A scratch venv of the target's Python where the base's distributions exist as metadata alone."""
    venv = scratch / "resolver"
    procs.run([python, "-m", "venv", str(venv)], log_dir / "wheelhouse-venv.log", timeout_s=300)
    resolver = venv / "bin" / "python"
    if base is not None:
        _check_base_version(base, python_version(str(resolver)), python)
        (site,) = venv.glob("lib/python*/site-packages")
        _as_installed(base, site, skip={normalize(p.name.split("-")[0]) for p in site.glob("*.dist-info")})
    return resolver


def _check_base_version(base: BaseEnv | None, version: str, given: str) -> None:
    if base is not None and version != base.version:
        raise UsageError(
            f"{given} is Python {version}, the base is {base.version}: give --target-python {base.version}"
        )


def _as_installed(base: BaseEnv, site: Path, skip: Iterable[str] = ()) -> None:
    """The base's distributions written into `site` as metadata alone, so a resolver counts them installed."""
    skip = set(skip)
    for name, version in base.packages.items():
        if name not in skip:
            info = site / f"{name.replace('-', '_')}-{version}.dist-info"
            info.mkdir()
            (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
            (info / "RECORD").write_text("")


def _previous_files(index: Mapping[str, Any], target: Target) -> dict[tuple[str, str], tuple[str, str]]:
    """(name, version) -> (file name, sha256) of the files an earlier run made for the same target."""
    if index.get("target") != target.to_json():
        return {}
    return {
        _key(f["name"], f["version"]): (f["filename"], f["sha256"])
        for s in index.get("sets", {}).values()
        for f in s["files"]
    }


def _key(name: str, version: str) -> tuple[str, str]:
    """A distribution as two spellings of it compare equal (uv prints versions normalised, files may not be)."""
    try:
        return normalize(name), str(Version(version))
    except InvalidVersion:
        return normalize(name), version


def _other_sets(
    index: Mapping[str, Any], dest: Path, target: Target, base: BaseEnv | None, sets: Sequence[WheelSet]
) -> dict[str, Any]:
    """The sets an earlier run made for the same runner (target and base) that this run does not remake: kept with
    their files, so one wheelhouse serves several profiles of one runner (`gpu` and `gpu-built`)."""
    same_base = (index.get("base") or {}).get("listing_sha256") == (base.listing_sha256 if base else None)
    if index.get("target") != target.to_json() or not same_base:
        return {}
    remade = {wheel_set.key(base) for wheel_set in sets}
    return {
        key: found
        for key, found in index.get("sets", {}).items()
        if key not in remade and all((dest / FILES / f["filename"]).is_file() for f in found["files"])
    }


# uv's plan, one line a distribution: " + name==version" (installed) or " - name==version" (removed)
_PLANNED = re.compile(r"^ (?P<sign>[+-]) (?P<name>[A-Za-z0-9._-]+)==(?P<version>\S+)$", re.MULTILINE)


def _uv() -> str:
    from uv import find_uv_bin  # noqa: PLC0415 -- only a wheelhouse for another target needs it

    return str(find_uv_bin())


def _resolve_for(
    target: Target,
    wheel_set: WheelSet,
    base: BaseEnv | None,
    scratch: Path,
    log_dir: Path,
    index_urls: Sequence[str],
) -> list[tuple[str, str]]:
    """(name, version) of what the target must install for the set over the base, resolved by uv for the target's
    Python and platform (its markers too) with wheels alone; a set that needs a package with no wheel for the target,
    or that would replace the base's torch, is refused, naming it."""
    site = scratch / f"target-{wheel_set.name}"
    site.mkdir()
    if base is not None and not wheel_set.no_deps:
        _as_installed(base, site)
    argv = [_uv(), "pip", "install", "--dry-run", "--target", str(site), "--python", sys.executable]
    argv += ["--python-version", target.python, "--python-platform", target.uv_platform(), "--only-binary", ":all:"]
    argv += ["--index-strategy", "unsafe-best-match"]  # the best version across indexes, as pip chooses
    argv += [arg for url in index_urls for arg in ("--extra-index-url", url)]
    argv += ["--no-deps"] if wheel_set.no_deps else []
    log = log_dir / f"wheelhouse-resolve-{wheel_set.name}.log"
    start = log.stat().st_size if log.exists() else 0  # a log is appended to: read this run's part alone
    try:
        procs.run([*argv, *wheel_set.over(base)], log, timeout_s=_PIP_TIMEOUT_S)
    except ProcessError:
        said = log.read_bytes()[start:].decode(errors="replace")
        raise EngineError(f"{wheel_set.name} cannot be made for {target.describe()}: {_no_solution(said)}") from None
    said = log.read_bytes()[start:].decode(errors="replace")
    planned = [(m["sign"], normalize(m["name"]), m["version"]) for m in _PLANNED.finditer(said)]
    if base is not None and not wheel_set.tool:
        for sign, name, version in planned:
            kept = base.provides(name)
            if sign == "+" and name in KEPT_FROM_BASE and kept is not None:
                raise EngineError(
                    f"{wheel_set.name} for {target.describe()} needs {name} {version}, {base.describe()} has "
                    f"{name} {kept}: this candidate does not run on this base"
                )
    return [(name, version) for sign, name, version in planned if sign == "+"]


def _no_solution(log: str) -> str:
    """uv's reason, in one line: which package has no wheel for the target, or what conflicts."""
    lines = [line.strip(" ╰─▶×") for line in log.splitlines()]
    reason = [line for line in lines if line and not line.startswith(("$", "Using ", "hint:", "Resolved"))]
    because = [i for i, line in enumerate(reason) if "Because" in line]
    reason = reason[because[0] :] if because else reason
    text = " ".join(reason).replace("cause: ", "")
    return text[-1200:] or "uv found no solution (see its log)"


def _fetch_for(
    target: Target,
    wanted: Sequence[tuple[str, str]],
    files_dir: Path,
    kept: Mapping[tuple[str, str], tuple[str, str]],
    log_dir: Path,
    index_urls: Sequence[str],
    *,
    say: Say,
) -> list[_Pin]:
    """The target's wheel of each (name, version): kept from an earlier run where intact, else downloaded by pip for
    the target's tags alone (never an sdist, never this machine's)."""
    pins = []
    missing = []
    for name, version in wanted:
        filename, sha256 = kept.get(_key(name, version), ("", ""))
        path = files_dir / filename
        if filename and path.is_file() and sha256_of(path) == sha256:
            pins.append(_Pin(name, version, filename, sha256))
        else:
            missing.append((name, version))
    if not missing:
        return pins
    say(f"wheelhouse: fetching {len(missing)} files for {target.describe()}")
    with tempfile.TemporaryDirectory(prefix="fetch-", dir=files_dir.parent) as fetched_dir:
        fetched = Path(fetched_dir)
        argv = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
        argv += ["--python-version", target.python, "--implementation", "cp"]
        argv += [arg for abi in (target.abi, "abi3", "none") for arg in ("--abi", abi)]
        argv += [arg for tag in target.platform_tags() for arg in ("--platform", tag)]
        argv += [arg for url in index_urls for arg in ("--extra-index-url", url)]
        argv += ["--dest", str(fetched), *(f"{name}=={version}" for name, version in missing)]
        procs.run(argv, log_dir / "wheelhouse-download.log", timeout_s=_PIP_TIMEOUT_S, inactivity_s=900)
        by_key = {_key(*parse_filename(path.name)): path for path in fetched.iterdir()}
        for name, version in missing:
            found = by_key.get(_key(name, version))
            if found is None:
                raise EngineError(f"pip fetched no wheel of {name} {version} for {target.describe()}")
            found.replace(files_dir / found.name)
            pins.append(_Pin(name, version, found.name, None))
    return pins


def _resolve(
    resolver: Path, wheel_set: WheelSet, base: BaseEnv | None, scratch: Path, log_dir: Path, index_urls: Sequence[str]
) -> list[_Pin]:
    """What pip would install for the set over the base, as exact files; a candidate that would replace the base's
    torch is refused, naming both."""
    report = scratch / f"{wheel_set.name}.json"
    argv = [str(resolver), "-m", "pip", "install", "--dry-run", "--quiet", "--prefer-binary", "--report", str(report)]
    argv += [arg for url in index_urls for arg in ("--extra-index-url", url)]
    argv += ["--no-deps"] if wheel_set.no_deps else []
    if wheel_set.no_deps or base is None:
        argv.append("--ignore-installed")
    procs.run(
        [*argv, *wheel_set.over(base)], log_dir / f"wheelhouse-resolve-{wheel_set.name}.log", timeout_s=_PIP_TIMEOUT_S
    )
    items = json.loads(report.read_text())["install"]
    pins = []
    for item in items:
        name, version = normalize(item["metadata"]["name"]), item["metadata"]["version"]
        info = item["download_info"]
        if "archive_info" not in info:
            raise EngineError(
                f"{wheel_set.name}: {name} {version} resolves to {info['url']}, not a file a wheelhouse keeps"
            )
        pins.append(
            _Pin(
                name,
                version,
                unquote(info["url"].rsplit("/", 1)[-1]),
                info["archive_info"].get("hashes", {}).get("sha256"),
            )
        )
    if base is not None and not wheel_set.tool:
        _refuse_replacing_base(wheel_set, base, pins, items)
    return pins


def _refuse_replacing_base(wheel_set: WheelSet, base: BaseEnv, pins: list[_Pin], items: list[dict[str, Any]]) -> None:
    for pin in pins:
        kept = base.provides(pin.name)
        if pin.name in KEPT_FROM_BASE and kept is not None:
            needers = [
                f"{i['metadata']['name']} {i['metadata']['version']} requires {r.split(';')[0].strip()}"
                for i in items
                for r in i["metadata"].get("requires_dist", [])
                if normalize(_project(r)) == pin.name and "extra ==" not in r
            ]
            why = "; ".join(needers) or f"{wheel_set.name} requires {pin.name} {pin.version}"
            raise EngineError(
                f"{why}, {base.describe()} has {pin.name} {kept}: this candidate does not run on this base"
            )


def _fetch(
    resolver: Path,
    pins: Sequence[_Pin],
    files_dir: Path,
    previous: Mapping[str, str],
    log_dir: Path,
    index_urls: Sequence[str],
    *,
    say: Say,
) -> None:
    wanted = []
    for pin in pins:
        path = files_dir / pin.filename
        expected = {pin.sha256, previous.get(pin.filename)} - {None}  # as fetched, or as stripped before
        if path.is_file() and sha256_of(path) in expected:
            continue
        if path.is_file():
            say(f"wheelhouse: {pin.filename} is damaged, fetching it again")
            path.unlink()
        wanted.append(f"{pin.name}=={pin.version}")
    if not wanted:
        return
    say(f"wheelhouse: fetching {len(wanted)} files")
    argv = [str(resolver), "-m", "pip", "download", "--quiet", "--no-deps", "--prefer-binary", "--dest", str(files_dir)]
    argv += [arg for url in index_urls for arg in ("--extra-index-url", url)]
    procs.run([*argv, *wanted], log_dir / "wheelhouse-download.log", timeout_s=_PIP_TIMEOUT_S, inactivity_s=900)
    for pin in pins:
        path = files_dir / pin.filename
        if not path.is_file():
            raise EngineError(f"pip fetched no {pin.filename} for {pin.name} {pin.version}")
        if pin.sha256 and sha256_of(path) != pin.sha256:
            path.unlink()
            raise EngineError(f"{pin.filename}: its sha256 is not the one its index gave; removed")


def _lock(pins: Sequence[_Pin], files_dir: Path) -> tuple[LockedFile, ...]:
    locked = []
    for pin in sorted(pins, key=lambda p: p.filename):
        name, version = parse_filename(pin.filename)
        locked.append(LockedFile(name, version, pin.filename, sha256_of(files_dir / pin.filename)))
    return tuple(locked)
