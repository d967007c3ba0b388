"""The code's shape holds: layers import only downward, stages live in their phase, every exit code is documented."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

from pipeline.cli import build_parser
from pipeline.errors import ExitCode
from pipeline.places import CacheDir
from pipeline.settings import Settings

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "pipeline"
# lowest first: a module may import its own layer and the layers below it, never one above
LAYERS = (
    {"__init__", "errors"},
    {"status", "progress"},
    {"outcome", "config", "places"},
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


# A runtime's folder and an image's context keep a lock.txt of their own (their layouts are theirs): only the run and
# state names that nothing else uses are held to the places module.
SHARED_NAMES = {"lock.txt"}
FILE_NAME = re.compile(r"[\w.-]+\.(json|sqlite|txt|md|html|xml)")


def _places_names() -> set[str]:
    """Every file and folder name places.py joins onto a run or state folder."""
    tree = ast.parse((PACKAGE / "places.py").read_text())
    joins = [node for node in ast.walk(tree) if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)]
    names = {n.right.value for n in joins if isinstance(n.right, ast.Constant) and isinstance(n.right.value, str)}
    # folder names other layouts use too (a runtime's and an image context's own `wheels`), held below where they
    # are joined onto the cache
    return names - SHARED_NAMES - {"build", "image", "logs", "alerts", "golden", "wheels"}


def test_run_and_state_file_names_are_joined_only_in_the_places_module() -> None:
    owned = _places_names()
    assert {"plan.json", "history.sqlite", "entries", "series", "run.json"} <= owned  # the guard guards something
    joined = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "places.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            right = node.right if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) else None
            if isinstance(right, ast.Constant) and right.value in owned:
                joined.append(f"{path.relative_to(ROOT)}:{node.lineno}: / {right.value!r}")
    assert joined == [], "use the places module's RunDir or StateDir"


def _cache_joins(source: str) -> list[tuple[int, str]]:
    """Each join of one of CacheDir's folder names onto something named a cache (`cache_dir / "runtimes"`)."""
    cache = CacheDir(Path("/cache"))
    names = {getattr(cache, name).relative_to(cache.root).parts[0] for name in vars(CacheDir) if _is_property(name)}
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant)):
            continue
        if node.right.value in names and "cache" in ast.unparse(node.left).lower():
            found.append((node.lineno, ast.unparse(node)))
    return found


def _is_property(name: str) -> bool:
    return isinstance(vars(CacheDir)[name], property)


def test_cache_folders_are_joined_only_in_the_places_module() -> None:
    """Every folder of `paths.cache` is named once, in places.CacheDir: a module that joins `cache_dir / "wheels"`
    itself is where two names for one folder begin."""
    planted = 'def f(cache_dir):\n    return cache_dir / "runtimes" / "x", settings.places.cache / "mirrors"\n'
    assert [line for line, _ in _cache_joins(planted)] == [2, 2]  # the guard guards something
    joined = [
        f"{path.relative_to(ROOT)}:{line}: {text}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "places.py"
        for line, text in _cache_joins(path.read_text())
    ]
    assert joined == [], "use places.CacheDir"


def test_no_setting_is_reached_by_its_name_as_a_string() -> None:
    fields = {field.name for field in dataclasses.fields(Settings)}
    by_name = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[-1], ast.Constant)):
                continue
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if called in {"getattr", "path"} and node.args[-1].value in fields:
                by_name.append(f"{path.relative_to(ROOT)}:{node.lineno}: {called}(..., {node.args[-1].value!r})")
    assert by_name == [], "use settings.places or the setting's attribute"


def test_the_help_lists_every_exit_code_from_the_table() -> None:
    epilog = build_parser().epilog or ""
    assert epilog.startswith("Exit codes: ")
    assert [int(code) for code in re.findall(r"(?:: |; )(\d+) ", epilog)] == [int(code) for code in ExitCode]


def test_detect_is_the_verdicts_arithmetic_and_imports_nothing_but_config() -> None:
    """detect/ (the screen, the sequential test, the boot spread and their records) is arithmetic over records: it
    reads the thresholds and nothing of the gate's infrastructure, so the simulation and the gate share it whole."""
    reaching = [
        f"{path.relative_to(ROOT)} imports pipeline.{target}"
        for path in sorted((PACKAGE / "detect").rglob("*.py"))
        for target in _imports(path)
        if target not in ("detect", "config")
    ]
    assert reaching == []


def test_the_perf_verdict_is_entered_only_through_its_package() -> None:
    """The perf verdict is one package (stages/prove/perf/): the rest of the gate imports its stage and verdict from
    the package itself, never a module inside it, so its inside can be rearranged without reaching outside."""
    perf = PACKAGE / "stages" / "prove" / "perf"
    inside = "pipeline.stages.prove.perf."
    reaching = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if perf in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            module = node.module if isinstance(node, ast.ImportFrom) else None
            if module and module.startswith(inside):
                reaching.append(f"{path.relative_to(ROOT)} imports {module}")
    assert reaching == []
    loose = [p.name for p in (PACKAGE / "stages" / "prove").glob("*.py") if p.stem.startswith(("perf", "pair", "turn"))]
    assert loose == [], "the perf group's modules live in stages/prove/perf/"


# A server's boot reads the cache (the Hugging Face cache, its compile folders) and writes logs, but makes nothing
# from the supply: it takes the folders and the voice it needs, not a workshop
SERVING = {"boot", "restartable", "measure_and_judge", "last_confirmed_judge", "__init__"}


def test_what_builds_fetches_or_makes_a_runtime_takes_the_night_s_workshop() -> None:
    """The cache, the supply and the voice travel together as one Workshop (infra/workshop.py); a function that
    takes three of them apart (as 24 did) is where a default supply once sent an offline runner to pip."""
    threaded, online_defaults = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef):
                continue
            args = node.args
            names = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
            if len(names & {"cache_dir", "log_dir", "supply", "say"}) >= 3 and node.name not in SERVING:
                threaded.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
            defaults = [*args.defaults, *(d for d in args.kw_defaults if d is not None)]
            if any(isinstance(d, ast.Name) and d.id == "ONLINE" for d in defaults):
                online_defaults.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert (threaded, online_defaults) == ([], [])
