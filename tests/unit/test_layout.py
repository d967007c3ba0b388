"""The code's shape holds: layers import only downward, stages live in their phase, every exit code is documented."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from pipeline.errors import ExitCode

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "pipeline"
# lowest first: a module may import its own layer and the layers below it, never one above
LAYERS = (
    {"__init__", "errors"},
    {"status", "progress"},
    {"outcome", "config"},
    {"infra"},
    {"settings", "checks", "detect"},
    {"stages"},
    {"nightly"},
    {"commands"},
    {"cli", "__main__"},
)
PHASES = {"build", "prove", "release", "aftermath"}


def _layer(part: str) -> int:
    return next(index for index, names in enumerate(LAYERS) if part in names)


def _imports(path: Path) -> set[str]:
    """The top-level parts of pipeline that a module imports (`pipeline.infra.git` -> `infra`)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "pipeline":
            parts = node.module.split(".")
            found |= {parts[1]} if len(parts) > 1 else {_module_or_init(alias.name) for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("pipeline.")}
    return found


def _module_or_init(name: str) -> str:
    """`from pipeline import X`: X is a module or subpackage, or else a name of pipeline/__init__.py."""
    return name if (PACKAGE / f"{name}.py").exists() or (PACKAGE / name).is_dir() else "__init__"


def test_every_module_imports_only_its_own_layer_or_lower() -> None:
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        part = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        upward += [
            f"{path.relative_to(ROOT)} imports pipeline.{target}"
            for target in _imports(path)
            if target != part and _layer(target) > _layer(part)
        ]
    assert upward == []


def test_stages_are_grouped_by_phase_with_no_loose_modules() -> None:
    stages = PACKAGE / "stages"
    loose = sorted(p.name for p in stages.glob("*.py") if p.name != "__init__.py")
    folders = {p.name for p in stages.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert (loose, folders) == ([], PHASES)
    for phase in PHASES:
        docstring = ast.get_docstring(ast.parse((stages / phase / "__init__.py").read_text()))
        assert docstring and len(docstring.splitlines()) == 1, f"stages/{phase} needs a one-line docstring"


def test_the_readme_lists_every_exit_code_the_program_uses() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    listed = {int(code) for code in re.findall(r"^\| (\d+) \|", section, re.MULTILINE)}
    assert listed == {int(code) for code in ExitCode}


def test_every_integration_test_module_carries_the_integration_marker() -> None:
    unmarked = [
        path.name
        for path in sorted((ROOT / "tests" / "integration").rglob("test_*.py"))
        if not re.search(r"^pytestmark = .*pytest\.mark\.integration\b", path.read_text(), re.MULTILINE)
    ]
    assert unmarked == []
