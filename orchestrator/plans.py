"""A plan: a goal drafted into tasks and the ``BLOCKED_BY`` edges between them, which a
person reviews before any of it is enqueued.

The model is pure: ``from_answer`` (a planner's answer), ``add_task``, ``add_edge``,
``edit_task``, ``drop_task`` and ``validate`` build and check the same ``Plan`` whoever
drafts it (the planner role, a person at the CLI or the board, a tool on a channel). Its
validation is the breakdown's (``roles.breakdown``: the answer block, each task's fields,
``tasks.new_task``'s limits) plus what a graph needs: every blocker is a task of the plan,
no task waits on itself through others (no cycle), at most ``MAX_PLAN_TASKS`` tasks.

A plan is kept as ``runtime/plans/PLAN-<n>.json`` (atomic write and fsync), changed under
its lock and validated again after every edit. Approving is a journal, not a hope: the
plan says ``approving`` before the first task is created, names the task it is about to
create (``creating``) before creating it, and records each created id right after; a
task's ``CREATED_BY`` names its plan and key, so an approve killed between a create and
its record finds that task instead of creating it again.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import config, queue_utils
from .exceptions import IllegalTransition, InvalidInput, InvalidTask
from .fsutil import atomic_write, fsync_dir, write_temp
from .locks import holding
from .roles import breakdown
from .tasks import (
    DEFAULT_BRANCH,
    DEFAULT_PRIORITY,
    DEFAULT_ROLE,
    TaskState,
    format_time,
    task_label,
    utcnow,
)

MAX_PLAN_TASKS = 30  # a goal needing more is several goals: plan them one at a time
ANSWER_KEYS = {"title", "context", "criteria", "priority", "role", "depends_on"}
ID_RE = re.compile(r"PLAN-([1-9][0-9]{0,8})")
KEY_RE = re.compile(r"T([1-9][0-9]{0,3})")
DRAFT, APPROVING, APPROVED, DISCARDED = "draft", "approving", "approved", "discarded"


@dataclass
class Planned:
    """One drafted task; ``blocked_by`` names other tasks of the plan by key."""

    key: str
    title: str
    context: str = ""
    criteria: list[str] = field(default_factory=list)
    priority: str = DEFAULT_PRIORITY
    role: str = DEFAULT_ROLE
    blocked_by: list[str] = field(default_factory=list)


@dataclass
class Plan:
    id: str
    goal: str
    tasks: list[Planned] = field(default_factory=list)
    branch: str = DEFAULT_BRANCH
    state: str = DRAFT
    created: str = ""
    planned_by: str = ""
    created_ids: dict[str, str] = field(default_factory=dict)  # key -> task id, on approve
    creating: str | None = None  # the key whose task may exist but is not recorded yet


# --- the model ------------------------------------------------------------------------


def from_answer(plan: Plan, output: str) -> Plan:
    """``plan`` with the tasks of the last ```plan block of ``output``; ``depends_on``
    names tasks by position (1 is the first), in any order; ``InvalidTask`` says why not."""
    fix = "plan a smaller goal, or fewer, larger tasks"
    items = breakdown.read_block(output, "plan", MAX_PLAN_TASKS, "tasks", fix)
    keys, edges = [], []
    for n, item in enumerate(items, 1):
        fields = breakdown.read_item(f"task {n}", item, ANSWER_KEYS)
        optional = {k: fields[k] for k in ("priority", "role") if fields[k] is not None}
        keys.append(
            add_task(plan, fields["title"], fields["context"], fields["criteria"], **optional)
        )
        edges += [(d, n) for d in fields["depends_on"] or []]
    for d, n in edges:
        if not 1 <= d <= len(items):
            raise InvalidTask(f"task {n} depends on {d}: the plan has tasks 1 to {len(items)}")
        add_edge(plan, keys[d - 1], keys[n - 1])
    validate(plan)
    return plan


def add_task(
    plan: Plan,
    title: str,
    context: str = "",
    criteria: list[str] | None = None,
    priority: str = DEFAULT_PRIORITY,
    role: str = DEFAULT_ROLE,
) -> str:
    """Draft a task into ``plan``; its key (``T<n>``, never one in use)."""
    used = [int(m.group(1)) for t in plan.tasks if (m := KEY_RE.fullmatch(t.key))]
    key = f"T{max(used, default=0) + 1}"
    plan.tasks.append(Planned(key, title, context, list(criteria or []), priority, role))
    return key


def add_edge(plan: Plan, blocker: str, dependant: str) -> None:
    """``dependant`` waits for ``blocker`` (both keys of ``plan``)."""
    waiting = task_of(plan, dependant)
    task_of(plan, blocker)
    if blocker not in waiting.blocked_by:
        waiting.blocked_by.append(blocker)


def edit_task(plan: Plan, key: str, **changes: object) -> None:
    """Change a drafted task's title, context, criteria, priority, role or blockers."""
    task = task_of(plan, key)
    for name, value in changes.items():
        if name not in {"title", "context", "criteria", "priority", "role", "blocked_by"}:
            raise InvalidInput(f"a planned task has no field {name!r}")
        setattr(task, name, list(value) if isinstance(value, list | tuple) else value)


def drop_task(plan: Plan, key: str) -> None:
    """Remove a drafted task and every edge to it."""
    plan.tasks.remove(task_of(plan, key))
    for task in plan.tasks:
        task.blocked_by = [b for b in task.blocked_by if b != key]


def task_of(plan: Plan, key: str) -> Planned:
    for task in plan.tasks:
        if task.key == key:
            return task
    raise InvalidInput(f"{plan.id} has no task {key!r}; its tasks are {_keys(plan)}")


def validate(plan: Plan) -> None:
    """``InvalidTask`` unless every task would be a valid task and the edges a graph the
    queue can run: no dangling blocker, no cycle, 1 to ``MAX_PLAN_TASKS`` tasks."""
    if not plan.tasks:
        raise InvalidTask(f"{plan.id} has no tasks")
    if len(plan.tasks) > MAX_PLAN_TASKS:
        raise InvalidTask(f"{len(plan.tasks)} tasks; a plan holds at most {MAX_PLAN_TASKS}")
    keys = {t.key for t in plan.tasks}
    for t in plan.tasks:
        _check_types(t)
        fields = {"context": t.context, "criteria": t.criteria, "priority": t.priority}
        breakdown.check_new(t.key, t.title, role=t.role, branch=plan.branch, **fields)
        for b in t.blocked_by:
            if b == t.key:
                raise InvalidTask(f"{t.key} is blocked by itself")
            if b not in keys:
                raise InvalidTask(f"{t.key} is blocked by {b}, which the plan does not have")
    order(plan)


def _check_types(t: Planned) -> None:
    """A tool may hand over anything: text where text belongs, lists of text."""
    texts = (t.key, t.title, t.context, t.priority, t.role)
    lists = (t.criteria, t.blocked_by)
    if not all(isinstance(v, str) for v in texts) or not all(
        isinstance(v, list) and all(isinstance(i, str) for i in v) for v in lists
    ):
        raise InvalidTask(
            f"{t.key!r}: title, context, priority and role must be text, "
            "criteria and blocked_by lists of text"
        )


def order(plan: Plan) -> list[Planned]:
    """The tasks with each after its blockers (the plan's order otherwise);
    ``InvalidTask`` naming a cycle if there is one."""
    placed: dict[str, Planned] = {}
    left = list(plan.tasks)
    while left:
        ready = [t for t in left if all(b in placed for b in t.blocked_by)]
        if not ready:
            raise InvalidTask(f"the blockers form a cycle: {_cycle(left)}")
        for t in ready:
            placed[t.key] = t
        left = [t for t in left if t.key not in placed]
    return list(placed.values())


def _cycle(left: list[Planned]) -> str:
    """One cycle among tasks none of which can go first, as ``T1 → T2 → T1``."""
    by_key = {t.key: t for t in left}
    path, node = [], left[0].key
    while node not in path:
        path.append(node)
        node = next(b for b in by_key[node].blocked_by if b in by_key)
    loop = path[path.index(node) :]
    return " → ".join([*loop, node])


def _keys(plan: Plan) -> str:
    return ", ".join(t.key for t in plan.tasks) or "none"


# --- storage --------------------------------------------------------------------------


def plans_dir() -> Path:
    return config.get_orchestrator_dir() / "plans"


def draft(goal: str, branch: str = DEFAULT_BRANCH, planned_by: str = "") -> Plan:
    """An empty plan, not stored yet (``add`` gives it an id once it holds tasks)."""
    return Plan("PLAN-?", goal, branch=branch, created=format_time(utcnow()), planned_by=planned_by)


def add(plan: Plan) -> Plan:
    """Store a valid new plan under the next free id. Written whole to a temporary file
    first, then linked to its name (a link never replaces a file): a planner killed here
    leaves no empty plan, and two at once never share an id."""
    validate(plan)
    folder = plans_dir()
    folder.mkdir(parents=True, exist_ok=True)
    while True:
        used = [int(m.group(1)) for p in folder.glob("PLAN-*.json") if (m := ID_RE.match(p.stem))]
        plan.id = f"PLAN-{max(used, default=0) + 1}"
        staged = write_temp(_path(plan.id), json.dumps(asdict(plan), indent=1).encode())
        try:
            os.link(staged, _path(plan.id))
        except FileExistsError:
            continue  # another planner took this id
        finally:
            staged.unlink(missing_ok=True)
        fsync_dir(folder)
        return plan


def save(plan: Plan) -> Plan:
    atomic_write(_path(plan.id), json.dumps(asdict(plan), indent=1))
    return plan


def load(plan_id: str) -> Plan:
    plan_id = normalize_plan_id(plan_id)
    try:
        data = json.loads(_path(plan_id).read_text(encoding="utf-8"))
        tasks = [Planned(**t) for t in data.pop("tasks")]
        return Plan(**data, tasks=tasks)
    except FileNotFoundError:
        raise InvalidInput(f"no plan {plan_id}; `octopoid plan list` shows them") from None
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise InvalidInput(f"{plan_id} cannot be read: {exc}") from None


def all_plans() -> list[Plan]:
    """Every readable plan, oldest first."""
    found = []
    for path in plans_dir().glob("PLAN-*.json"):
        if ID_RE.fullmatch(path.stem):
            with contextlib.suppress(InvalidInput):
                found.append(load(path.stem))
    return sorted(found, key=lambda p: int(p.id.removeprefix("PLAN-")))


def normalize_plan_id(plan_id: str) -> str:
    """``PLAN-3``, ``plan-3`` or ``3`` as ``PLAN-3``; anything else is refused here."""
    text = plan_id.strip().upper()
    text = text if text.startswith("PLAN-") else f"PLAN-{text}"
    if not ID_RE.fullmatch(text):
        raise InvalidInput(f"{plan_id[:40]!r} is not a plan id (PLAN-<number>)")
    return text


def edit(plan_id: str, change: Callable[[Plan], object]) -> Plan:
    """Apply ``change`` to a draft under its lock; saved only if the result validates."""
    with _locked(plan_id) as plan:
        _must_be_draft(plan)
        change(plan)
        validate(plan)
        return save(plan)


def discard(plan_id: str) -> Plan:
    with _locked(plan_id) as plan:
        _must_be_draft(plan)
        plan.state = DISCARDED
        return save(plan)


def approve(plan_id: str, actor: str = "human") -> list[str]:
    """Enqueue the plan's tasks, each after its blockers with ``BLOCKED_BY`` their ids;
    the created tasks' labels. Exactly once: run again after a kill, it finishes the
    journal; after it finished, it is refused."""
    with _locked(plan_id) as plan:
        if plan.state == DRAFT:
            validate(plan)
            plan.state = APPROVING
            save(plan)
        elif plan.state != APPROVING:
            _must_be_draft(plan)
        for t in order(plan):
            if t.key not in plan.created_ids:
                plan.created_ids[t.key] = _create(plan, t, actor)
        plan.state, plan.creating = APPROVED, None
        save(plan)
        return [task_label(plan.created_ids[t.key]) for t in plan.tasks]


def _create(plan: Plan, t: Planned, actor: str) -> str:
    """Create one task (or find the one a killed approve created) and record its id."""
    marker = f"{plan.id} {t.key} (approved by {actor})"
    found = _created_before(plan, t.key) if plan.creating == t.key else None
    if found is None:
        plan.creating = t.key
        save(plan)
        found = queue_utils.create_task(
            t.title,
            role=t.role,
            context=t.context,
            criteria=t.criteria,
            priority=t.priority,
            branch=plan.branch,
            created_by=marker,
            blocked_by=[plan.created_ids[b] for b in t.blocked_by],
        ).id
    plan.created_ids[t.key], plan.creating = found, None
    save(plan)
    return found


def _created_before(plan: Plan, key: str) -> str | None:
    """The task an approve killed after its create made for ``key`` (its CREATED_BY names
    the plan and key), wherever it went since; a rare path, so every queue is read."""
    prefix = f"{plan.id} {key} "
    store = queue_utils.get_store()
    for state in TaskState:
        if state is TaskState.QUARANTINE:
            continue
        for task in store.list(state):
            if task.headers.get("CREATED_BY", "").startswith(prefix):
                return task.id
    return None


def _must_be_draft(plan: Plan) -> None:
    if plan.state == APPROVED:
        made = ", ".join(task_label(i) for i in plan.created_ids.values())
        raise IllegalTransition(f"{plan.id} was approved already; its tasks are {made}")
    if plan.state != DRAFT:
        raise IllegalTransition(f"{plan.id} is {plan.state}, not a draft")


@contextlib.contextmanager
def _locked(plan_id: str) -> Iterator[Plan]:
    load(plan_id)  # "no plan ..." before a lock file is made for an id that has none
    plan_id = normalize_plan_id(plan_id)
    with holding(plans_dir() / f"{plan_id}.lock"):
        yield load(plan_id)


def _path(plan_id: str) -> Path:
    return plans_dir() / f"{plan_id}.json"
