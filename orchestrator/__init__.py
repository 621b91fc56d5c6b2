"""octopoid: a task-queue orchestrator for AI coding agents, with per-task retry notes.

``Task``, ``TaskState`` and ``OctopoidError`` are named here for library users, but loaded
on first use (PEP 562): every ``octopoid`` command imports this package first, and
``--help`` or ``scheduler status`` need no task model.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["OctopoidError", "Task", "TaskState"]
__version__ = "0.1.0"

_WHERE = {
    "OctopoidError": "orchestrator.model.exceptions",
    "Task": "orchestrator.model.tasks",
    "TaskState": "orchestrator.model.tasks",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
