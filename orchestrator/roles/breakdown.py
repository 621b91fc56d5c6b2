"""The breakdown role: a burned-out task is split into smaller subtasks by an agent.

A breakdown agent claims a task from ``breakdown/`` (``PHASE: breakdown``), reads it and
its retry notes (why it burned out), and answers with one fenced ```subtasks block
(``ANSWER_FORMAT``), validated strictly before anything is created. A valid one creates
the subtasks in incoming (priority, role and branch inherited), re-points every task that
waited for the original to the last subtask, and moves the original to done with
``SPLIT_INTO``, as one journal of the store (``split``) that whoever comes next finishes if
the split is killed half-way. An invalid one fails the attempt with the validation error
in the notes; the task goes back to breakdown (or to failed once its attempts are spent).
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

from ..base.text import clean_text
from ..model.exceptions import InvalidInput, InvalidTask, OctopoidError
from ..model.ids import from_label
from ..model.tasks import Task, TaskState, new_task, task_label
from ..queue import adopt
from ..queue import machine as queue_utils
from ..queue.leases import claim_token
from ..queue.store.records import Journal, JournalKind
from ..queue.task_notes import add_notes_section
from .base import Ended, Role

MAX_SUBTASKS = 20  # more is not a breakdown but a backlog: a person should plan that
KEYS = {"title", "context", "criteria", "depends_on"}
BLOCK_RE = re.compile(r"^(`{3,})(subtasks|plan)[ \t]*\n(.*?)^\1[ \t]*$", re.M | re.S)
MAX_ANSWER_BYTES = 1 << 20
SPLIT = "split"  # the journal's kind
CREATE, REWIRE, FINISH = "create", "rewire", "finish"  # its steps: create-<n>, then these

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
    items = read_block(output, "subtasks", MAX_SUBTASKS, "subtasks", "split less finely")
    return [_subtask(n, item) for n, item in enumerate(items, 1)]


def read_block(output: str, fence: str, limit: int, noun: str, fix: str) -> list:
    """The JSON list in the last ```<fence> block of ``output``, 1 to ``limit`` items long
    (the breakdown's answer format, shared with the planner's)."""
    blocks = [b for b in BLOCK_RE.findall(output) if b[1] == fence]
    if not blocks:
        raise InvalidTask(f"the answer has no ```{fence} block")
    try:
        items = json.loads(blocks[-1][2])
    except ValueError as exc:
        raise InvalidTask(f"the ```{fence} block is not JSON: {exc}") from None
    if not isinstance(items, list) or not items:
        raise InvalidTask(f"the ```{fence} block must be a non-empty JSON list")
    if len(items) > limit:
        raise InvalidTask(f"{len(items)} {noun}; at most {limit} ({fix})")
    return items


def read_item(where: str, item: object, keys: set[str]) -> dict:
    """One answered task's fields, their types checked (``depends_on`` None when left out);
    ``InvalidTask`` names ``where`` and what is wrong."""
    if not isinstance(item, dict):
        raise InvalidTask(f"{where} must be an object with title, context, criteria")
    unknown = set(item) - keys
    if unknown:
        raise InvalidTask(f"{where} has unknown keys: {', '.join(sorted(unknown))}")
    fields = {"title": item.get("title"), "context": item.get("context", "")}
    fields |= {"criteria": item.get("criteria", []), "depends_on": item.get("depends_on")}
    if not isinstance(fields["title"], str) or not fields["title"].strip():
        raise InvalidTask(f"{where} needs a title")
    for key in keys - {"title", "criteria", "depends_on"}:
        if key in item and not isinstance(item[key], str):
            raise InvalidTask(f"{where}: {key} must be text")
        fields.setdefault(key, item.get(key))
    criteria, depends = fields["criteria"], fields["depends_on"]
    if not isinstance(criteria, list) or not all(isinstance(c, str) for c in criteria):
        raise InvalidTask(f"{where}: criteria must be a list of text")
    if depends is not None and (
        not isinstance(depends, list) or not all(type(d) is int for d in depends)
    ):
        raise InvalidTask(f"{where}: depends_on must be a list of task numbers")
    return fields


def _subtask(n: int, item: object) -> Subtask:
    where = f"subtask {n}"
    fields = read_item(where, item, KEYS)
    depends = fields["depends_on"]
    if depends is None:
        depends = [n - 1] if n > 1 else []
    for d in depends:
        if not 1 <= d < n:
            raise InvalidTask(
                f"{where} depends on {d}: only earlier subtasks may be named (no cycles)"
            )
    return Subtask(fields["title"], fields["context"], fields["criteria"], sorted(set(depends)))


def answer_text(log: Path) -> str:
    """The attempt's whole output (its log), bounded: the answer may be long."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, 2) - MAX_ANSWER_BYTES))
            return f.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""


def split(task: Task, subtasks: list[Subtask], approved_by: str | None = None) -> list[Task]:
    """Create the subtasks, re-point the original's dependants, and move the original to
    done: a breakdown attempt's split (fenced by the claim ``task`` carries), or a person's
    approval of a proposal (``approved_by``). Every subtask is validated (as a task) before
    the first is created.

    A journal (``split``), written first with every step and the id each subtask will
    have: a split killed half-way is finished by whoever comes next (a split of the same
    task again continues it, any scheduler's sweep, `octopoid doctor --repair`), once: a
    subtask that exists was created before the kill, a dependant rewired already waits
    for the last subtask.
    """
    check(task, subtasks)  # refuse the whole answer before creating anything
    token = claim_token(task) or None  # a claimed Task read earlier carries its own
    journals = adopt.store().journals
    with journals.take(SPLIT, task.label) as journal:
        if journal is None:
            ids = [queue_utils.get_store().allocate_id() for _ in subtasks]
            steps = [*(f"{CREATE}-{n}" for n in range(1, len(ids) + 1)), REWIRE, FINISH]
            data = {
                "subtasks": [asdict(sub) for sub in subtasks], "ids": ids,
                "fields": _inherited(task), "approved_by": approved_by,
            }  # fmt: skip
            journal = journals.begin(SPLIT, task.label, steps, data)
        journals.run(journal, SPLIT_KIND.but({FINISH: partial(_finish, token=token)}))
    return queue_utils.readable_tasks(journal.data["ids"])


def _create(journal: Journal, step: str) -> None:
    """Subtask ``n`` (``create-<n>``) under the id its journal gave it, unless it exists
    (made before a kill)."""
    data, n = journal.data, int(step.removeprefix(f"{CREATE}-"))
    ids, sub = data["ids"], Subtask(**data["subtasks"][n - 1])
    if queue_utils.get_store().locate(ids[n - 1]) is not None:
        return
    blockers = [ids[d - 1] for d in sub.depends_on]
    queue_utils.create_task(
        sub.title, context=sub.context, criteria=sub.criteria, blocked_by=blockers,
        created_by=f"breakdown of {journal.key}", task_id=ids[n - 1], **data["fields"],
    )  # fmt: skip


def _rewire(journal: Journal, step: str) -> None:
    """The original's dependants wait for the last subtask (octopoid's rewiring)."""
    old_id, new_id = from_label(journal.key), journal.data["ids"][-1]
    for waiting in queue_utils.get_store().waiting(titled=False):
        if old_id in waiting.blocked_by:
            with contextlib.suppress(OctopoidError):  # claimed or moved: not waiting any more
                queue_utils.rewire_blocker(waiting.id, old_id, new_id, f"split of {journal.key}")


def _finish(journal: Journal, step: str, token: str | None = None) -> None:
    """The original to done, unless it is there already (moved before a kill); fenced by
    the attempt's claim (``token``) when an attempt splits it (the sweep has none)."""
    original, data = from_label(journal.key), journal.data
    if queue_utils.get_store().locate(original) is TaskState.DONE:
        return
    labels = ", ".join(task_label(i) for i in data["ids"])
    by = data.get("approved_by")
    actor = by or (None if token else "octopoid")  # None: the attempt's agent, by its claim
    queue_utils.finish_split(original, labels, actor, approved=by is not None, token=token)


#: a split's steps for the store's journal runner (``create-<n>`` runs ``create``)
SPLIT_KIND = JournalKind(SPLIT, {CREATE: _create, REWIRE: _rewire, FINISH: _finish})


def _inherited(task: Task) -> dict[str, str]:
    return {"role": task.role, "priority": task.priority, "branch": task.branch}


def check(task: Task, subtasks: list[Subtask]) -> None:
    """Every subtask would be a valid task (title, criteria, sizes); ``InvalidTask`` if not."""
    for n, sub in enumerate(subtasks, 1):
        fields = _inherited(task)
        check_new(f"subtask {n}", sub.title, context=sub.context, criteria=sub.criteria, **fields)


def check_new(where: str, title: str, **fields: object) -> None:
    """``title`` with ``fields`` would be a valid new task (``tasks.new_task``'s limits);
    ``InvalidTask`` prefixed with ``where`` if not. An agent's text is checked as a
    person's is (``clean_text``): no NUL or control character reaches a task file."""
    texts = [("the title", title), ("the context", fields.get("context") or "")]
    texts += [("a criterion", c) for c in fields.get("criteria") or [] if isinstance(c, str)]
    try:
        for what, text in texts:
            if isinstance(text, str):
                clean_text(text, what)
        new_task("0", title, **fields)  # type: ignore[arg-type]
    except (InvalidTask, InvalidInput) as exc:
        raise InvalidTask(f"{where}: {exc}") from None


def proposal_text(subtasks: list[Subtask]) -> str:
    """The subtasks as the JSON a person approves (kept in the task's file meanwhile)."""
    return json.dumps([s.__dict__ for s in subtasks], indent=1)


def proposed(task: Task) -> list[Subtask]:
    """The subtasks a held proposal names (``## Proposed Subtasks``)."""
    section = task.section("Proposed Subtasks")
    if section is None:
        raise InvalidTask(f"{task.label} holds no proposed breakdown")
    return parse_answer(section)


def settle(ended: Ended) -> tuple[str, str]:
    """A breakdown attempt's next move: split the task as the agent proposed (or propose
    it, with ``breakdown.approve``), or say why not (back to breakdown, or failed once its
    breakdown attempts are spent)."""
    task, result = ended.task, ended.result
    stop = result.details.get("stop")
    if stop == "LostClaim":
        return "(not ours any more)", result.summary
    try:
        if stop or result.outcome != "success":
            raise InvalidTask(f"the agent did not finish: {result.outcome}: {result.summary}")
        subtasks = parse_answer(answer_text(ended.log))
        if ended.cfg["breakdown"]["approve"]:
            check(task, subtasks)
            queue_utils.propose_split(task, proposal_text(subtasks))
            why = f"{len(subtasks)} subtasks proposed; waiting for `octopoid approve`"
            return TaskState.PROVISIONAL.value, why
        created = split(task, subtasks)
    except InvalidTask as exc:
        why = f"the breakdown was refused: {exc}"
        add_notes_section(task.id, f"Breakdown — attempt {task.attempts}", why)
        if int(task.headers.get("BREAKDOWN_ATTEMPTS") or 0) < ended.agents_cfg["max_attempts"]:
            queue_utils.recycle_to_breakdown(task, why)
            return TaskState.BREAKDOWN.value, why
        queue_utils.fail_task(task, f"breakdown attempts exhausted; {why}")
        return TaskState.FAILED.value, why
    return TaskState.DONE.value, f"split into {', '.join(t.label for t in created)}"


#: the breakdown role, as the attempt runner is handed it
ROLE = Role(ANSWER_FORMAT, "breakdown", settle=settle)
