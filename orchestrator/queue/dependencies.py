"""Which waiting tasks are blocked, by what, and which of them cannot run as things stand.

A task in incoming waits until every task in its ``BLOCKED_BY`` is done. It is *stuck* when
that cannot happen by itself: a blocker is missing, failed, rejected or quarantined; it
waits, directly or not, on a stuck task; or its blockers form a cycle. A task whose blocker
failed or was rejected is *held* by it, and says so: a retry of that blocker that succeeds
releases it (and every task held through it). ``enqueue`` refuses a blocker that does not
exist, and a new task's id does not exist before it is created, so missing blockers and
cycles come only from files edited by hand. Read-only: the faces show
this report (`octopoid list`, `show`, `status`); nothing here moves a task.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Sequence
from functools import cache
from typing import Any, NamedTuple, Protocol

from ..model.tasks import Task, TaskState, task_label
from .store import get_store

S = TaskState
#: States of a blocker that hold its dependants until a retry of it succeeds.
HOLDING = {S.FAILED: "failed", S.REJECTED: "was rejected"}

HAND_DONE = "move it back where it was and finish it with octopoid"
Pending = list[tuple[str, TaskState | None]]  # (blocker id, where it is; None: nowhere)


class HasBlockers(Protocol):
    """A waiting task as far as blocking goes: a ``Task``, or a claim index row."""

    id: str
    blocked_by: list[str]


class Blockage(NamedTuple):
    """Why an incoming task cannot be claimed yet."""

    waiting_on: tuple[tuple[str, str], ...]  # (blocker label, its state or "missing")
    stuck: str | None = None  # why it never will be, as things stand; None while it waits

    def describe(self) -> str:
        """``blocked by TASK-3 (in claimed), TASK-4 (missing); stuck: ...``"""
        on = ", ".join(
            f"{label} ({where if where == 'missing' else 'in ' + where})"
            for label, where in self.waiting_on
        )
        return f"blocked by {on}" + (f"; stuck: {self.stuck}" if self.stuck else "")


def blocked_report(incoming: Sequence[HasBlockers] | None = None) -> dict[str, Blockage]:
    """Every blocked task of ``incoming`` (tasks, or the claim index's rows; default: the
    incoming queue as the index knows it), by id."""
    store = get_store()
    tasks = store.waiting(titled=False) if incoming is None else incoming
    where, released = cache(store.locate), cache(store.released)
    waiting: dict[str, Pending] = {}
    for task in tasks:
        pending = [(b, where(b)) for b in task.blocked_by if not released(b)]
        if pending:
            waiting[task.id] = pending
    stuck = _stuck(waiting)
    return {
        tid: Blockage(
            tuple((task_label(b), state.value if state else "missing") for b, state in pending),
            stuck.get(tid),
        )
        for tid, pending in waiting.items()
    }


def blockage_of(task: Task) -> Blockage | None:
    """What ``task`` waits for, when it waits in incoming on unfinished tasks; else None."""
    if task.state is not S.INCOMING or not task.blocked_by:
        return None
    return blocked_report().get(task.id)


def blocked_summary(incoming: Sequence[HasBlockers] | None = None) -> dict[str, Any]:
    """For `octopoid status`: how many waiting tasks are blocked, and the stuck ones, why."""
    report = blocked_report(incoming)
    stuck = [{"id": task_label(t), "why": b.stuck} for t, b in report.items() if b.stuck]
    return {"count": len(report), "waiting": [task_label(t) for t in report], "stuck": stuck}


def _stuck(waiting: dict[str, Pending]) -> dict[str, str]:
    """Why each stuck task is stuck: a dead-end blocker first, then cycles, then contagion."""
    reasons = {tid: why for tid, pending in waiting.items() if (why := _dead_end(pending))}
    holders = {tid: _holder(pending) for tid, pending in waiting.items() if tid in reasons}
    edges = {
        tid: [b for b, state in pending if state is S.INCOMING and b in waiting]
        for tid, pending in waiting.items()
    }
    dependents: dict[str, list[str]] = defaultdict(list)
    for tid, blockers in edges.items():
        for blocker in blockers:
            dependents[blocker].append(tid)
    for tid, cycle in _cycles(edges, dependents).items():
        start = cycle.index(tid)
        loop = " → ".join(task_label(t) for t in [*cycle[start:], *cycle[: start + 1]])
        reasons.setdefault(tid, f"its blockers form a cycle, {loop} (edit BLOCKED_BY)")
    spread = deque(reasons)
    while spread:
        blocker = spread.popleft()
        for tid in dependents[blocker]:
            if tid not in reasons:
                held_by = holders[tid] = holders.get(blocker)
                reasons[tid] = (
                    _held(*held_by, through=blocker)
                    if held_by
                    else f"it waits on {task_label(blocker)}, which is stuck"
                )
                spread.append(tid)
    return reasons


def _dead_end(pending: Pending) -> str | None:
    for blocker, state in pending:
        label = task_label(blocker)
        if state is None:
            return f"{label} does not exist (edit BLOCKED_BY)"
        if state in HOLDING:
            return _held(blocker, state)
        if state is S.QUARANTINE:  # a blocker does not leave it by itself
            return f"{label} is in quarantine (fix its file and move it back to incoming)"
        if state is S.DONE:  # and not released: no move of octopoid's put it there
            return f"{label} was put into done/ by hand, so it releases nothing ({HAND_DONE})"
    return None


def _holder(pending: Pending) -> tuple[str, TaskState] | None:
    """The failed or rejected blocker that holds a task, if that is why it is stuck."""
    first = next((p for p in pending if _dead_end([p])), None)
    return first if first is not None and first[1] in HOLDING else None


def _held(blocker: str, state: TaskState, through: str | None = None) -> str:
    """``held by TASK-3, which failed: `octopoid retry TASK-3` releases it once ...``"""
    label = task_label(blocker)
    via = f" (through {task_label(through)})" if through else ""
    return (
        f"held by {label}{via}, which {HOLDING[state]}: "
        f"`octopoid retry {label}` releases it once {label} succeeds"
    )


def _cycles(edges: dict[str, list[str]], dependents: dict[str, list[str]]) -> dict[str, list[str]]:
    """Each task on a cycle of blockers, with that cycle's members in order.

    Tasks that wait on nothing inside the graph are peeled off until only cycles, and the
    tasks behind them, are left; a walk from each leftover task then ends on a cycle.
    """
    left = {tid: len(blockers) for tid, blockers in edges.items()}
    ready = [tid for tid, count in left.items() if count == 0]
    while ready:
        free = ready.pop()
        del left[free]
        for tid in dependents[free]:
            left[tid] -= 1
            if left[tid] == 0:
                ready.append(tid)
    cycles: dict[str, list[str]] = {}
    seen: set[str] = set()
    for start in list(left):
        node, path = start, dict[str, int]()  # node -> its position on this walk
        while node not in seen:
            seen.add(node)
            path[node] = len(path)
            node = next(b for b in edges[node] if b in left)
        if node in path:
            cycle = list(path)[path[node] :]
            cycles.update(dict.fromkeys(cycle, cycle))
    return cycles
