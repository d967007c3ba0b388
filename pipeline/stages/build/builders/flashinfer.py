"""FlashInfer: flashinfer-python, then flashinfer-cubin and the JIT cache where the source has them.

The JIT cache comes in one of two shapes, as the tree defines it: the earlier monolithic `flashinfer-jit-cache` (its
kernels compiled for FLASHINFER_CUDA_ARCH_LIST into the wheel), or, where the tree has
`flashinfer-jit-cache-provider/`, the provider split: a `flashinfer-jit-cache` shim that names its providers and
one `flashinfer-jit-cache-<sm tag>` wheel per architecture (`flashinfer-jit-cache-sm121a` for 12.1a), which is what
FlashInfer's own installer asks for.
"""

from __future__ import annotations

from dataclasses import replace
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
PROVIDER_FOLDER = "flashinfer-jit-cache-provider"


def provider_family(cuda_arch: str) -> str:
    """The provider wheel of one architecture: `12.1a` -> `flashinfer-jit-cache-sm121a`."""
    return "flashinfer-jit-cache-sm" + cuda_arch.replace(".", "")


class FlashInferBuilder:
    """FlashInfer's wheels with the kernels compiled for the target architecture."""

    family = "flashinfer"
    revision = 2

    def families(self, root: Path | None, cuda_arch: str | None = None) -> tuple[str, ...]:
        if not cuda_arch:  # no architecture to compile for: flashinfer-python alone, its kernels JIT-compiled in use
            return ("flashinfer-python",)
        found = tuple(name for name, folder in _PROJECTS if root is None or (root / folder / "pyproject.toml").exists())
        if root is not None and cuda_arch and self._split(root):
            found += (provider_family(cuda_arch),)
        return found

    def kernel_families(self, root: Path, cuda_arch: str | None = None) -> tuple[str, ...]:
        """The AOT wheels: everything but flashinfer-python."""
        return tuple(name for name in self.families(root, cuda_arch) if name != "flashinfer-python")

    def build_requirements(self, root: Path, toolchain: Toolchain) -> tuple[str, ...]:
        wanted: list[str] = []
        folders = [folder for name, folder in _PROJECTS if name in self.families(root, toolchain.cuda_arch)]
        folders += [PROVIDER_FOLDER] * (bool(toolchain.cuda_arch) and self._split(root))
        for folder in folders:
            wanted.extend(r for r in without_torch(pyproject_build_requires(root / folder)) if r not in wanted)
        if not self.kernel_families(root, toolchain.cuda_arch):
            # flashinfer-python alone is packaging (its kernels are sources, compiled at first use): no torch, no
            # compiler; and the environment stays small enough for a wheelhouse carried to an offline runner
            return (*wanted, "uv")
        return (*wanted, toolchain.torch, "uv", "wheel", "ninja")

    def compiles(self, root: Path, toolchain: Toolchain) -> bool:
        return bool(self.kernel_families(root, toolchain.cuda_arch))

    def rust_channel(self, root: Path | None) -> str | None:
        return None

    def steps(self, root: Path | None, source: BuildSource, toolchain: Toolchain, paths: Paths) -> list[Step]:
        env = common_env(toolchain, source) | {
            "FLASHINFER_BUILD_NO_PIP": "1",  # the build environment is locked: its hooks must not install into it
            "BUILD_NVEP": "0",  # a best-effort native step that differs silently with what the host happens to have
        }
        if toolchain.cuda_arch:
            env["FLASHINFER_CUDA_ARCH_LIST"] = toolchain.cuda_arch
        else:
            # flashinfer-python alone: the backend installs cuda-tile's compiler wheels into the build interpreter
            # with uv or pip, best effort (0.6.14: `_install_cuda_tile_compile_deps`), whatever
            # FLASHINFER_BUILD_NO_PIP says; they compile kernels, which this build does not, so with no index the
            # install fails at once, the build goes on, and the environment stays what its lock says
            env |= {"UV_OFFLINE": "1", "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": ""}
        if source.version_label:
            env["FLASHINFER_LOCAL_VERSION"] = source.version_label
        arch = toolchain.cuda_arch if root is not None and self._split(root) else None
        steps = [
            uv_build(name, folder, paths, env | (self._shim_env(arch) if name == "flashinfer-jit-cache" else {}))
            for name, folder in _PROJECTS
            if name in self.families(root, toolchain.cuda_arch)
        ]
        if arch:  # the provider split: one wheel of compiled kernels for the architecture, named after it
            provider = uv_build(
                PROVIDER_FOLDER, PROVIDER_FOLDER, paths, env | {"FLASHINFER_JIT_CACHE_PROVIDER_ARCH": arch}
            )
            steps.append(replace(provider, produces=provider_family(arch)))
        return steps

    @staticmethod
    def _shim_env(arch: str | None) -> dict[str, str]:
        """With the provider split, the jit-cache wheel is the shim that names its provider (no kernels inside)."""
        return {"FLASHINFER_JIT_CACHE_WHEEL_KIND": "shim", "FLASHINFER_JIT_CACHE_PROVIDER_ARCHS": arch} if arch else {}

    @staticmethod
    def _split(root: Path) -> bool:
        return (root / PROVIDER_FOLDER / "pyproject.toml").exists()
