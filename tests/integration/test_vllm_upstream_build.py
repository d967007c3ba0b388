"""The vLLM builder on vLLM's own tree (the 0.33.0 sdist from PyPI, the layout of main): build requirements read
from requirements/build/cuda.txt, tools/use_existing_torch.py run, and the build environment resolved and locked;
then the lock of tonight's FlashInfer beside the real vLLM 0.33.0 aarch64 wheel, for the Spark's platform."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.infra import procs
from pipeline.infra.runtime import ensure_pip_runtime
from pipeline.infra.wheel_target import pip_platforms
from pipeline.settings import from_environment
from pipeline.stages.build.builders import BUILDERS
from pipeline.stages.build.builders.base import BuildSource, Paths, Toolchain
from pipeline.stages.build.lock import lock_wheel_set
from tests.shops import online
from tests.upstream import FLASHINFER_PYTHON_OTHER, VLLM_AARCH64, VLLM_SDIST

pytestmark = pytest.mark.integration

TOOLCHAIN = Toolchain(cuda_arch="12.1a", torch="torch==2.13.0", index_urls=(), max_jobs=2, mode="host", ccache_dir=None)


def test_the_builder_prepares_vllms_real_tree(tmp_path: Path) -> None:
    source = BuildSource.from_sdist("vllm", VLLM_SDIST.fetch())
    root = source.materialize(tmp_path / "src")
    builder = BUILDERS["vllm"]
    requirements = builder.build_requirements(root, TOOLCHAIN)
    # requirements/build/cuda.txt: the Rust frontend's setuptools-rust included, vLLM's torch pin replaced by ours
    assert {"cmake>=3.26.1", "ninja", "setuptools-rust>=1.9.0", "setuptools-scm>=8"} <= set(requirements)
    assert "torch==2.14.0" not in requirements and requirements[-2:] == ("torch==2.13.0", "uv")
    assert builder.rust_channel(root) == "1.95"  # rust-toolchain.toml: what the build image installs for it

    cache_dir = from_environment().settings.places.cache
    build_env = ensure_pip_runtime("build-vllm", requirements, (), online(cache_dir), tmp_path)  # resolved and locked
    locked = {f.name: f.version for f in build_env.lock}
    assert locked["torch"].startswith("2.13.0") and "setuptools-rust" in locked and "cmake" in locked

    (prepare, build) = builder.steps(root, source, TOOLCHAIN, Paths(str(build_env.python), "uv", str(tmp_path)))
    assert prepare.argv[1] == "tools/use_existing_torch.py" and build.produces == "vllm"
    log = tmp_path / "use-existing-torch.log"
    procs.run(list(prepare.argv), log, cwd=root / prepare.cwd, timeout_s=120, env=dict(prepare.env))
    cuda = (root / "requirements" / "cuda.txt").read_text()
    assert "torch==2.14.0" not in cuda and "torchvision" not in cuda and "torchaudio" not in cuda
    assert "flashinfer-python==0.7.2.post1" in cuda  # only torch's lines go
    assert "torch" not in (root / "requirements" / "build" / "cuda.txt").read_text()
    assert ">>> removed from" in log.read_text()


def test_the_lock_puts_tonights_flashinfer_in_place_of_vllms_exact_pin(tmp_path: Path) -> None:
    vllm, flashinfer = VLLM_AARCH64.fetch(), FLASHINFER_PYTHON_OTHER.fetch()
    said: list[str] = []
    lock = lock_wheel_set(
        [vllm, flashinfer],
        torch_version="2.14.0",  # what vLLM 0.33.0 itself pins (the Spark profile's 2.13.0 is refused by inspect)
        gpu=True,
        index_urls=(),
        dest=tmp_path,
        log_dir=tmp_path,
        platforms=pip_platforms("linux_aarch64", (2, 39)),
        say=said.append,
    )
    print("\n".join(said))
    assert lock.notes == (
        "vllm pins flashinfer-python==0.7.2.post1; tonight's flashinfer-python 0.7.2 stands in its place",
    )
    versions = {f.name: f.version for f in lock.files}
    assert (versions["vllm"], versions["flashinfer-python"], versions["torch"]) == ("0.33.0", "0.7.2", "2.14.0")
    assert versions["torchvision"] == "0.29.0" and versions["torchaudio"] == "2.11.0"  # locked beside torch
    assert lock.files  # not empty: an assert over nothing passes
    assert all(f.filename.endswith(("aarch64.whl", "-any.whl")) for f in lock.files), sorted(versions)
    text = lock.path.read_text()
    assert "flashinfer-python==0.7.2 --hash=sha256:" + FLASHINFER_PYTHON_OTHER.sha256 in text
