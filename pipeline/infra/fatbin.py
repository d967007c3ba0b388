"""The GPU code inside native libraries: their cubins and PTX, read with NVIDIA's cuobjdump (from PyPI), for one
file or for every native member of a wheel in one pass over its archive."""

from __future__ import annotations

import os
import re
import tempfile
import time
import zipfile
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import CapturedFailure, EngineError
from pipeline.infra import procs
from pipeline.infra.supply import ensure_runtime
from pipeline.infra.wheelhouse import WheelSet
from pipeline.infra.wheels import extract_to, native_infos
from pipeline.infra.workshop import Workshop
from pipeline.progress import Say, quiet

# cuobjdump ships on PyPI from 13.2 on; any of them reads what nvcc 12.x and 13.x write (checked on 13.2-13.5).
CUOBJDUMP = ("nvidia-cuda-cuobjdump==13.4.92",)
# its runtime as a set a wheelhouse can hold: an offline runner that inspects GPU wheels installs it from there
CUOBJDUMP_SET = WheelSet("cuobjdump", CUOBJDUMP, tool=True)
_TIMEOUT_S = 300.0
_NO_DEVICE_CODE = 255  # cuobjdump's exit code for an ordinary library: "does not contain device code"
_LIST_ELF = re.compile(r"^ELF file\s+\d+: .*\.(sm_\d+[af]?)\.cubin$")
_BLOCK = re.compile(r"^Fatbin (elf|ptx) code:$")
_FIELD = re.compile(r"^(arch|code version) = (.+)$")
_PROGRESS_EVERY_S = 10.0


@dataclass(frozen=True)
class Image:
    """One entry of a fatbin: a cubin for an exact architecture, or PTX with its ISA version."""

    kind: str  # "cubin" | "ptx"
    arch: str  # "sm_121a", "sm_90", "sm_100f"
    ptx_isa: tuple[int, int] | None = None


@dataclass(frozen=True)
class Inventory:
    """Every image in one file; empty for a library without device code."""

    images: tuple[Image, ...]

    @property
    def cubin_archs(self) -> tuple[str, ...]:
        return tuple(sorted({i.arch for i in self.images if i.kind == "cubin"}, key=_arch_order))

    @property
    def ptx(self) -> tuple[Image, ...]:
        return tuple(sorted({i for i in self.images if i.kind == "ptx"}, key=lambda i: _arch_order(i.arch)))


def _arch_order(arch: str) -> tuple[int, str]:
    digits = re.sub(r"\D", "", arch)
    return (int(digits) if digits else 0, arch)


@dataclass(frozen=True)
class Cuobjdump:
    """A cuobjdump binary and how to ask it about one file."""

    binary: Path

    def inventory(self, path: Path) -> Inventory:
        if path.suffix == ".cubin":  # a bare cubin has no fatbin headers; its listing names the architecture
            out = self._run("--list-elf", path)
            return Inventory(tuple(Image("cubin", m[1]) for line in out if (m := _LIST_ELF.match(line))))
        return Inventory(tuple(_parse_headers(self._run(None, path))))

    def _run(self, option: str | None, path: Path) -> list[str]:
        argv = [str(self.binary), *([option] if option else []), str(path)]
        try:
            out = procs.capture(argv, timeout_s=_TIMEOUT_S)
        except CapturedFailure as failure:
            if failure.returncode == _NO_DEVICE_CODE:
                return []
            raise EngineError(f"cuobjdump cannot read {path.name}: {failure.stderr.strip()}") from None
        return [line.strip() for line in out.splitlines()]


def _parse_headers(lines: list[str]) -> list[Image]:
    """Parse cuobjdump's default listing: a 'Fatbin elf|ptx code:' block per entry with arch and code version."""
    images: list[Image] = []
    kind: str | None = None
    fields: dict[str, str] = {}

    def close() -> None:
        if kind and "arch" in fields:
            isa = None
            if kind == "ptx" and (m := re.match(r"\[(\d+),(\d+)\]", fields.get("code version", ""))):
                isa = (int(m[1]), int(m[2]))
            images.append(Image("cubin" if kind == "elf" else "ptx", fields["arch"], isa))

    for line in lines:
        if block := _BLOCK.match(line):
            close()
            kind, fields = block[1], {}
        elif field := _FIELD.match(line):
            fields[field[1]] = field[2].strip()
    close()
    return images


def ensure_cuobjdump(shop: Workshop, log_dir: Path) -> Cuobjdump:
    """cuobjdump from its pinned PyPI wheel, installed once into a runtime of its own (from the night's supply)."""
    runtime = ensure_runtime(CUOBJDUMP_SET, shop, log_dir)
    found = sorted(runtime.root.glob("lib/python*/site-packages/nvidia/cu*/bin/cuobjdump"))
    if not found:
        raise EngineError(f"{CUOBJDUMP[0]} installed no cuobjdump binary under {runtime.root}")
    return Cuobjdump(found[-1])


Read = Inventory | EngineError  # a member's inventory, or why cuobjdump could not read it


def inventory_wheel(
    wheel: Path, cuobjdump: Cuobjdump, *, say: Say = quiet, workers: int | None = None
) -> list[tuple[str, Read]]:
    """Every native member's inventory, in archive order, reading the archive once.

    cuobjdump reads one file per call (its usage: `cuobjdump [options] <file>`), so the calls are pipelined over the
    cores while members are extracted: a few files on disk at a time, whatever the wheel's size. A progress line
    every ten seconds says how far it is on a long wheel (FlashInfer's cubin wheel has about 16,000 members).
    """
    workers = workers or max(1, os.cpu_count() or 1)
    read: list[tuple[str, Read]] = []
    with (
        zipfile.ZipFile(wheel) as archive,
        tempfile.TemporaryDirectory(prefix="inspect-") as scratch,
        ThreadPoolExecutor(workers) as pool,
    ):
        members = native_infos(archive)
        report = _progress(say, wheel.name, len(members))
        pending: deque[tuple[str, Future[Inventory]]] = deque()
        for index, info in enumerate(members):
            path = Path(scratch) / f"member-{index}{Path(info.filename).suffix}"
            extract_to(archive, info, path)
            pending.append((info.filename, pool.submit(_inventory_and_remove, cuobjdump, path)))
            while len(pending) > 2 * workers:
                read.append(_collect(*pending.popleft()))
                report(len(read))
        while pending:
            read.append(_collect(*pending.popleft()))
    return read


def _inventory_and_remove(cuobjdump: Cuobjdump, path: Path) -> Inventory:
    try:
        return cuobjdump.inventory(path)
    finally:
        path.unlink(missing_ok=True)


def _collect(member: str, future: Future[Inventory]) -> tuple[str, Read]:
    try:
        return member, future.result()
    except EngineError as exc:  # a corrupt ELF: that member is refused, the rest goes on
        return member, exc


def _progress(say: Say, name: str, total: int) -> Callable[[int], None]:
    started = last = time.monotonic()

    def report(done: int) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= _PROGRESS_EVERY_S:
            last = now
            say(f"inspect {name}: {done:,} of {total:,} native members read ({now - started:.0f} s)")

    return report
