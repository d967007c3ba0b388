"""No test that cannot fail: `assert all(...)` (and `assert not any(...)`) over a collection is true when the
collection is empty, so the suite refuses one unless the collection is the test's own literal or its size or contents
were checked first (`len(X)`, `X == ...`, or `X` asserted non-empty, in the same assert or an earlier one of the
same test). A plain `any(...)` fails on an empty collection and needs no such check.

It caught `assert all(s["commit"] == day[23] ... for s in skipped)` in the bisection night, true when nothing was
skipped: a native commit wrongly overlaid would have passed it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).parents[1]


def _comprehension_iterables(call: ast.Call) -> list[ast.expr]:
    if len(call.args) != 1 or not isinstance(call.args[0], ast.GeneratorExp | ast.ListComp | ast.SetComp):
        return []
    return [generator.iter for generator in call.args[0].generators]


def _vacuous_iterables(test: ast.expr) -> Iterator[ast.expr]:
    """What each `all(<comprehension>)` and `not any(<comprehension>)` in an assert's test iterates."""
    for node in ast.walk(test):
        call = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "all":
            call = node
        elif (
            isinstance(node, ast.UnaryOp)
            and isinstance(node.op, ast.Not)
            and isinstance(node.operand, ast.Call)
            and isinstance(node.operand.func, ast.Name)
            and node.operand.func.id == "any"
        ):
            call = node.operand
        if call is not None:
            yield from _comprehension_iterables(call)


def _checked(test: ast.expr) -> set[str]:
    """What an assert's test checks the size or contents of: `len(X)`, `X == ...`, `X` alone among its conditions."""
    found: set[str] = set()
    conditions = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    for condition in conditions:
        if isinstance(condition, ast.Name | ast.Attribute | ast.Subscript | ast.Call):
            found.add(ast.unparse(condition))
    for node in ast.walk(test):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len" and node.args:
            found.add(ast.unparse(node.args[0]))
        if isinstance(node, ast.Compare) and any(isinstance(op, ast.Eq) for op in node.ops):
            sides = (node.left, *node.comparators)
            found.update(ast.unparse(side) for side in sides)
            found.update(ast.unparse(inner) for side in sides if (inner := _wrapped(side)) is not None)
            # `[s.name for s in steps] == [...]`: a comprehension compared whole checks what it iterates
            for side in sides:
                if isinstance(side, ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp):
                    found.update(ast.unparse(generator.iter) for generator in side.generators)
    return found


def _wrapped(node: ast.expr) -> ast.expr | None:
    """X of `set(X)`, `sorted(X)`, `itertools.pairwise(X)` and the like: one collection seen through another."""
    if isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords:
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name in {"set", "sorted", "list", "tuple", "pairwise", "enumerate", "reversed"}:
            return node.args[0]
    return None


def _mapping_of(node: ast.expr) -> str:
    """`X` for `X.values()`, `X.items()` or `X.keys()`: a mapping checked is its views checked."""
    views = ("values", "items", "keys")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in views:
        return ast.unparse(node.func.value)
    return ""


def _literal(node: ast.expr) -> bool:
    """The test's own collection: a literal, or a module constant (an UPPER_CASE name, or a view of one)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        node = node.func.value
    return isinstance(node, ast.Tuple | ast.List | ast.Set | ast.Dict | ast.Constant) or (
        isinstance(node, ast.Name) and node.id.isupper()
    )


def vacuous_asserts(source: str) -> list[tuple[int, str]]:
    """(line, collection) of each assert over a collection neither made by the test nor checked before."""
    found = []
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, ast.FunctionDef):
            continue
        checked: set[str] = set()
        asserts = sorted((n for n in ast.walk(function) if isinstance(n, ast.Assert)), key=lambda n: n.lineno)
        for statement in asserts:
            checked |= _checked(statement.test)
            for iterable in _vacuous_iterables(statement.test):
                inner = _wrapped(iterable)
                seen = {ast.unparse(iterable), _mapping_of(iterable), ast.unparse(inner) if inner else ""}
                if not _literal(iterable) and not seen & checked:
                    found.append((statement.lineno, ast.unparse(iterable)))
    return found


def test_the_rule_refuses_an_unchecked_collection_and_passes_a_checked_one() -> None:
    refused = 'def test_x(found):\n    skipped = [s for s in found if s["verdict"] == "SKIPPED"]\n'
    refused += '    assert all(s["commit"] == "c" for s in skipped)\n'
    assert vacuous_asserts(refused) == [(3, "skipped")]
    assert vacuous_asserts("def test_x(steps):\n    assert not any(s.failed for s in steps)\n") == [(2, "steps")]
    for fine in (
        "def test_x(found):\n    assert len(found) == 2\n    assert all(f.ok for f in found)\n",
        "def test_x(found):\n    assert found and all(f.ok for f in found)\n",
        "def test_x(found):\n    assert found == [1]\n    assert all(f for f in found)\n",
        "def test_x():\n    assert all(n > 0 for n in (1, 2))\n",
        "def test_x(found):\n    assert any(f.ok for f in found)\n",
    ):
        assert vacuous_asserts(fine) == [], fine


def test_no_test_asserts_over_a_collection_it_never_checked() -> None:
    files = sorted(TESTS.rglob("*.py"))
    assert len(files) > 100
    found = [
        f"{path.relative_to(TESTS)}:{line}: {what}"
        for path in files
        for line, what in vacuous_asserts(path.read_text())
    ]
    assert found == [], "check the collection's size or contents first:\n" + "\n".join(found)
