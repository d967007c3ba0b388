"""FlashInfer's native inputs hold every file its build backends import or read, on FlashInfer's real tree.

The AOT wheels are made by build backends that read more than `csrc/`: flashinfer-cubin downloads the cubins
`flashinfer/artifacts.py` names, flashinfer-jit-cache compiles `flashinfer/aot.py`'s module list, and both import the
root `build_utils.py`. A commit that moved an artifact path was "only Python": the old cubins were carried over and
relabelled to tonight's version. This reads each backend of the real tree (its imports, followed into the tree, and
the files it names) and fails when one is not a native input.
"""

from __future__ import annotations

import ast
import tarfile
from pathlib import Path

import pytest

from pipeline.stages.build.native_inputs import NATIVE_INPUTS, is_native
from tests.flashinfer_repo import FLASHINFER_0614_SDIST

pytestmark = pytest.mark.integration

BACKENDS = ("build_backend.py", "flashinfer-cubin/build_backend.py", "flashinfer-jit-cache/build_backend.py")


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("flashinfer")
    with tarfile.open(FLASHINFER_0614_SDIST.fetch()) as archive:
        archive.extractall(root, filter="data")
    return root / f"flashinfer_python-{FLASHINFER_0614_SDIST.version}"


def _in_tree(tree: Path, module: str, beside: Path) -> Path | None:
    """The tree's file of an imported module, looked for beside the importer and at the root."""
    relative = Path(*module.split("."))
    for folder in (beside, tree):
        for candidate in (folder / f"{relative}.py", folder / relative / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def _read_by(tree: Path, backend: Path) -> set[str]:
    """Every file of the tree `backend` imports (and those import, within the tree) or names in a string."""
    found: set[str] = set()
    todo = [backend]
    while todo:
        path = todo.pop()
        rel = path.relative_to(tree).as_posix()
        if rel in found:
            continue
        found.add(rel)
        for node in ast.walk(ast.parse(path.read_text())):
            modules = []
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            for module in modules:
                if (imported := _in_tree(tree, module, path.parent)) is not None:
                    todo.append(imported)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "\n" not in node.value:
                for folder in (path.parent, tree):
                    named = folder / node.value
                    if node.value and named.is_file() and named.resolve().is_relative_to(tree.resolve()):
                        found.add(named.resolve().relative_to(tree.resolve()).as_posix())
    return found


def test_every_file_a_build_backend_reads_is_a_native_input(tree: Path) -> None:
    backends = [tree / name for name in BACKENDS if (tree / name).is_file()]
    assert tree / "build_backend.py" in backends  # the root backend is in every release
    read = sorted(set().union(*(_read_by(tree, backend) for backend in backends)))
    assert "build_backend.py" in read and len(read) > 1, read
    # the module FlashInfer's own Python imports at run time is not a backend's input unless a backend imports it
    missing = [path for path in read if not is_native("flashinfer", path)]
    assert missing == [], f"add to NATIVE_INPUTS['flashinfer'] ({len(NATIVE_INPUTS['flashinfer'])} entries): {missing}"
