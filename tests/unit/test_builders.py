"""The builders follow the trees as they are (vLLM: requirements/build/cuda.txt today, requirements/build.txt before;
FlashInfer: the monolithic JIT cache or the provider split), and the lock lets tonight's wheels stand in for the
releases they pin each other to."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.errors import SparkNightlyError
from pipeline.infra.wheels import WheelMetadata
from pipeline.stages.build.builders import BUILDERS
from pipeline.stages.build.builders.base import BuildSource, Paths, Toolchain, read_requirements
from pipeline.stages.build.lock import plan_resolution

TOOLCHAIN = Toolchain(cuda_arch="12.1a", torch="torch==2.13.0", index_urls=(), max_jobs=2, mode="host", ccache_dir=None)


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_todays_layout_and_the_earlier_one_both_give_the_build_requirements(tmp_path: Path) -> None:
    today = _tree(
        tmp_path / "a", {"requirements/build/cuda.txt": "cmake>=3.26.1\nsetuptools-rust>=1.9.0\ntorch==2.14.0\n"}
    )
    before = _tree(tmp_path / "b", {"requirements/build.txt": "# build\ncmake>=3.26.1\ntorch==2.9.1\n"})
    builder = BUILDERS["vllm"]
    assert builder.build_requirements(today, TOOLCHAIN) == (
        "cmake>=3.26.1",
        "setuptools-rust>=1.9.0",
        "torch==2.13.0",
        "uv",
    )
    assert builder.build_requirements(before, TOOLCHAIN) == ("cmake>=3.26.1", "torch==2.13.0", "uv")


def test_a_tree_with_neither_layout_names_both_files(tmp_path: Path) -> None:
    with pytest.raises(SparkNightlyError, match=r"neither requirements/build/cuda.txt nor requirements/build.txt"):
        BUILDERS["vllm"].build_requirements(tmp_path, TOOLCHAIN)


def test_includes_are_followed_relative_to_the_including_file_and_a_cycle_is_named(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "requirements/common.txt": "regex  # tokenizers\n--extra-index-url https://example.invalid\nninja\n",
            "requirements/build/rocm.txt": "-r ../common.txt\ncmake\nninja\n",
            "loop/a.txt": "-r b.txt\n",
            "loop/b.txt": "-r a.txt\n",
        },
    )
    assert read_requirements(root / "requirements/build/rocm.txt") == ("regex", "ninja", "cmake")
    with pytest.raises(SparkNightlyError, match="includes itself"):
        read_requirements(root / "loop/a.txt")


def _meta(name: str, version: str, *requires: str) -> WheelMetadata:
    return WheelMetadata(name, version, name, version, "any", requires)


# Requires-Dist lines of the real vllm 0.33.0 wheel (the ones this concerns) and of a FlashInfer built from main
VLLM = _meta(
    "vllm",
    "0.34.0.dev12+g0123456",
    "torch==2.14.0",
    "flashinfer-python==0.7.2.post1",
    "apache-tvm-ffi==0.1.11",
    "regex",
)
FLASHINFER = _meta("flashinfer-python", "0.7.3.dev4+gabcdef0", "apache-tvm-ffi<0.2,>=0.1.12", "torch", "nvidia-ml-py")


def test_tonights_flashinfer_replaces_vllms_exact_pins_and_each_replacement_is_said() -> None:
    plan = plan_resolution([FLASHINFER, VLLM], torch_version="2.13.0", gpu=True)
    assert plan.notes == (
        "vllm pins flashinfer-python==0.7.2.post1; tonight's flashinfer-python 0.7.3.dev4+gabcdef0 stands in its place",
        "vllm pins apache-tvm-ffi==0.1.11, which tonight's flashinfer-python does not accept "
        "(apache-tvm-ffi<0.2,>=0.1.12): flashinfer-python's requirement decides",
    )
    assert (plan.added_as_is, plan.resolved) == (("vllm",), ("flashinfer-python",))  # tonight's file, not the index's
    assert plan.requirements == ("regex", "torch==2.13.0", "torchvision", "torchaudio")


def test_pins_that_tonights_wheels_satisfy_are_left_to_pip() -> None:
    flashinfer = _meta("flashinfer-python", "0.7.2.post1+g0123456", "apache-tvm-ffi<0.2,>=0.1.11")
    plan = plan_resolution([flashinfer, VLLM], torch_version="2.13.0", gpu=False)
    assert plan.notes == () and plan.added_as_is == ()
    assert (plan.resolved, plan.requirements) == (("flashinfer-python", "vllm"), ("torch==2.13.0",))


PYPROJECT = '[build-system]\nrequires = ["setuptools>=77"]\n'
FLASHINFER_TREE = {
    "pyproject.toml": PYPROJECT,
    "flashinfer-cubin/pyproject.toml": PYPROJECT,
    "flashinfer-jit-cache/pyproject.toml": PYPROJECT,
}
SOURCE = BuildSource("flashinfer", "git-tree:abc", "g0123456.d20261125")
PATHS = Paths("/venv/bin/python", "/venv/bin/uv", "/out")


def test_flashinfer_with_the_provider_split_builds_the_shim_and_the_architectures_provider(tmp_path: Path) -> None:
    root = _tree(tmp_path, FLASHINFER_TREE | {"flashinfer-jit-cache-provider/pyproject.toml": PYPROJECT})
    builder = BUILDERS["flashinfer"]
    assert builder.families(root, "12.1a") == (
        "flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache", "flashinfer-jit-cache-sm121a",
    )  # fmt: skip
    steps = {step.name: step for step in builder.steps(root, SOURCE, TOOLCHAIN, PATHS)}
    assert steps["flashinfer-jit-cache"].env["FLASHINFER_JIT_CACHE_WHEEL_KIND"] == "shim"
    assert steps["flashinfer-jit-cache"].env["FLASHINFER_JIT_CACHE_PROVIDER_ARCHS"] == "12.1a"
    provider = steps["flashinfer-jit-cache-provider"]
    assert provider.env["FLASHINFER_JIT_CACHE_PROVIDER_ARCH"] == "12.1a"
    assert provider.produces == "flashinfer-jit-cache-sm121a" and provider.argv[-1] == "flashinfer-jit-cache-provider"


def test_flashinfer_without_the_split_builds_the_monolithic_jit_cache(tmp_path: Path) -> None:
    root = _tree(tmp_path, FLASHINFER_TREE)
    builder = BUILDERS["flashinfer"]
    assert builder.families(root, "12.1a") == ("flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache")
    steps = builder.steps(root, SOURCE, TOOLCHAIN, PATHS)
    assert [s.name for s in steps] == ["flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache"]
    assert all("FLASHINFER_JIT_CACHE_WHEEL_KIND" not in s.env for s in steps)


def test_flashinfer_for_no_architecture_builds_its_python_alone_with_no_torch_and_no_index(tmp_path: Path) -> None:
    root = _tree(tmp_path, FLASHINFER_TREE)  # a checkout with the AOT projects: none is built without an arch
    builder = BUILDERS["flashinfer"]
    no_arch = Toolchain(cuda_arch=None, torch="torch==2.11.0", index_urls=(), max_jobs=2, mode="host", ccache_dir=None)
    assert builder.families(root, None) == builder.families(None, None) == ("flashinfer-python",)
    assert builder.kernel_families(root, None) == ()
    assert builder.build_requirements(root, no_arch) == ("setuptools>=77", "uv")
    (step,) = builder.steps(root, SOURCE, no_arch, PATHS)
    assert (step.name, step.argv[-1], step.produces) == ("flashinfer-python", ".", "flashinfer-python")
    # the build backend's own best-effort installs find no index: the locked build environment stays as locked
    assert (step.env["UV_OFFLINE"], step.env["PIP_NO_INDEX"]) == ("1", "1")
    assert "FLASHINFER_CUDA_ARCH_LIST" not in step.env
    assert builder.build_requirements(root, TOOLCHAIN)[-4:] == ("torch==2.13.0", "uv", "wheel", "ninja")
