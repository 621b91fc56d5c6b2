"""A plan: a goal drafted into tasks and the ``BLOCKED_BY`` edges between them, which a
person reviews before any of it is enqueued.

The model is pure: ``from_answer`` (a planner's answer), ``add_task``, ``add_edge``,
``edit_task``, ``drop_task`` and ``validate`` build and check the same ``Plan`` whoever
drafts it (the planner role, a person at the CLI or the board, a tool on a channel). Its
validation is the breakdown's (``roles.breakdown``: the answer block, each task's fields,
``tasks.new_task``'s limits) plus what a graph needs: every blocker is a task of the plan,
no task waits on itself through others (no cycle), at most ``MAX_PLAN_TASKS`` tasks.

A plan is the store's record ``plans/PLAN-<n>``, changed by compare-and-swap and validated
again after every edit; approving it is a journal (``plan-approval``) that whoever comes
next finishes, enqueueing each task once (docs/plan.md, "Approving exactly once").
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from ..model.exceptions import IllegalTransition, InvalidInput, InvalidTask, RecordChanged
from ..model.tasks import (
    DEFAULT_BRANCH,
    DEFAULT_PRIORITY,
    DEFAULT_ROLE,
    format_time,
    task_label,
    utcnow,
)
from ..queue import adopt
from ..queue import machine as queue_utils
from ..queue.store.records import Journal, JournalKind
from . import breakdown

MAX_PLAN_TASKS = 30  # a goal needing more is several goals: plan them one at a time
ANSWER_KEYS = {"title", "context", "criteria", "priority", "role", "depends_on"}
ID_RE = re.compile(r"PLAN-([1-9][0-9]{0,8})")
KEY_RE = re.compile(r"T([1-9][0-9]{0,3})")
DRAFT, APPROVING, APPROVED, DISCARDED = "draft", "approving", "approved", "discarded"
FAMILY = "plans"  # the records' family
APPROVAL = "plan-approval"  # the journal's kind
CREATE = "create"  # its steps: create-<key> for each task, then approved


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
    keys = ", ".join(t.key for t in plan.tasks) or "none"
    raise InvalidInput(f"{plan.id} has no task {key!r}; its tasks are {keys}")


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


# --- storage --------------------------------------------------------------------------


def _key(plan_id: str) -> str:
    return f"{FAMILY}/{plan_id}"


def draft(goal: str, branch: str = DEFAULT_BRANCH, planned_by: str = "") -> Plan:
    """An empty plan, not stored yet (``add`` gives it an id once it holds tasks)."""
    return Plan("PLAN-?", goal, branch=branch, created=format_time(utcnow()), planned_by=planned_by)


def add(plan: Plan) -> Plan:
    """Store a valid new plan under the next free id: a record that must not exist yet, so
    two planners at once (on any machines) never share an id."""
    validate(plan)
    records = adopt.store().records
    while True:
        used = [int(m.group(1)) for key in records.list(FAMILY) if (m := _id_match(key))]
        plan.id = f"PLAN-{max(used, default=0) + 1}"
        try:
            records.write(_key(plan.id), asdict(plan), None)
        except RecordChanged:
            continue  # another planner took this id
        return plan


def _id_match(key: str) -> re.Match[str] | None:
    return ID_RE.fullmatch(key.removeprefix(f"{FAMILY}/"))


def load(plan_id: str) -> Plan:
    plan_id = normalize_plan_id(plan_id)
    found = adopt.store().records.read(_key(plan_id))
    if found is None:
        raise InvalidInput(f"no plan {plan_id}; `octopoid plan list` shows them")
    return _plan(plan_id, found.value)


def _plan(plan_id: str, data: dict[str, Any]) -> Plan:
    try:
        fields = {k: v for k, v in data.items() if k not in ("tasks", "creating")}
        return Plan(**fields, tasks=[Planned(**t) for t in data["tasks"]])
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise InvalidInput(f"{plan_id} cannot be read: {exc}") from None


def all_plans() -> list[Plan]:
    """Every readable plan, oldest first (one read of the store)."""
    found = []
    for key, record in adopt.store().records.list(FAMILY).items():
        if _id_match(key):
            with contextlib.suppress(InvalidInput):
                found.append(_plan(key.removeprefix(f"{FAMILY}/"), record.value))
    return sorted(found, key=lambda p: int(p.id.removeprefix("PLAN-")))


def normalize_plan_id(plan_id: str) -> str:
    """``PLAN-3``, ``plan-3`` or ``3`` as ``PLAN-3``; anything else is refused here."""
    text = plan_id.strip().upper()
    text = text if text.startswith("PLAN-") else f"PLAN-{text}"
    if not ID_RE.fullmatch(text):
        raise InvalidInput(f"{plan_id[:40]!r} is not a plan id (PLAN-<number>)")
    return text


def _changed(plan_id: str, change: Callable[[Plan], object]) -> Plan:
    """``change`` applied to the stored plan by compare-and-swap (it may run again if
    someone else wrote meanwhile: it only changes the plan it is given); the plan after."""
    plan_id = load(plan_id).id

    def apply(data: dict[str, Any] | None) -> dict[str, Any]:
        plan = _plan(plan_id, data or {})
        change(plan)
        return asdict(plan)

    record = adopt.store().records.update(_key(plan_id), apply)
    assert record is not None  # ``apply`` never deletes
    return _plan(plan_id, record.value)


def edit(plan_id: str, change: Callable[[Plan], object]) -> Plan:
    """Apply ``change`` to a draft; kept only if the result validates."""

    def edited(plan: Plan) -> None:
        _must_be_draft(plan)
        change(plan)
        validate(plan)

    return _changed(plan_id, edited)


def discard(plan_id: str) -> Plan:
    def discarded(plan: Plan) -> None:
        _must_be_draft(plan)
        plan.state = DISCARDED

    return _changed(plan_id, discarded)


def approve(plan_id: str, actor: str = "human") -> list[str]:
    """Enqueue the plan's tasks, each after its blockers with ``BLOCKED_BY`` their ids;
    the created tasks' labels. Exactly once: run again after a kill, it finishes the
    journal; after it finished, it is refused; while another process runs it,
    ``JournalBusy``."""
    plan_id = load(plan_id).id
    journals = adopt.store().journals
    with journals.take(APPROVAL, plan_id) as journal:
        if journal is None:
            plan = _changed(plan_id, _start_approving)
            store = queue_utils.get_store()
            ids = {t.key: plan.created_ids.get(t.key) or store.allocate_id() for t in order(plan)}
            steps = [*(f"{CREATE}-{key}" for key in ids), APPROVED]
            journal = journals.begin(APPROVAL, plan_id, steps, {"by": actor, "ids": ids})
        journals.run(journal, APPROVAL_KIND)
    made = journal.data["ids"]
    return [task_label(made[t.key]) for t in load(plan_id).tasks]


def _start_approving(plan: Plan) -> None:
    """A draft (checked once more) turns ``approving``: no edit reaches it after this."""
    if plan.state == DRAFT:
        validate(plan)
        plan.state = APPROVING
    elif plan.state != APPROVING:  # an approve killed before it wrote its journal
        _must_be_draft(plan)


def _create(journal: Journal, step: str) -> None:
    """The plan's task ``create-<key>`` under the id its journal gave it, unless it exists
    (created before its approve was killed)."""
    plan, ids = load(journal.key), journal.data["ids"]
    t = task_of(plan, step.removeprefix(f"{CREATE}-"))
    if queue_utils.get_store().locate(ids[t.key]) is not None:
        return
    queue_utils.create_task(
        t.title,
        role=t.role,
        context=t.context,
        criteria=t.criteria,
        priority=t.priority,
        branch=plan.branch,
        created_by=f"{plan.id} {t.key} (approved by {journal.data['by']})",
        blocked_by=[ids[b] for b in t.blocked_by],
        task_id=ids[t.key],
    )


def _approved(journal: Journal, step: str) -> None:
    """The plan ``approved``, with the ids of its tasks."""
    ids = journal.data["ids"]
    _changed(journal.key, lambda plan: _mark_approved(plan, ids))


def _mark_approved(plan: Plan, ids: dict[str, str]) -> None:
    plan.state, plan.created_ids = APPROVED, dict(ids)


#: an approval's steps for the store's journal runner (``create-<key>`` runs ``create``)
APPROVAL_KIND = JournalKind(APPROVAL, {CREATE: _create, APPROVED: _approved})


def _must_be_draft(plan: Plan) -> None:
    if plan.state == APPROVED:
        made = ", ".join(task_label(i) for i in plan.created_ids.values())
        raise IllegalTransition(f"{plan.id} was approved already; its tasks are {made}")
    if plan.state != DRAFT:
        raise IllegalTransition(f"{plan.id} is {plan.state}, not a draft")
