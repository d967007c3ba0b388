"""Which methods of vLLM's engine core one step of its busy loop runs, read from the real source with `ast`.

The engine process steps through `self.step_fn`, which vLLM points at `step`, or at `step_with_batch_queue` where the
engine schedules asynchronously (vLLM's default on a GPU: "Asynchronous scheduling is enabled"). A change planted to
slow every engine step must sit on the path of each, or a night serving it measures an unchanged engine: a sleep in
`step` alone is never run on a GPU.
"""

from __future__ import annotations

import ast

ENGINE_PROCESS = "EngineCoreProc"  # the class the API server's engine process runs (one data-parallel rank)
BUSY_LOOP = "run_busy_loop"
STEP_FUNCTION = "step_fn"


def steps_reaching_change(before: str, after: str) -> dict[str, bool]:
    """For each step function the engine core may choose, whether a step through it can reach the first line that
    `after` (vllm/v1/engine/core.py with a change) changed from `before`."""
    line = _first_changed_line(before, after)
    lineage = _lineage_in(ast.parse(after), ENGINE_PROCESS)
    methods = _methods(lineage)
    return {
        arm: any(_holds(methods[name], line) for name in reached)
        for arm, reached in _step_paths(lineage, methods).items()
    }


def step_paths(source: str) -> dict[str, frozenset[str]]:
    """Each step function `self.step_fn` may be (the arms of its conditional assignment), with the methods a step of
    the busy loop runs when it is that one."""
    lineage = _lineage_in(ast.parse(source), ENGINE_PROCESS)
    return _step_paths(lineage, _methods(lineage))


def _step_paths(lineage: list[ast.ClassDef], methods: dict[str, ast.FunctionDef]) -> dict[str, frozenset[str]]:
    return {arm: _reached(methods, BUSY_LOOP, arm) for arm in _step_functions(lineage)}


def _lineage_in(tree: ast.Module, name: str) -> list[ast.ClassDef]:
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    if name not in classes:
        raise AssertionError(f"no class {name} in the engine core's source: the tree moved it")
    return _lineage(classes, name)


def _methods(lineage: list[ast.ClassDef]) -> dict[str, ast.FunctionDef]:
    """The methods of the first class of `lineage` and of its bases, as Python resolves them."""
    found: dict[str, ast.FunctionDef] = {}
    for base in reversed(lineage):  # a subclass's method replaces its base's
        found |= {node.name: node for node in base.body if isinstance(node, ast.FunctionDef)}
    return found


def _lineage(classes: dict[str, ast.ClassDef], name: str) -> list[ast.ClassDef]:
    """The class, then its bases found in the file, depth first (the single-inheritance chain the engine uses)."""
    chain = [classes[name]]
    for base in classes[name].bases:
        if isinstance(base, ast.Name) and base.id in classes:
            chain += _lineage(classes, base.id)
    return chain


def _step_functions(lineage: list[ast.ClassDef]) -> tuple[str, ...]:
    """The methods `self.step_fn = (self.A if ... else self.B)` chooses between, wherever in the lineage it is set (the
    base's `__init__`, which the subclass's own calls)."""
    for cls in lineage:
        for node in ast.walk(cls):
            if (
                isinstance(node, ast.Assign)
                and any(_self_attribute(target) == STEP_FUNCTION for target in node.targets)
                and isinstance(node.value, ast.IfExp)
            ):
                arms = (_self_attribute(node.value.body), _self_attribute(node.value.orelse))
                return tuple(arm for arm in arms if arm)
    raise AssertionError(f"no conditional `self.{STEP_FUNCTION} = ...` in the engine core: the tree steps otherwise")


def _reached(methods: dict[str, ast.FunctionDef], start: str, step_function: str) -> frozenset[str]:
    """The methods of `methods` a call of `start` runs through `self.NAME(...)` calls, `self.step_fn()` being
    `step_function`."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        name = todo.pop()
        if name in seen or name not in methods:
            continue
        seen.add(name)
        for node in ast.walk(methods[name]):
            if isinstance(node, ast.Call) and (called := _self_attribute(node.func)):
                todo.append(step_function if called == STEP_FUNCTION else called)
    return frozenset(seen)


def _self_attribute(node: ast.expr) -> str:
    """NAME where `node` is `self.NAME`, else the empty string."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return ""


def _first_changed_line(before: str, after: str) -> int:
    old, new = before.splitlines(), after.splitlines()
    for number, (was, now) in enumerate(zip(old, new, strict=False), start=1):
        if was != now:
            return number
    if len(old) == len(new):
        raise AssertionError("the change leaves the engine core's source as it was")
    return min(len(old), len(new)) + 1


def _holds(method: ast.FunctionDef, line: int) -> bool:
    """Whether `line` is in the method's body (a function nested in it counts as the method's: a closure the step
    never calls would be taken as run, which no planted change here does)."""
    return method.lineno <= line <= (method.end_lineno or method.lineno)
