"""A new task's input, checked before anything is written (`octopoid enqueue`'s gatekeeper).

Text typed by a person reaches octopoid through here. click hands undecodable argv bytes
over as lone surrogates, which no UTF-8 file or SQLite row can hold, so they are refused
here with a one-line error rather than failing at write time with a traceback. A context
file is read only when it is a regular file, and never past the task size limit: reading
/dev/zero or a FIFO would not end. Blockers must exist, and the base branch must exist in
the project's repository. Git is asked through the ``git`` command, not GitPython, so
``init`` and ``enqueue`` stay quick to start.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .. import config
from ..base.lazy import lazy_import
from ..base.text import clean_text
from ..model import defaults
from ..model.exceptions import InvalidInput, InvalidTask
from ..model.tasks import (
    DEFAULT_PRIORITY,
    DEFAULT_ROLE,
    Task,
    TaskId,
    TaskState,
    shown,
    split_ids,
    task_label,
)
from . import machine as queue_utils
from .checkout import branch_exists, check_work_tree, current_branch, head_branch

budgets = lazy_import("orchestrator.queue.budgets")  # `--budget` only (~4 M instructions)


def read_context_file(path: Path | str) -> str:
    """The text of ``--context-file``: a regular file (or ``-``, stdin), UTF-8, within limits."""
    what = f"--context-file {shown(str(path))}"
    data = _read_stdin() if str(path) == "-" else _read_regular_file(Path(path), what)
    if len(data) > defaults.MAX_TASK_FILE_BYTES:
        raise InvalidInput(
            f"{what} is larger than {defaults.MAX_TASK_FILE_BYTES} bytes, the task file "
            "limit: put a shorter context, or name the file in the context instead"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(
            f"{what} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}; "
            "binary data?): give a text file"
        ) from None
    return clean_text(text, what)


def _read_stdin() -> bytes:
    return sys.stdin.buffer.read(defaults.MAX_TASK_FILE_BYTES + 1)


def _read_regular_file(path: Path, what: str) -> bytes:
    """At most the size limit + 1 bytes of ``path``, refused unless it is a regular file.

    ``O_NONBLOCK`` lets a FIFO's open return at once, so fstat can refuse it.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        raise InvalidInput(f"cannot read {what}: {exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InvalidInput(
                f"{what} is not a regular file (a device, FIFO or directory): "
                "save the context to a file first"
            )
        with os.fdopen(os.dup(fd), "rb") as f:  # read(n) reads on to n bytes or the end
            return f.read(defaults.MAX_TASK_FILE_BYTES + 1)
    except OSError as exc:
        raise InvalidInput(f"cannot read {what}: {exc.strerror}") from None
    finally:
        os.close(fd)


def check_blockers(new_id: str | None, blocked_by: Iterable[str]) -> list[str]:
    """The blockers as bare ids, each an existing task that is not quarantined. Each item
    may name several, as ``BLOCKED_BY`` does (``--blocked-by TASK-1,TASK-2``).

    A new task's id is allocated when it is created, so it can name itself, or close a
    cycle, only through an id that does not exist yet, and such a blocker is refused as
    missing. Cycles can therefore come only from files edited by hand; ``octopoid list``
    names them (``dependencies.blocked_report``). ``new_id`` is for callers that know it.
    """
    store = queue_utils.get_store()
    ids: list[str] = []
    for raw in (part for item in blocked_by for part in split_ids(item)):
        blocker = TaskId(raw)
        label = task_label(blocker)
        if blocker == new_id:
            raise InvalidTask(f"--blocked-by {label}: a task cannot wait for itself")
        state = store.locate(blocker)
        if state is None:
            raise InvalidTask(f"--blocked-by {label}: no such task (enqueue the blocker first)")
        if state is TaskState.QUARANTINE:
            raise InvalidTask(
                f"--blocked-by {label}: that task is quarantined (unreadable); fix its file "
                "and move it back to incoming first"
            )
        if blocker not in ids:
            ids.append(blocker)
    return ids


def enqueue(
    title: str,
    *,
    role: str = DEFAULT_ROLE,
    priority: str = DEFAULT_PRIORITY,
    branch: str | None = None,
    blocked_by: Iterable[str] = (),
    context: str = "",
    context_file: Path | str | None = None,
    criteria: Iterable[str] = (),
    checks: Iterable[str] = (),
    budget: str = "",
) -> Task:
    """Check a new task's every field, then put it in incoming; nothing is written on error.

    ``branch`` None means the branch checked out in the project; ``budget`` is the task's
    own (``usd=5 turns=100``, budgets.py), in place of config.yaml's budgets.task.
    """
    title = clean_text(title, "the title")
    text = read_context_file(context_file) if context_file else clean_text(context, "--context")
    fields: dict[str, Any] = {
        "role": clean_text(role, "--role"),
        "priority": priority,
        "branch": base_branch(branch, config.find_project_root()),
        "context": text,
        "criteria": [clean_text(c, "--criterion") for c in criteria],
        "checks": [clean_text(c, "--check") for c in checks],
        "blocked_by": check_blockers(None, blocked_by),
        "budget": budgets.given(budget) if budget else None,  # none: budgets not imported
    }
    return queue_utils.create_task(title, **fields)


# --- the project's repository, through the git command ------------------------------------


def base_branch(branch: str | None, root: Path) -> str:
    """The branch a new task starts from: ``branch``, else the one checked out in ``root``.

    It must exist: a task based on a missing branch would fail every attempt.
    """
    if branch is None and (checked_out := head_branch(root)) is not None:
        return checked_out  # the usual case, in one git process
    name = current_branch(root) if branch is None else clean_text(branch, "--branch")
    if name is None:
        check_work_tree(root)
        raise InvalidInput(f"HEAD is detached in {root}: name the base with --branch")
    if not branch_exists(root, name):
        check_work_tree(root)
        raise InvalidInput(
            f"no branch {shown(name)} in {root}: name an existing branch with --branch "
            f"(`git branch` lists them), or commit to {shown(name)} first"
        )
    return name
