"""The native base guard on a real base: vLLM 0.26.0's x86-64 CUDA wheel from PyPI (its METADATA and its natives'
ELF headers), as the `gpu-built` profile pins it.

Its METADATA pins plain `torch==2.11.0` (no `+cu130` label): the guard compared CUDA only for a labelled pin, so a
CUDA 12.9 profile, or the CPU profile, took it. The CUDA it was built for shows in what its natives link.
"""

from __future__ import annotations

import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.config.matrix import PinnedBase, Profile, TorchExpectation
from pipeline.infra.elf import needed_libraries
from pipeline.infra.files import sha256_of
from pipeline.infra.git import Git
from pipeline.infra.supply import ONLINE
from pipeline.stages.build.base_guard import BaseRefused, Target, check_compatible
from pipeline.stages.build.native_base import pinned_base
from tests.vllm_repo import VLLM_026_X86

pytestmark = pytest.mark.integration

GPU_BUILT = Profile(
    "gpu-built", "gpu-nvidia", "cuda", TorchExpectation("2.11.0", "13.0"), "build", platform="linux_x86_64"
)
X86_312 = Target("x86_64", (3, 12))


@pytest.fixture(scope="module")
def wheel() -> Path:
    return VLLM_026_X86.fetch()


def test_its_natives_say_the_cuda_they_link(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive, archive.open("vllm/_C_stable_libtorch.abi3.so") as member:
        linked = needed_libraries(member)  # type: ignore[arg-type]
    assert len(linked) > 3 and "libc.so.6" in linked, linked  # 0.26.0 ships its _C built on the stable ABI
    assert [lib for lib in linked if lib.startswith("libcudart.so.")] == ["libcudart.so.13"], linked


def test_the_profile_it_was_pinned_for_takes_it(wheel: Path) -> None:
    check_compatible(wheel, GPU_BUILT, X86_312)


@pytest.mark.parametrize(
    ("profile", "target", "named"),
    [
        (replace(GPU_BUILT, torch=TorchExpectation("2.11.0", "12.9")), X86_312, "CUDA 13 (the profile's: 12.9)"),
        (
            replace(GPU_BUILT, accelerator="cpu", torch=TorchExpectation("2.11.0", None)),
            X86_312,
            "CUDA 13 (the profile's: none)",
        ),
        (
            replace(GPU_BUILT, torch=TorchExpectation("2.13.0", "13.0")),
            X86_312,
            "torch 2.11.0 (the profile pins 2.13.0)",
        ),
        (replace(GPU_BUILT, platform="linux_aarch64"), Target("aarch64", (3, 12)), "(the profile runs linux aarch64)"),
    ],
)
def test_another_profile_refuses_it_naming_both(wheel: Path, profile: Profile, target: Target, named: str) -> None:
    with pytest.raises(BaseRefused, match="was built for") as refused:
        check_compatible(wheel, profile, target)
    assert named in str(refused.value), refused.value


def test_a_downloaded_base_whose_sha256_differs_from_the_pin_is_refused(tmp_path: Path) -> None:
    """By download from the index: the file is checked against the index's own digest, then against the pin."""
    pin = PinnedBase("six", "1.16.0", "six-1.16.0-py2.py3-none-any.whl", "0" * 64, "1" * 40)
    profile = replace(GPU_BUILT, native_bases={"vllm": pin})
    with pytest.raises(BaseRefused) as refused:
        pinned_base(
            "vllm",
            pin,
            profile,
            mirror=Git(tmp_path),
            main_commit="2" * 40,
            cache_dir=tmp_path / "cache",
            supply=ONLINE,
        )
    fetched = tmp_path / "cache" / "native-bases" / pin.filename
    assert str(refused.value) == f"{pin.filename}: sha256 {sha256_of(fetched)}, the profile pins {'0' * 64}"
