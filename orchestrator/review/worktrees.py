"""The task worktrees there are, and the queue each one's task is in: what `octopoid
worktrees` lists. Apart from ``verdicts`` (whose ``prune_worktrees`` removes them), so
the list asks no git and imports no state machine."""

from __future__ import annotations

from .. import config
from ..queue.store import get_store


def list_worktrees() -> list[tuple[str, str]]:
    """(TASK-id, state or 'gone') for every task worktree."""
    folder = config.get_worktrees_dir()
    store = get_store()
    out = []
    for path in sorted(folder.glob("TASK-*")) if folder.is_dir() else []:
        state = store.locate(path.name.removeprefix("TASK-"))
        out.append((path.name, state.value if state else "gone"))
    return out
