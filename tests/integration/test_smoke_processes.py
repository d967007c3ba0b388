"""Smoke on real processes: the probe and the entry point run side by side, and neither outlives the stage."""

from __future__ import annotations

import os
import stat
import sys
import uuid
from pathlib import Path

import pytest

from pipeline.config.matrix import Profile, TorchExpectation
from pipeline.infra import procs
from pipeline.infra.runtime import Runtime
from pipeline.stages.prove.smoke import NATIVES_CHECKED, smoke

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


def test_a_native_module_that_does_not_load_fails_smoke_naming_it_and_the_build(tmp_path: Path, owner: str) -> None:
    """What an overlay on the wrong base does: vLLM's Python over a `_C` compiled against other symbols."""
    root = tmp_path / "runtime"
    runtime = _runtime(root, python_body='PYTHONPATH={site} exec {python} "$@"\n', vllm_body="echo 0.32.0\n")
    site = root / "site"
    (site / "vllm.py").unlink()
    package = site / "vllm"
    package.mkdir()
    (package / "__init__.py").write_text('__version__ = "0.32.0+gaaaaaaaaa.d20261127.base.gbbbbbbbbb"\n')
    source = tmp_path / "c.c"
    source.write_text("extern int spark_nightly_gone(void);\nint PyInit__C(void) { return spark_nightly_gone(); }\n")
    procs.run(
        ["gcc", "-shared", "-fPIC", "-o", str(package / "_C.abi3.so"), str(source)], tmp_path / "cc.log", timeout_s=60
    )
    info = site / "vllm-0.32.0+gaaaaaaaaa.d20261127.base.gbbbbbbbbb.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+gaaaaaaaaa.d20261127.base.gbbbbbbbbb\n"
    )
    (info / "RECORD").write_text(
        f"vllm/__init__.py,,\nvllm/_C.abi3.so,,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n"
    )
    report = smoke(runtime, CPU, tmp_path / "logs", entry_point_needed=True)
    assert not (root / NATIVES_CHECKED).exists()  # a failing load is never remembered: the next smoke tries again
    assert not report.passed
    assert report.reason == (
        "native modules: vllm._C does not import in vllm 0.32.0+gaaaaaaaaa.d20261127.base.gbbbbbbbbb: ImportError: "
        f"{package / '_C.abi3.so'}: undefined symbol: spark_nightly_gone"
    )
    assert procs.owned_processes(owner) == []


def test_a_runtime_whose_natives_loaded_once_is_not_loaded_again(tmp_path: Path, owner: str) -> None:
    """A runtime's files never change: what its first smoke found is what every later smoke reports."""
    root = tmp_path / "runtime"
    runtime = _runtime(root, python_body='PYTHONPATH={site} exec {python} "$@"\n', vllm_body="echo 0.32.0\n")
    (root / NATIVES_CHECKED).write_text('{"vllm._C": "ok"}\n')
    report = smoke(runtime, CPU, tmp_path / "logs", entry_point_needed=True)
    assert report.passed, report.reason
    assert report.checks[-1].detail == "1 load in fresh processes (vllm._C)"
