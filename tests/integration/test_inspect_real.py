"""Inspection on real CUDA objects compiled here with nvcc, and on a real CUDA wheel from PyPI, read by cuobjdump."""

from __future__ import annotations

import platform
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.config.bundle import ConfigPaths, load_config
from pipeline.infra import procs
from pipeline.infra.fatbin import Cuobjdump, ensure_cuobjdump
from pipeline.settings import from_environment
from pipeline.stages.build.inspect import Target, inspect_wheel, inspect_wheels
from tests.shops import online
from tests.wheelfactory import make_wheel, replace_member

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
KERNEL = """
__global__ void add_one(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += 1.0f; }
extern "C" void launch(float* x, int n) { add_one<<<(n + 255) / 256, 256>>>(x, n); }
"""
OBJECTS = {  # name: nvcc -gencode arguments
    "sm121a": ["arch=compute_121a,code=sm_121a"],
    "sm90": ["arch=compute_90,code=sm_90"],
    "ptx90": ["arch=compute_90,code=compute_90"],
    "sm90_sm100f": ["arch=compute_90,code=sm_90", "arch=compute_100f,code=sm_100f"],  # datacenter images only
}
REAL_CUDA_WHEEL = "nvidia-curand==10.4.0.35"  # cuRAND of CUDA 13.0: 60 MB, cubins for sm_75 .. sm_121


def _nvcc() -> str:
    found = shutil.which("nvcc") or next(iter(Path("/usr/local/cuda/bin").glob("nvcc")), None)
    if found is None:
        pytest.fail("nvcc (CUDA 13.0) is needed to compile the test objects: install the CUDA toolkit's nvcc")
    return str(found)


@pytest.fixture(scope="module")
def objects(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three shared objects from one kernel: an sm_121a cubin, sm_90 cubins only, and compute_90 PTX only."""
    build = tmp_path_factory.mktemp("nvcc")
    (build / "kernel.cu").write_text(KERNEL)
    built = {}
    for name, codes in OBJECTS.items():
        gencode = [arg for code in codes for arg in ("-gencode", code)]
        output = build / f"libkernel_{name}.so"
        procs.run(
            [_nvcc(), "-shared", "-Xcompiler", "-fPIC", *gencode, str(build / "kernel.cu"), "-o", str(output)],
            build / f"nvcc-{name}.log",
            timeout_s=300,
        )
        built[name] = output
    return built


@pytest.fixture(scope="module")
def cuobjdump(tmp_path_factory: pytest.TempPathFactory) -> Cuobjdump:
    cache_dir = from_environment().settings.places.cache
    return ensure_cuobjdump(online(cache_dir), tmp_path_factory.mktemp("cuobjdump-logs"))


# nvcc here compiles the host code for this machine: the wheels carry this machine's platform tag, and the Spark's
# target is judged on their device code (the ELF machine of a library must match the wheel's tag)
HOST_PLATFORM = f"linux_{platform.machine()}"


@pytest.fixture(scope="module")
def spark() -> Target:
    config = load_config(ConfigPaths(ROOT / "models.yaml", ROOT / "thresholds", ROOT / "golden"))
    return replace(Target.of(config.matrix.profiles["spark"]), platform=HOST_PLATFORM)


def _kernel_wheel(
    tmp_path: Path, so: Path, *, requires: tuple[str, ...] = ("torch==2.13.0",), member: str | None = None
) -> Path:
    files = {member or f"_C{so.stem}.so": so.read_bytes()}
    return make_wheel(tmp_path, "vllm", "0.27.2.dev1+g0123456", files, requires=requires, platform=HOST_PLATFORM)


def test_a_wheel_with_an_sm_121a_cubin_is_accepted(
    objects: dict[str, Path], cuobjdump: Cuobjdump, spark: Target, tmp_path: Path
) -> None:
    report = inspect_wheel(_kernel_wheel(tmp_path, objects["sm121a"]), spark, cuobjdump)
    assert report.status.value == "PASS", report.problems
    (library,) = report.libraries
    assert (library.status, library.cubins, library.reason) == ("ok", ("sm_121a",), "cubins for sm_121a")


def test_a_wheel_with_only_sm_90_cubins_is_refused_naming_the_missing_architecture(
    objects: dict[str, Path], cuobjdump: Cuobjdump, spark: Target, tmp_path: Path
) -> None:
    report = inspect_wheel(_kernel_wheel(tmp_path, objects["sm90"]), spark, cuobjdump)
    assert report.status.value == "FAIL"
    assert report.problems == ("vllm/_Clibkernel_sm90.so: no image for sm_121a: cubins sm_90",)


def test_vllms_own_kernels_with_only_datacenter_images_are_refused_whatever_is_absent_by_design(
    objects: dict[str, Path], cuobjdump: Cuobjdump, spark: Target, tmp_path: Path
) -> None:
    assert spark.absent_by_design  # the shipped profile's list, which names FlashMLA, FA3 and others, not _C
    wheel = _kernel_wheel(tmp_path, objects["sm90_sm100f"], member="_C.abi3.so")
    report = inspect_wheel(wheel, spark, cuobjdump)
    assert report.status.value == "FAIL"
    assert report.problems == ("vllm/_C.abi3.so: no image for sm_121a: cubins sm_90, sm_100f",)


def test_a_ptx_only_library_is_flagged_as_jit_at_first_load(
    objects: dict[str, Path], cuobjdump: Cuobjdump, spark: Target, tmp_path: Path
) -> None:
    report = inspect_wheel(_kernel_wheel(tmp_path, objects["ptx90"]), spark, cuobjdump)
    assert report.status.value == "PASS", report.problems
    (library,) = report.libraries
    assert library.status == "flagged" and library.ptx == ("sm_90 (PTX 9.0)",)
    expected = "no cubin for sm_121a: its PTX (sm_90) is JIT-compiled at first load; cubins: none"
    assert any(expected in note for note in report.notes), report.notes


def test_ptx_newer_than_the_drivers_cuda_is_refused_when_nothing_else_serves_the_gpu(
    objects: dict[str, Path], cuobjdump: Cuobjdump, spark: Target, tmp_path: Path
) -> None:
    old_driver = replace(spark, driver_cuda=(12, 8))  # nvcc 13.0 writes PTX ISA 9.0
    report = inspect_wheel(_kernel_wheel(tmp_path, objects["ptx90"]), old_driver, cuobjdump)
    assert report.problems == (
        "vllm/_Clibkernel_ptx90.so: no cubin for sm_121a, and its PTX is newer than the driver's CUDA 12.8: "
        "sm_90 PTX 9.0 needs CUDA 13.0",
    )


def test_a_cpu_torch_requirement_a_tampered_file_and_a_doubled_family_are_each_named(
    objects: dict[str, Path], cuobjdump: Cuobjdump, spark: Target, tmp_path: Path
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    cpu_torch = _kernel_wheel(tmp_path / "a", objects["sm121a"], requires=("torch==2.13.0+cpu",))
    tampered = make_wheel(tmp_path / "b", "vllm", "0.27.3", {"ops.py": b"def op(): ...\n"}, platform=HOST_PLATFORM)
    replace_member(tampered, "ops.py", b"import os; os.system('curl evil')\n")
    report = inspect_wheels([cpu_torch, tampered], spark, cuobjdump, families=["vllm", "flashinfer-python"])
    assert report.status.value == "FAIL"
    assert report.wheels[0].problems == ("requires torch==2.13.0+cpu: a +cpu torch on a GPU profile",)
    (record,) = report.wheels[1].problems
    assert record.startswith("vllm/ops.py: RECORD hash sha256=") and "but the file hashes to sha256=" in record
    assert report.problems == (
        "2 wheels of vllm: exactly one per family is installable",
        "no wheel of flashinfer-python",
    )


def test_a_real_cuda_wheel_from_pypi_reports_the_architectures_it_carries(
    cuobjdump: Cuobjdump, spark: Target, tmp_path: Path
) -> None:
    cache = from_environment().settings.places.cache / "test-wheels"
    if not list(cache.glob("nvidia_curand-10.4.0.35-*.whl")):
        procs.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--dest", str(cache), REAL_CUDA_WHEEL],
            tmp_path / "download.log",
            timeout_s=900,
        )
    (wheel,) = cache.glob("nvidia_curand-10.4.0.35-*.whl")
    any_platform = replace(spark, platform=None)  # the x86-64 build of the same library, read here
    report = inspect_wheel(wheel, any_platform, cuobjdump)
    (library,) = [lib for lib in report.libraries if "libcurand.so" in lib.member]
    print(f"\n{wheel.name}: {library.member}: cubins {', '.join(library.cubins)}; PTX {', '.join(library.ptx)}")
    assert {"sm_90", "sm_100", "sm_120", "sm_121"} <= set(library.cubins)
    assert library.status == "ok" and library.reason == "cubins for sm_120, sm_121"
    assert set(library.ptx) == {"sm_121 (PTX 9.0)"}
    assert report.status.value == "PASS", report.problems
