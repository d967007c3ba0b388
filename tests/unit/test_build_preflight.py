"""A build's preflight names what a Spark runner lacks, with the fix, before any minute is spent building."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.errors import BuildPreflightError
from pipeline.stages.build.builders.base import Toolchain
from pipeline.stages.build.preflight import build_checks, require

HOST = Toolchain(cuda_arch="12.1a", torch="torch==2.13.0", index_urls=(), max_jobs=4, mode="host", ccache_dir=None)


def _headers(tmp_path: Path, present: bool) -> Path:
    include = tmp_path / "include"
    include.mkdir(exist_ok=True)
    if present:
        (include / "Python.h").write_text("")
    return include


def test_a_stock_spark_is_told_each_missing_piece_and_its_fix(tmp_path: Path) -> None:
    # a stock DGX Spark: no python3-dev, no ccache, nvcc neither on PATH nor under CUDA_HOME, no cargo
    checks = build_checks(
        HOST, tmp_path, min_free_gib=0, rust=True, which=lambda _: None, environ={},
        python_include=_headers(tmp_path, present=False),
    )  # fmt: skip
    missing = {c.name: c for c in checks if not c.ok}
    assert set(missing) == {"Python headers", "nvcc", "ccache", "cargo"}
    assert "apt-get install python3-dev" in missing["Python headers"].fix
    assert "CUDA_HOME" in missing["nvcc"].fix and "2-4 hours" in missing["ccache"].fix
    assert not missing["cargo"].required  # the Rust frontend is optional in vLLM's build
    with pytest.raises(BuildPreflightError) as caught:
        require(checks)
    message = str(caught.value)
    assert "Python headers" in message and "nvcc" in message and "ccache" in message and "cargo" not in message


def test_a_prepared_runner_passes_with_nvcc_found_through_cuda_home(tmp_path: Path) -> None:
    cuda = tmp_path / "cuda-13.0"
    (cuda / "bin").mkdir(parents=True)
    (cuda / "bin" / "nvcc").write_text("")
    found = {"ccache": "/usr/bin/ccache", "cargo": "/home/runner/.cargo/bin/cargo"}
    checks = build_checks(
        HOST, tmp_path, min_free_gib=0, rust=True, which=found.get, environ={"CUDA_HOME": str(cuda)},
        python_include=_headers(tmp_path, present=True),
    )  # fmt: skip
    assert checks  # not empty: an assert over nothing passes
    assert all(c.ok for c in checks), checks
    require(checks)


def test_too_little_disk_and_docker_mode_needs_only_docker_and_disk(tmp_path: Path) -> None:
    docker = Toolchain(
        cuda_arch="12.1a", torch="torch==2.13.0", index_urls=(), max_jobs=4, mode="docker", ccache_dir=None
    )
    checks = build_checks(docker, tmp_path / "not-yet", min_free_gib=10**9, rust=True, which=lambda _: None, environ={})
    assert [(c.name, c.ok) for c in checks] == [("disk", False), ("docker", False)]
    assert "GiB free at" in checks[0].found and "build.min_free_gib" in checks[0].fix


def test_a_pure_python_build_needs_no_disk_for_cuda_objects(tmp_path: Path) -> None:
    no_gpu = Toolchain(cuda_arch=None, torch="torch==2.13.0", index_urls=(), max_jobs=2, mode="host", ccache_dir=None)
    checks = build_checks(no_gpu, tmp_path, min_free_gib=10**9, rust=False, which={"ccache": "/usr/bin/ccache"}.get,
                          environ={}, python_include=_headers(tmp_path, present=True))  # fmt: skip
    assert checks  # not empty: an assert over nothing passes
    assert all(c.ok for c in checks) and "nvcc" not in {c.name for c in checks}


def test_a_build_that_compiles_nothing_needs_no_compiler_headers_or_cache(tmp_path: Path) -> None:
    # gpu-built's flashinfer-python: packaging alone, on a GPU host with no ccache and no Python headers
    no_arch = Toolchain(cuda_arch=None, torch="torch==2.11.0", index_urls=(), max_jobs=8, mode="host", ccache_dir=None)
    checks = build_checks(
        no_arch, tmp_path, min_free_gib=0, rust=False, compiles=False, which=lambda _: None, environ={},
        python_include=_headers(tmp_path, present=False),
    )  # fmt: skip
    assert [c.name for c in checks] == ["disk"]
    require(checks)
    compiling = build_checks(no_arch, tmp_path, min_free_gib=0, rust=False, which=lambda _: None, environ={})
    assert "ccache" in [c.name for c in compiling if not c.ok]  # vLLM's CPU build compiles: ccache is still asked
