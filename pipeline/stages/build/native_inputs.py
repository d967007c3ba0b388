"""Native inputs: the paths of a source tree whose change needs a compiler, and what a tree's set of them is.

A source whose native inputs equal those of a native base the runner has is built as an overlay (the base's
compiled members, tonight's Python); any other change is a native build. The lists are stricter than vLLM CI's own
rule (csrc/, cmake/, CMakeLists.txt, setup.py, some requirement files): its build configuration (pyproject.toml,
setup.cfg), every requirement file (the wheel's METADATA is made from them), the build scripts under tools/, the Rust
frontend, and the folders the wheel takes from its native build (the vendored FlashAttention and Triton kernels).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath

from pipeline.infra.git import Git

# Each entry is a file, a folder (ending in "/") or a name prefix (ending in "_"); a path is native when it is one of
# them or starts with a folder or prefix.
NATIVE_INPUTS: dict[str, tuple[str, ...]] = {
    "vllm": (
        "csrc/",
        "cmake/",
        "CMakeLists.txt",
        "setup.py",
        "setup.cfg",
        "pyproject.toml",
        "MANIFEST.in",
        "requirements/",
        "tools/use_existing_torch.py",
        "tools/build_",  # build_rust.py, build_deepgemm_C.py, ...: scripts setup.py runs
        "tools/generate_cmake_presets.py",
        "rust/",
        "rust-toolchain.toml",
        "Cargo.toml",
        "Cargo.lock",
        ".gitmodules",
        "vllm/vllm_flash_attn/",
        "vllm/third_party/triton_kernels/",
    ),
    # FlashInfer's AOT wheels (flashinfer-cubin, flashinfer-jit-cache): the kernels and what compiles them, and
    # every file their build backends import or read (tests/integration/test_flashinfer_backend_inputs.py reads the
    # backends of FlashInfer's real tree and fails on one this list lacks): flashinfer-cubin downloads the cubins
    # flashinfer/artifacts.py names (paths and sha256s), flashinfer-jit-cache compiles flashinfer/aot.py's module
    # list, both import the root build_utils.py. flashinfer-python is its Python plus the kernel sources, rebuilt
    # every night.
    "flashinfer": (
        "csrc/",
        "include/",
        "3rdparty/",
        "flashinfer/jit/",
        "flashinfer/artifacts.py",
        "flashinfer/aot.py",
        "flashinfer-cubin/",
        "flashinfer-jit-cache/",
        "scripts/",
        "setup.py",
        "pyproject.toml",
        "requirements.txt",
        "build_backend.py",
        "build_utils.py",
        "version.txt",
        ".gitmodules",
    ),
}


def is_native(family: str, path: str) -> bool:
    """True when a change to `path` (relative to the tree's root) needs the family's native build."""
    posix = PurePosixPath(path).as_posix()
    return any(posix == item or (item[-1] in "/_" and posix.startswith(item)) for item in NATIVE_INPUTS[family])


def native_paths(family: str, paths: Iterable[str]) -> tuple[str, ...]:
    """The native inputs among `paths`, sorted."""
    return tuple(sorted(p for p in paths if is_native(family, p)))


@dataclass(frozen=True)
class TreeChange:
    """How tonight's tree differs from a base tree: every changed path, and those among them that are native."""

    changed: tuple[str, ...]
    native: tuple[str, ...]

    @property
    def python_only(self) -> bool:
        return not self.native

    def describe(self, limit: int = 3) -> str:
        """One phrase for the plan and the notes: what changed, the native paths first."""
        shown = self.native or self.changed
        more = f" and {len(shown) - limit} more" if len(shown) > limit else ""
        if self.native:
            return f"{', '.join(shown[:limit])}{more} changed"
        if not self.changed:
            return "nothing changed"
        return f"only Python changed ({len(self.changed)} file{'s' if len(self.changed) != 1 else ''})"


def tree_change(family: str, mirror: Git, base: str, tonight: str) -> TreeChange:
    """What changed between two commits (or trees) of one repository."""
    changed = tuple(sorted(mirror.paths("diff", "--name-only", "--no-renames", base, tonight)))
    return TreeChange(changed, native_paths(family, changed))


def native_digest(family: str, mirror: Git, commit: str) -> str:
    """The content of a tree's native inputs: one digest over each native file's path and blob, so two trees whose
    native inputs are byte for byte equal share it, whatever else differs."""
    listing = mirror.paths("ls-tree", "-r", "--full-tree", commit)
    return digest_of(family, (_path_and_blob(line) for line in listing))


def digest_of(family: str, files: Iterable[tuple[str, str]]) -> str:
    """The digest of (path, blob id) pairs, the native ones only, in path order."""
    native = sorted((path, blob) for path, blob in files if is_native(family, path))
    text = "".join(f"{blob} {path}\n" for path, blob in native)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _path_and_blob(line: str) -> tuple[str, str]:
    meta, _, path = line.partition("\t")
    return path, meta.split()[2]


def commit_with_tree(mirror: Git, tree: str, tip: str) -> str | None:
    """The oldest first-parent ancestor of `tip` (itself included) whose tree is `tree`: where a base built from that
    tree sits in tonight's history; None when no ancestor has it."""
    found = None
    for line in mirror("log", "--first-parent", "--format=%H %T", tip).splitlines():
        commit, commit_tree = line.split()
        if commit_tree == tree:
            found = commit
    return found
