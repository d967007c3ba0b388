"""vLLM: built with the toolchain's torch (use_existing_torch.py) for the target architecture."""

from __future__ import annotations

from pathlib import Path

from pipeline.errors import SparkNightlyError
from pipeline.stages.build.builders.base import BuildSource, Paths, Step, Toolchain, common_env, uv_build, without_torch


class VllmBuilder:
    """One vllm wheel; its version comes from setuptools-scm on the built commit (commit and date included)."""

    family = "vllm"
    revision = 1

    def families(self, root: Path | None) -> tuple[str, ...]:
        return ("vllm",)

    def build_requirements(self, root: Path, toolchain: Toolchain) -> tuple[str, ...]:
        listed = root / "requirements" / "build.txt"
        if not listed.exists():
            raise SparkNightlyError(f"{listed} is missing: is this a vLLM checkout?")
        lines = [line.split("#", 1)[0].strip() for line in listed.read_text().splitlines()]
        return (*without_torch([line for line in lines if line and not line.startswith("-")]), toolchain.torch, "uv")

    def steps(self, root: Path | None, source: BuildSource, toolchain: Toolchain, paths: Paths) -> list[Step]:
        if not toolchain.cuda_arch:
            raise SparkNightlyError("vLLM is built for a GPU: the profile names no CUDA architecture (arch)")
        env = common_env(toolchain, source) | {
            "TORCH_CUDA_ARCH_LIST": toolchain.cuda_arch,
            "VLLM_TARGET_DEVICE": "cuda",
        }
        return [
            # drops vLLM's own torch pins so the build (and the wheel's requirements) use the locked torch
            Step("use-existing-torch", (paths.python, "use_existing_torch.py"), ".", env),
            uv_build("vllm", ".", paths, env),
        ]
