"""vLLM: built with the toolchain's torch (use_existing_torch.py) for the target architecture."""

from __future__ import annotations

from pathlib import Path

from pipeline.errors import SparkNightlyError
from pipeline.stages.build.builders.base import (
    BuildSource,
    Paths,
    Step,
    Toolchain,
    common_env,
    read_requirements,
    rust_toolchain_channel,
    uv_build,
    without_torch,
)

# Where vLLM keeps its CUDA build requirements, today's layout first (main and 0.33.0), then the earlier one.
BUILD_REQUIREMENTS = ("requirements/build/cuda.txt", "requirements/build.txt")
# Where its script that drops the torch pins lives: tools/ today, the top of the tree before.
USE_EXISTING_TORCH = ("tools/use_existing_torch.py", "use_existing_torch.py")


class VllmBuilder:
    """One vllm wheel; its version comes from setuptools-scm on the built commit (commit and date included)."""

    family = "vllm"
    revision = 2

    def families(self, root: Path | None, cuda_arch: str | None = None) -> tuple[str, ...]:
        return ("vllm",)

    def kernel_families(self, root: Path, cuda_arch: str | None = None) -> tuple[str, ...]:
        return ()  # one wheel: its natives are carried by an overlay instead (native_base.py)

    def build_requirements(self, root: Path, toolchain: Toolchain) -> tuple[str, ...]:
        listed = next((root / name for name in BUILD_REQUIREMENTS if (root / name).is_file()), None)
        if listed is None:
            raise SparkNightlyError(
                f"{root} has neither {' nor '.join(BUILD_REQUIREMENTS)}: is this a vLLM checkout? "
                "(if vLLM moved its build requirements again, name the new file in BUILD_REQUIREMENTS)"
            )
        # setuptools-rust (the optional Rust frontend) comes with the list where the source has one
        return (*without_torch(read_requirements(listed)), toolchain.torch, "uv")

    def compiles(self, root: Path, toolchain: Toolchain) -> bool:
        return True  # its C++ and CUDA extensions, or the CPU build's

    def rust_channel(self, root: Path | None) -> str | None:
        return rust_toolchain_channel(root) if root is not None else None

    def steps(self, root: Path | None, source: BuildSource, toolchain: Toolchain, paths: Paths) -> list[Step]:
        if not toolchain.cuda_arch:
            raise SparkNightlyError("vLLM is built for a GPU: the profile names no CUDA architecture (arch)")
        env = common_env(toolchain, source) | {
            "TORCH_CUDA_ARCH_LIST": toolchain.cuda_arch,
            "VLLM_TARGET_DEVICE": "cuda",
        }
        script = next(
            (name for name in USE_EXISTING_TORCH if root is None or (root / name).is_file()), USE_EXISTING_TORCH[0]
        )
        return [
            # drops vLLM's own torch pins so the build (and the wheel's requirements) use the locked torch
            Step("use-existing-torch", (paths.python, script), ".", env),
            uv_build("vllm", ".", paths, env),
        ]
