"""The PostgreSQL store: one queue shared by several machines (``store.backend: postgres``).

A task is a row; a move is one transaction whose row lock decides every race, as the
rename does in the folder store (docs/scale-out.md, "What runs where", says how a move,
a claim and a hold are made). Its size: the whole PostgreSQL store (moves, claims, holds,
LISTEN/NOTIFY, retry notes), which the store contract suite tests as one.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

from ...model.exceptions import IllegalTransition, LostRace, TaskNotFound, TaskParseError
from ...model.tasks import (
    TITLE_RE,
    Task,
    TaskId,
    TaskState,
    claim_order,
    parse_task,
    read_regular,
    render_task,
    task_label,
)
from ...pg import schema
from ...pg.database import Database
from .base import Change, Guard, QueueStore, busy, id_order
from .pg_records import PostgresJournals, PostgresRecords
from .queries import TaskQueries

_COLUMNS = "state, body, role, rank, created, seq, blocked_by, not_before, turns, cost"
_VALUES = ", ".join(["%s"] * len(_COLUMNS.split(",")))
_CLAIM_ORDER = "rank, created, seq, id"

# The statements of an add, a claim and a move, prepared on each connection
# (``Batch.prepared``): $1 is the task's id, $2.. its columns (``_row``).
_PARAMS = ", ".join(f"${n}" for n in range(2, len(_COLUMNS.split(",")) + 2))
_ADD = (
    f"INSERT INTO octopoid.tasks (id, {_COLUMNS}) VALUES ($1, {_PARAMS}) "
    "ON CONFLICT (id) DO NOTHING RETURNING 1"
)
_SAVE = (
    f"UPDATE octopoid.tasks SET ({_COLUMNS}, moved) = ({_PARAMS}, clock_timestamp()) WHERE id = $1"
)
_LOCKED = "SELECT state, body FROM octopoid.tasks WHERE id = $1 FOR UPDATE"
_NEXT = (  # the next claimable task: waiting, due ($1), every blocker done; of role $2
    "SELECT id, body FROM octopoid.tasks t WHERE state = 'incoming' AND not_before <= $1 "
    "{role}AND NOT EXISTS ("
    "  SELECT 1 FROM unnest(t.blocked_by) AS b(id) WHERE NOT EXISTS ("
    "    SELECT 1 FROM octopoid.tasks d WHERE d.id = b.id AND d.state = 'done'))"
    f" ORDER BY {_CLAIM_ORDER} LIMIT 1 FOR UPDATE SKIP LOCKED"
)
_NEXT_ANY, _NEXT_OF_ROLE = _NEXT.format(role=""), _NEXT.format(role="AND role = $2 ")


CHANNEL = "octopoid_queue"  # NOTIFY'd with the new state whenever a task is added or moved


#: The moves worth a scheduler's pass: work to claim (incoming, breakdown), or a task done
#: where that frees some (``_announce``). Claims, submits and failures wake nobody.
NOTICED = frozenset({TaskState.INCOMING, TaskState.BREAKDOWN, TaskState.DONE})


def _announce(cur: Any, state: TaskState, src: TaskState | None = None, task_id: str = "") -> None:
    """Wake idle schedulers (``watch``) when this transaction commits, with the state the
    task moved to, if it may make work claimable; PostgreSQL folds identical notifications
    of one transaction into one. A task done from review frees a review slot; done from
    anywhere else it wakes them only where a waiting task is blocked on it (the partial
    index of blocked tasks, in the same round trip): every notice wakes every listening
    server process and scheduler, and a claimer's own task done frees nothing to claim."""
    if state is TaskState.DONE and src is not TaskState.PROVISIONAL:
        cur.execute(
            "SELECT pg_notify(%s, %s) WHERE EXISTS (SELECT 1 FROM octopoid.tasks WHERE "
            "state = 'incoming' AND cardinality(blocked_by) > 0 AND %s = ANY(blocked_by))",
            (CHANNEL, state.value, task_id),
        )
    elif state in NOTICED:
        cur.execute("SELECT pg_notify(%s, %s)", (CHANNEL, state.value))


def _title(first_line: str) -> str:
    """A task's title from its body's first line (``# [TASK-<id>] Title``)."""
    match = TITLE_RE.fullmatch(first_line)
    return match.group(2) if match else ""


class PostgresStore(TaskQueries, QueueStore):
    drops_notes_when_done = True  # done and its notes gone are one commit, one round trip
    MARK, LEDGER = "%s", "octopoid.tasks"  # as ``TaskQueries`` reads them
    INCOMING = "(SELECT * FROM octopoid.tasks WHERE state = 'incoming') AS incoming"
    BLOCKED, FREE = "cardinality(blocked_by) > 0", "cardinality(blocked_by) = 0"
    TITLED = (  # the title from the body's first line; attempts from its headers
        "split_part(body, E'\\n', 1), rank, "
        "coalesce(substring(body from '\\nATTEMPTS: (\\d+)\\n')::int, 0)"
    )
    UNTITLED = "'', rank, 0"  # without reading every body
    NO_LIMIT = None
    _blockers, _title = staticmethod(list), staticmethod(_title)

    def __init__(self, db: Database) -> None:
        self.db = db  # ``pg.schema.shared``: this process's pool, shared with the memory

    def close(self) -> None:
        self.db.close()

    def _reading(self) -> AbstractContextManager[Any]:
        return self.db.tx()

    def initialize(self) -> None:
        schema.initialize(self.db)

    @cached_property
    def records(self) -> PostgresRecords:
        return PostgresRecords(self.db, CHANNEL)

    @cached_property
    def journals(self) -> PostgresJournals:
        return PostgresJournals(self.db)

    @staticmethod
    def _row(task: Task, state: TaskState) -> tuple:
        rank, created, seq, _ = claim_order(task)
        not_before = task.not_before.timestamp() if task.not_before else 0.0
        turns = int(task.headers.get("TURNS_TOTAL") or 0)
        cost = float(task.headers.get("COST_USD_TOTAL") or 0)
        body = render_task(task)
        return (state.value, body, task.role, rank, created, seq, task.blocked_by, not_before,
                turns, cost)  # fmt: skip

    def _task(self, cur: Any, task_id: str, state: TaskState, body: str) -> Task | TaskParseError:
        """Parse a row's text. A row that no longer parses (edited by hand in SQL) is moved
        to quarantine in this transaction and the error returned, for the caller to raise
        once the transaction has committed (raising inside would roll the quarantine back)."""
        try:
            task = parse_task(body, task_id)
        except TaskParseError as exc:
            cur.execute("DELETE FROM octopoid.tasks WHERE id = %s", (task_id,))
            cur.execute(
                "INSERT INTO octopoid.quarantine (name, reason, body) VALUES (%s, %s, %s)",
                (f"TASK-{task_id}.md", f"{exc}\n(from {state.value})", body.encode()),
            )
            return TaskParseError(f"{task_label(task_id)} was quarantined: {exc}")
        task.state, task.path = state, None
        return task

    def _save(self, cur: Any, task: Task, state: TaskState, moved: bool = True) -> None:
        """Write the task's row: a move's (``cur`` a ``Batch``), or with ``moved`` False
        keeping its time of last move (a rebuild's, on a plain cursor)."""
        if moved:
            cur.prepared(_SAVE, (task.id, *self._row(task, state)))
        else:
            cur.execute(
                f"UPDATE octopoid.tasks SET ({_COLUMNS}) = ({_VALUES}) WHERE id = %s",
                (*self._row(task, state), task.id),
            )
        task.state, task.path = state, None

    # --- the QueueStore interface -------------------------------------------------------

    def allocate_id(self) -> TaskId:
        """The next id: one statement takes it and says whether it is free (a sequence is
        not transactional: no transaction is needed around it)."""
        while True:
            candidate, taken = self.db.one(
                "WITH n AS (SELECT nextval('octopoid.task_ids')::text AS id) "
                "SELECT id, EXISTS (SELECT 1 FROM octopoid.tasks t WHERE t.id = n.id) FROM n"
            )
            if not taken:
                return TaskId(candidate)
            self.db.one(  # tasks added with their own ids (an import): jump past them
                "SELECT setval('octopoid.task_ids', GREATEST(%s::bigint, "
                "(SELECT coalesce(max(seq), 0) FROM octopoid.tasks)))",
                (candidate,),
            )

    def add(self, task: Task, state: TaskState) -> Task:
        with self.db.tx(batch=True) as cur:  # one round trip; a refused one wakes for nothing
            cur.prepared(_ADD, (task.id, *self._row(task, state)))
            _announce(cur, state, task_id=task.id)
            added = cur.finish()[0]
        if not added:
            found = self.locate(task.id)
            where = found.value if found else "another transaction"
            raise IllegalTransition(f"{task.label} already exists (in {where})")
        task.state, task.path = state, None
        return task

    def locate(self, task_id: TaskId) -> TaskState | None:
        row = self.db.one("SELECT state FROM octopoid.tasks WHERE id = %s", (task_id,))
        return TaskState(row[0]) if row else None

    def get(self, task_id: TaskId) -> Task:
        with self.db.tx() as cur:
            cur.execute("SELECT state, body FROM octopoid.tasks WHERE id = %s", (task_id,))
            row = cur.fetchone()
            if row is None:
                raise TaskNotFound(f"no task {task_label(task_id)} in any queue")
            task = self._task(cur, task_id, TaskState(row[0]), row[1])
        if isinstance(task, TaskParseError):
            raise task
        return task

    def list(self, state: TaskState) -> list[Task]:
        with self.db.tx() as cur:
            cur.execute(
                f"SELECT id, body FROM octopoid.tasks WHERE state = %s ORDER BY {_CLAIM_ORDER}",
                (state.value,),
            )
            found = [self._task(cur, task_id, state, body) for task_id, body in cur.fetchall()]
            tasks = [t for t in found if isinstance(t, Task)]
        return sorted(tasks, key=claim_order)

    def count(self, state: TaskState) -> int:
        if state is TaskState.QUARANTINE:  # its own table: what list_quarantine names
            return self.db.one("SELECT count(*) FROM octopoid.quarantine")[0]
        sql = "SELECT count(*) FROM octopoid.tasks WHERE state = %s"
        return self.db.one(sql, (state.value,))[0]

    def ids(self, state: TaskState) -> list[TaskId]:
        rows = self.db.fetch("SELECT id FROM octopoid.tasks WHERE state = %s", (state.value,))
        return sorted((TaskId(task_id) for (task_id,) in rows), key=id_order)

    def list_quarantine(self) -> list[tuple[str, str]]:
        rows = self.db.fetch("SELECT name, reason FROM octopoid.quarantine ORDER BY name, n")
        return [(name, reason.strip()) for name, reason in rows]

    def move(
        self,
        task_id: TaskId,
        src: TaskState,
        dst: TaskState,
        change: Change,
        guard: Guard | None = None,
    ) -> Task | None:
        with self.db.tx(batch=True) as cur:
            task = self._locked(cur, task_id, src)
            if isinstance(task, Task):
                if guard is not None and not guard(task):
                    return None
                change(task)
                self._save(cur, task, dst)
                if dst is not src:
                    _announce(cur, dst, src, task_id)
                if dst is TaskState.DONE:
                    PostgresNotes.delete(cur, task_id)
        if isinstance(task, TaskParseError):  # its quarantine has committed
            raise task
        return task

    def _locked(self, cur: Any, task_id: TaskId, state: TaskState) -> Task | TaskParseError:
        """The task's row locked for this transaction; ``LostRace`` if not in ``state``."""
        cur.prepared(_LOCKED, (task_id,))
        row = cur.fetchone()
        if row is None or row[0] != state.value:
            raise LostRace(f"{task_label(task_id)} is not in {state.value}")
        return self._task(cur, task_id, state, row[1])

    @contextmanager
    def hold(self, task_id: TaskId, purpose: str) -> Iterator[None]:
        def refused(conn: Any) -> Exception:
            def words() -> str:
                row = conn.execute(
                    "SELECT purpose FROM octopoid.holds WHERE id = %s", (task_id,)
                ).fetchone()
                return row[0] if row else ""

            return busy(task_id, words)

        with self.db.session_lock(f"octopoid:hold:{task_id}", refused) as (conn, depth):
            if depth == 1:
                with self.db.errors():
                    conn.execute(
                        "INSERT INTO octopoid.holds VALUES (%s, %s) "
                        "ON CONFLICT (id) DO UPDATE SET purpose = excluded.purpose",
                        (task_id, f"being {purpose} (pid {os.getpid()})"),
                    )
            try:
                yield
            finally:
                if depth == 1:
                    with self.db.errors():
                        conn.execute("DELETE FROM octopoid.holds WHERE id = %s", (task_id,))

    def watch(self, on_change: Callable[[str], None]) -> Callable[[], None]:
        """LISTEN on ``CHANNEL`` in a thread of its own, calling ``on_change`` with the
        state of each notification (``NOTICED``). A lost connection is retried with
        backoff; ``on_change("")`` is called on (re)connecting (changes may have been
        missed meanwhile)."""
        stop = threading.Event()
        thread = threading.Thread(
            target=self._listen, args=(on_change, stop), name="octopoid-listen", daemon=True
        )
        thread.start()
        return stop.set

    def _listen(self, on_change: Callable[[str], None], stop: threading.Event) -> None:
        import psycopg

        delay = 0.0
        while not stop.wait(delay):
            try:
                with psycopg.connect(self.db.dsn, autocommit=True, connect_timeout=10) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    delay = 0.0
                    on_change("")
                    while not stop.is_set():
                        for notice in conn.notifies(timeout=1.0):
                            on_change(notice.payload)
            except psycopg.Error:
                delay = min(30.0, max(1.0, delay * 2))

    def recover(self, task_id: TaskId | None = None) -> list[str]:
        return []  # a transaction that a crash interrupted never happened: nothing to finish

    def claim(self, role: str | None, change: Change, now: datetime) -> Task | None:
        due = now.timestamp()
        sql, args = (_NEXT_ANY, (due,)) if role is None else (_NEXT_OF_ROLE, (due, role))
        with self.db.tx(batch=True) as cur:
            while True:
                cur.prepared(sql, args)
                row = cur.fetchone()
                if row is None:
                    return None
                task = self._task(cur, row[0], TaskState.INCOMING, row[1])
                if isinstance(task, TaskParseError):
                    continue  # quarantined in this transaction: take the next
                change(task)
                self._save(cur, task, TaskState.CLAIMED)
                return task

    def rebuild(self) -> int:
        """Recompute every row's claim and ledger columns from its text."""
        n = 0
        with self.db.tx() as cur:
            cur.execute("SELECT id, state, body FROM octopoid.tasks FOR UPDATE")
            for task_id, state, body in cur.fetchall():
                task = self._task(cur, task_id, TaskState(state), body)
                if isinstance(task, Task):
                    self._save(cur, task, task.state, moved=False)
                    n += 1
        return n

    def quarantine(self, path: Path, reason: str) -> Path:
        """Keep an unreadable file's bytes and the reason in the database, then remove the
        file. What cannot be kept whole (too large) stays where it is; a symlink, FIFO or
        device is never followed or read, only named and removed."""
        try:
            data, kept = read_regular(path), True
        except FileNotFoundError:
            return path
        except TaskParseError as exc:
            data, kept = b"", False
            reason = f"{reason} (its bytes are not kept here: {exc})"
        with self.db.tx() as cur:
            cur.execute(
                "INSERT INTO octopoid.quarantine (name, reason, body) VALUES (%s, %s, %s) "
                "RETURNING n",
                (path.name, f"{reason}\n(from {path.parent.name}/{path.name})", data),
            )
            n = cur.fetchone()[0]
        with suppress(FileNotFoundError):
            if kept or not stat.S_ISREG(os.lstat(path).st_mode):
                path.unlink()
        return Path(f"postgres:quarantine/{n}/{path.name}")

    def sweep(self, now: datetime | None = None) -> int:
        return 0  # no debris: every change is one transaction


class PostgresNotes:
    """Retry notes as rows of ``octopoid.notes``: the title, then one row per saved piece
    (an attempt, a rejection). The text read is the rows joined in order, the same text the
    notes file would hold, so prompts and ``octopoid notes`` do not depend on the store.
    Writers of one task's notes are serialised by a transaction-scoped advisory lock."""

    def __init__(self, db: Database) -> None:
        self.db = db

    @staticmethod
    def _lock(cur: Any, task_id: TaskId) -> None:
        cur.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"octopoid:notes:{task_id}",)
        )

    @staticmethod
    def _rows(cur: Any, task_id: TaskId) -> list[tuple[int, str]]:
        cur.execute(
            "SELECT n, section FROM octopoid.notes WHERE task_id = %s ORDER BY n", (task_id,)
        )
        return cur.fetchall()

    def read(self, task_id: TaskId) -> str | None:
        with self.db.tx() as cur:
            rows = self._rows(cur, task_id)
        return "".join(section for _, section in rows) if rows else None

    def append(self, task_id: TaskId, title: str, make_sections: Callable[[str], str]) -> None:
        with self.db.tx(batch=True) as cur:
            self._lock(cur, task_id)
            rows = self._rows(cur, task_id)
            pieces = [] if rows else [title]
            current = "".join(section for _, section in rows) or title
            pieces.append(make_sections(current))
            for piece in pieces:
                cur.execute(
                    "INSERT INTO octopoid.notes (task_id, section) VALUES (%s, %s)",
                    (task_id, piece),
                )

    def take_back(self, task_id: TaskId, added: str, title: str) -> None:
        with self.db.tx() as cur:
            self._lock(cur, task_id)
            rows = self._rows(cur, task_id)
            mine = [n for n, section in rows if section == added]
            if not mine:
                return
            cur.execute(
                "DELETE FROM octopoid.notes WHERE task_id = %s AND n = %s", (task_id, mine[-1])
            )
            if [section for n, section in rows if n != mine[-1]] == [title]:
                cur.execute("DELETE FROM octopoid.notes WHERE task_id = %s", (task_id,))

    def put(self, task_id: TaskId, text: str) -> bool:
        with self.db.tx() as cur:
            self._lock(cur, task_id)
            rows = self._rows(cur, task_id)
            if not rows:
                cur.execute(
                    "INSERT INTO octopoid.notes (task_id, section) VALUES (%s, %s)",
                    (task_id, text),
                )
        return not rows or "".join(section for _, section in rows) == text

    @classmethod
    def delete(cls, cur: Any, task_id: TaskId) -> None:
        """Delete the task's notes in ``cur``'s transaction (a move to done's)."""
        cls._lock(cur, task_id)
        cur.execute("DELETE FROM octopoid.notes WHERE task_id = %s RETURNING 1", (task_id,))

    def remove(self, task_id: TaskId) -> bool:
        with self.db.tx(batch=True) as cur:  # one round trip, with its COMMIT
            self.delete(cur, task_id)
            return bool(cur.finish()[-1])

    def task_ids(self) -> list[str]:
        rows = self.db.fetch("SELECT DISTINCT task_id FROM octopoid.notes ORDER BY task_id")
        return [task_id for (task_id,) in rows]
