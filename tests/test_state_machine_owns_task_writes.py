"""Only the state machine (``queue.machine``) writes tasks: every other module changes a task
through one of its named, fenced moves, so no feature keeps a write around the fences."""

from __future__ import annotations

import ast
from pathlib import Path

import orchestrator

PACKAGE = Path(orchestrator.__file__).parent
TASK_WRITES = {"add", "move", "update", "claim", "quarantine", "rebuild", "sweep", "recover"}
OWNERS = {"queue/machine.py"}  # and the stores themselves (queue/store/)


def _is_store(value: ast.expr) -> bool:
    """``get_store()``, ``open_store(...)``, a name ``store``, or an attribute ``.store``."""
    if isinstance(value, ast.Call):
        func = value.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return name in ("get_store", "open_store")
    if isinstance(value, ast.Name):
        return value.id in ("store", "queue_store")
    return isinstance(value, ast.Attribute) and value.attr in ("store", "_store")


def raw_task_writes(source: str) -> list[str]:
    """The calls of a store's task writes in ``source``, as ``line: code``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in TASK_WRITES
            and _is_store(node.func.value)
        ):
            found.append(f"{node.lineno}: {ast.unparse(node)[:80]}")
    return found


def test_no_module_but_the_state_machine_calls_a_stores_task_writes():
    outside = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[:2] == ("queue", "store") or rel.as_posix() in OWNERS:
            continue
        if found := raw_task_writes(path.read_text(encoding="utf-8")):
            outside[str(rel)] = found
    assert outside == {}, f"write tasks through a named move of queue.machine: {outside}"


def test_the_scan_sees_each_form_of_a_raw_write():
    source = (
        "queue_utils.get_store().update(t, s, f)\n"
        "store.add(task, state)\n"
        "self.store.move(a, b, c, d)\n"
        "store.get(task_id)\n"  # a read is anyone's
        "queue_utils.record_from_forge(t, s, f)\n"
    )
    assert [line.split(":")[0] for line in raw_task_writes(source)] == ["1", "2", "3"]
