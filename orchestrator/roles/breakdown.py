"""The breakdown role: a burned-out task is split into smaller subtasks by an agent.

A breakdown agent claims a task from ``breakdown/`` (``PHASE: breakdown``), reads it and
its retry notes (why it burned out), and answers with one fenced block::

    ```subtasks
    [{"title": "...", "context": "...", "criteria": ["..."], "depends_on": [1]}]
    ```

``depends_on`` lists earlier subtasks by their 1-based position; without it a subtask
waits for the one before it, so they run in order. The answer is validated strictly
before anything is created. A valid one creates the subtasks in incoming (priority, role
and branch inherited), re-points every task that waited for the original to the last
subtask, and moves the original to done with ``SPLIT_INTO``. An invalid one fails the
attempt with the validation error in the notes; the task goes back to breakdown (or to
failed once its attempts are spent).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .. import queue_utils
from ..exceptions import InvalidTask, OctopoidError
from ..leases import claim_token
from ..tasks import Task, TaskState, new_task, task_label

MAX_SUBTASKS = 20  # more is not a breakdown but a backlog: a person should plan that
KEYS = {"title", "context", "criteria", "depends_on"}
BLOCK_RE = re.compile(r"^(`{3,})subtasks[ \t]*\n(.*?)^\1[ \t]*$", re.M | re.S)
MAX_ANSWER_BYTES = 1 << 20

ANSWER_FORMAT = f"""## How to answer

Do not implement the task. Split it into 2 to {MAX_SUBTASKS} smaller subtasks that together do it,
each small enough for one attempt, and print them as ONE fenced block of JSON, exactly:

```subtasks
[
  {{"title": "short imperative title", "context": "what to do and what to know",
   "criteria": ["a checkable criterion"], "depends_on": []}},
  {{"title": "...", "context": "...", "criteria": ["..."], "depends_on": [1]}}
]
```

`depends_on` lists earlier subtasks by position (1 is the first); leave it out to wait for
the subtask just before. Use the retry notes above: they say why the task burned out.
"""


@dataclass
class Subtask:
    title: str
    context: str = ""
    criteria: list[str] = field(default_factory=list)
    depends_on: list[int] = field(default_factory=list)


def parse_answer(output: str) -> list[Subtask]:
    """The subtasks in the last ```subtasks block of ``output``; ``InvalidTask`` says why not."""
    blocks = BLOCK_RE.findall(output)
    if not blocks:
        raise InvalidTask("the answer has no ```subtasks block")
    try:
        items = json.loads(blocks[-1][1])
    except ValueError as exc:
        raise InvalidTask(f"the ```subtasks block is not JSON: {exc}") from None
    if not isinstance(items, list) or not items:
        raise InvalidTask("the ```subtasks block must be a non-empty JSON list")
    if len(items) > MAX_SUBTASKS:
        raise InvalidTask(f"{len(items)} subtasks; at most {MAX_SUBTASKS} (split less finely)")
    return [_subtask(n, item) for n, item in enumerate(items, 1)]


def _subtask(n: int, item: object) -> Subtask:
    where = f"subtask {n}"
    if not isinstance(item, dict):
        raise InvalidTask(f"{where} must be an object with title, context, criteria")
    unknown = set(item) - KEYS
    if unknown:
        raise InvalidTask(f"{where} has unknown keys: {', '.join(sorted(unknown))}")
    title, context = item.get("title"), item.get("context", "")
    criteria, depends = item.get("criteria", []), item.get("depends_on")
    if not isinstance(title, str) or not title.strip():
        raise InvalidTask(f"{where} needs a title")
    if not isinstance(context, str):
        raise InvalidTask(f"{where}: context must be text")
    if not isinstance(criteria, list) or not all(isinstance(c, str) for c in criteria):
        raise InvalidTask(f"{where}: criteria must be a list of text")
    if depends is None:
        depends = [n - 1] if n > 1 else []
    if not isinstance(depends, list) or not all(type(d) is int for d in depends):
        raise InvalidTask(f"{where}: depends_on must be a list of subtask numbers")
    for d in depends:
        if not 1 <= d < n:
            raise InvalidTask(
                f"{where} depends on {d}: only earlier subtasks may be named (no cycles)"
            )
    return Subtask(title, context, criteria, sorted(set(depends)))


def answer_text(log: Path) -> str:
    """The attempt's whole output (its log), bounded: the answer may be long."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, 2) - MAX_ANSWER_BYTES))
            return f.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""


def split(
    task: Task,
    subtasks: list[Subtask],
    finish: Callable[[Task, dict[str, str]], Task] | None = None,
) -> list[Task]:
    """Create the subtasks, re-point the original's dependants, and finish the original
    (by default: claimed -> done; ``finish`` does it for an approved proposal).

    Every subtask is validated (as a task) before the first is created.
    """
    check(task, subtasks)  # refuse the whole answer before creating anything
    fields = _inherited(task)
    created: list[Task] = []
    for sub in subtasks:
        blockers = [created[d - 1].id for d in sub.depends_on]
        created.append(
            queue_utils.create_task(
                sub.title,
                context=sub.context,
                criteria=sub.criteria,
                blocked_by=blockers,
                created_by=f"breakdown of {task.label}",
                **fields,
            )
        )
    rewire_dependants(task.id, created[-1].id)
    labels = ", ".join(t.label for t in created)
    (finish or _complete)(task, {"SPLIT_INTO": labels})
    return created


def _inherited(task: Task) -> dict[str, str]:
    return {"role": task.role, "priority": task.priority, "branch": task.branch}


def check(task: Task, subtasks: list[Subtask]) -> None:
    """Every subtask would be a valid task (title, criteria, sizes); ``InvalidTask`` if not."""
    for n, sub in enumerate(subtasks, 1):
        try:
            new_task("0", sub.title, context=sub.context, criteria=sub.criteria, **_inherited(task))
        except InvalidTask as exc:
            raise InvalidTask(f"subtask {n}: {exc}") from None


def _complete(task: Task, headers: dict[str, str]) -> Task:
    reason = f"split into {headers['SPLIT_INTO']}"
    return queue_utils.complete_task(task, reason, token=claim_token(task) or None, headers=headers)


def proposal_text(subtasks: list[Subtask]) -> str:
    """The subtasks as the JSON a person approves (kept in the task's file meanwhile)."""
    return json.dumps([s.__dict__ for s in subtasks], indent=1)


def proposed(task: Task) -> list[Subtask]:
    """The subtasks a held proposal names (``## Proposed Subtasks``)."""
    section = task.section("Proposed Subtasks")
    if section is None:
        raise InvalidTask(f"{task.label} holds no proposed breakdown")
    return parse_answer(section)


def rewire_dependants(old_id: str, new_id: str) -> list[str]:
    """Tasks waiting for ``old_id`` wait for ``new_id`` instead (octopoid's rewiring)."""
    store = queue_utils.get_store()
    rewired = []
    for waiting in store.waiting():
        if old_id not in waiting.blocked_by:
            continue
        blockers = [new_id if b == old_id else b for b in waiting.blocked_by]
        value = ", ".join(task_label(b) for b in dict.fromkeys(blockers))
        try:
            store.update(
                waiting.id, TaskState.INCOMING, lambda t, v=value: t.set_header("BLOCKED_BY", v)
            )
        except OctopoidError:
            continue  # claimed or moved meanwhile: it was not waiting any more
        rewired.append(waiting.id)
    return rewired
