"""FlashInfer: flashinfer-python, then flashinfer-cubin and flashinfer-jit-cache where the source has them."""

from __future__ import annotations

from pathlib import Path

from pipeline.stages.build.builders.base import (
    BuildSource,
    Paths,
    Step,
    Toolchain,
    common_env,
    pyproject_build_requires,
    uv_build,
    without_torch,
)

# (wheel family, project folder in the repository); an sdist of flashinfer-python holds only the first
_PROJECTS = (
    ("flashinfer-python", "."),
    ("flashinfer-cubin", "flashinfer-cubin"),
    ("flashinfer-jit-cache", "flashinfer-jit-cache"),
)


class FlashInferBuilder:
    """FlashInfer's three wheels with the kernels compiled for the target architecture."""

    family = "flashinfer"
    revision = 1

    def families(self, root: Path | None) -> tuple[str, ...]:
        return tuple(name for name, folder in _PROJECTS if root is None or (root / folder / "pyproject.toml").exists())

    def build_requirements(self, root: Path, toolchain: Toolchain) -> tuple[str, ...]:
        wanted: list[str] = []
        for name, folder in _PROJECTS:
            if name in self.families(root):
                wanted.extend(r for r in without_torch(pyproject_build_requires(root / folder)) if r not in wanted)
        return (*wanted, toolchain.torch, "uv", "wheel", "ninja")

    def steps(self, root: Path | None, source: BuildSource, toolchain: Toolchain, paths: Paths) -> list[Step]:
        env = common_env(toolchain, source) | {
            "FLASHINFER_BUILD_NO_PIP": "1",  # the build environment is locked: its hooks must not install into it
            "BUILD_NVEP": "0",  # a best-effort native step that differs silently with what the host happens to have
        }
        if toolchain.cuda_arch:
            env["FLASHINFER_CUDA_ARCH_LIST"] = toolchain.cuda_arch
        if source.version_label:
            env["FLASHINFER_LOCAL_VERSION"] = source.version_label
        return [uv_build(name, folder, paths, env) for name, folder in _PROJECTS if name in self.families(root)]
