"""The waiting tasks and the usage ledger as both stores read them, in their SQL.

The folder store keeps them in its claim index (SQLite, ``claim_index.py``), PostgreSQL
in its tasks table: the same columns, so one ``TaskQueries`` reads either in its own
words.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any, NamedTuple

from ...model.tasks import PRIORITIES, TaskState


class Waiting(NamedTuple):
    """A waiting task as the index knows it: enough for blocked/stuck reports and for a
    line of `octopoid list`, without reading its file."""

    id: str
    created: str
    blocked_by: list[str]
    role: str  # which agents may claim it (a role no agent has is reported, not waited on)
    title: str = ""
    priority: str = ""
    attempts: int = 0


class WaitingDigest(NamedTuple):
    """What `octopoid status` needs of the waiting tasks, without a row per task: those with
    blockers (for the blocked report), how many wait per role (for unserved roles), and
    the oldest without blockers (the oldest that can run, unless a blocked one is older and
    its blockers are all done)."""

    with_blockers: list[Waiting]
    roles: dict[str, int]
    oldest_free: Waiting | None

    @classmethod
    def of(cls, rows: Iterable[Waiting]) -> WaitingDigest:
        """The digest of rows already read (the board has them all)."""
        rows = list(rows)
        roles: dict[str, int] = {}
        for row in rows:
            roles[row.role] = roles.get(row.role, 0) + 1
        free = [w for w in rows if not w.blocked_by and w.created]
        return cls(
            [w for w in rows if w.blocked_by],
            roles,
            min(free, key=lambda w: w.created, default=None),
        )


class TaskQueries:
    """The reads of ``QueueStore.waiting``, ``waiting_digest``, ``usage`` and ``recent``:
    a store names its tables and gives ``_reading`` (a cursor, or a connection, for them)."""

    MARK: str  # a parameter: "?" or "%s"
    INCOMING: str  # the waiting tasks, as a table
    LEDGER: str  # every task's state, turns, cost and time of its last move
    BLOCKED: str  # the condition that a waiting task has blockers; ``FREE``: that it has none
    FREE: str
    TITLED: str  # the columns of a ``Waiting``'s title, rank and attempts
    UNTITLED: str  # the same where only ids and edges are asked for (cheaper)
    NO_LIMIT: int | None
    _reading: Callable[[], AbstractContextManager[Any]]
    _blockers: Callable[[Any], list[str]]  # a row's ``blocked_by`` as a list
    _title: Callable[[str], str]  # a row's title column as the title

    def waiting(
        self, role: str | None = None, skip: int = 0, limit: int = -1, *, titled: bool = True
    ) -> list[Waiting]:
        m, columns = self.MARK, self.TITLED if titled else self.UNTITLED
        where, args = (f"WHERE role = {m}", [role]) if role is not None else ("", [])
        with self._reading() as cur:
            rows = cur.execute(
                f"SELECT id, created, blocked_by, role, {columns} FROM {self.INCOMING} "
                f"{where} ORDER BY rank, created, seq, id LIMIT {m} OFFSET {m}",
                [*args, self.NO_LIMIT if limit < 0 else limit, skip],
            ).fetchall()
        return [
            Waiting(tid, created, self._blockers(b), role, self._title(title), PRIORITIES[rank], n)
            for tid, created, b, role, title, rank, n in rows
        ]

    def waiting_digest(self) -> WaitingDigest:
        """``WaitingDigest`` in three queries: no row per task but the blocked ones."""
        incoming = self.INCOMING
        with self._reading() as cur:
            blocked = cur.execute(
                f"SELECT id, created, blocked_by, role FROM {incoming} WHERE {self.BLOCKED} "
                "ORDER BY rank, created, seq, id"
            ).fetchall()
            roles = dict(cur.execute(f"SELECT role, count(*) FROM {incoming} GROUP BY role"))
            oldest = cur.execute(
                f"SELECT id, created, role FROM {incoming} WHERE {self.FREE} AND created != '' "
                "ORDER BY created, rank, seq, id LIMIT 1"
            ).fetchone()
        free = Waiting(oldest[0], oldest[1], [], oldest[2]) if oldest else None
        rows = [Waiting(tid, created, self._blockers(b), role) for tid, created, b, role in blocked]
        return WaitingDigest(rows, roles, free)

    def usage(self, top: int = 10) -> tuple[int, float, list[tuple[str, str, int, float]]]:
        with self._reading() as cur:
            turns, cost = cur.execute(
                f"SELECT coalesce(sum(turns), 0), coalesce(sum(cost), 0) FROM {self.LEDGER}"
            ).fetchone()
            most = cur.execute(
                f"SELECT id, state, turns, cost FROM {self.LEDGER} WHERE turns > 0 OR cost > 0 "
                f"ORDER BY cost DESC, id LIMIT {self.MARK}",
                (top,),
            ).fetchall()
        return int(turns), float(cost), [tuple(row) for row in most]

    def recent(self, state: TaskState, limit: int = 10) -> list[str]:
        with self._reading() as cur:
            rows = cur.execute(
                f"SELECT id FROM {self.LEDGER} WHERE state = {self.MARK} "
                f"ORDER BY moved DESC, id DESC LIMIT {self.MARK}",
                (state.value, limit),
            ).fetchall()
        return [task_id for (task_id,) in rows]
