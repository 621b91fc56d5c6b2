"""``octopoid init``: lay out ``.octopoid/`` and the runtime folders, idempotently."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from .config import OCTOPOID_DIR
from .fsutil import atomic_write
from .intake import check_work_tree
from .store import FolderStore
from .tasks import TaskState

TEMPLATE_FILES = ("config.yaml", "agents.yaml", "prompts/implement.md", "prompts/breakdown.md")
RUNTIME_DIRS = ("shared/notes", "memory", "worktrees", "logs", "agents")


def init_project(root: Path, *, require_git: bool = False) -> list[Path]:
    """Create what is missing under ``root/.octopoid``; return what was created.

    Existing files are never overwritten, so running it twice changes nothing.
    ``require_git`` (the CLI) first refuses a ``root`` that is not the top of a git work
    tree, where every attempt would fail; Python callers (tests) may use a plain folder.
    """
    if require_git:
        check_work_tree(root)
    base = root / OCTOPOID_DIR
    created: list[Path] = []
    templates = resources.files("orchestrator") / "templates"
    for name in TEMPLATE_FILES:
        target = base / name
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(target, (templates / name).read_text(encoding="utf-8"))
            created.append(target)
    ignore = base / ".gitignore"
    if not ignore.exists():
        atomic_write(ignore, "runtime/\n")
        created.append(ignore)
    runtime = base / "runtime"
    for sub in ("queue", *RUNTIME_DIRS):
        if not (runtime / sub).is_dir():
            (runtime / sub).mkdir(parents=True)
            created.append(runtime / sub)
    queue = FolderStore(runtime / "queue")
    missing = [queue.dir(s) for s in TaskState if not queue.dir(s).is_dir()]
    queue.initialize()
    created.extend(missing)
    return created
