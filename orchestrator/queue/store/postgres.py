"""The PostgreSQL store: one queue shared by several machines (``store.backend: postgres``).

One row per task holds its state and its octopoid Markdown text (so ``show``, ``export``
and the prompt read exactly what the folder store would), plus the columns a claim orders
and filters by and the usage ledger's totals. A move is one transaction that locks the
row (``FOR UPDATE``), checks it is still in the source state, applies the change and
writes the new state: the row lock decides every race, as the rename does in the folder
store. A claim is ``FOR UPDATE SKIP LOCKED`` over a partial index of waiting tasks in
claim order, so concurrent claimers never wait on each other nor get the same task.

A ``hold`` is a session advisory lock on a connection of its own, so it dies with the
holder's process. The schema lives in its own PostgreSQL schema, ``octopoid``, and is
created and migrated by ``upgrade`` (versioned, idempotent, serialised by an advisory
lock): ``octopoid init --store URL`` and ``octopoid db upgrade`` call it.

Its size: the whole PostgreSQL store (migrations, moves, claims, holds, LISTEN/NOTIFY),
which the store contract suite tests as one.
"""

from __future__ import annotations

import os
import select
import stat
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from ...config import DATABASE_WAIT_ENV
from ...model import defaults
from ...model.exceptions import (
    IllegalTransition,
    LostRace,
    StorageError,
    TaskNotFound,
    TaskParseError,
)
from ...model.tasks import (
    PRIORITIES,
    TITLE_RE,
    Task,
    TaskState,
    claim_order,
    parse_task,
    read_regular,
    render_task,
    task_label,
)
from .base import Change, Guard, QueueStore, busy, id_order
from .claim_index import Waiting, WaitingDigest
from .pg_records import PostgresJournals, PostgresRecords

SCHEMA = "octopoid"
MIGRATIONS: list[str] = [
    # 1: tasks (text + claim columns + ledger), quarantine, ids, holds' notes
    """
    CREATE TABLE octopoid.tasks (
        id text PRIMARY KEY,
        state text NOT NULL,
        body text NOT NULL,
        role text NOT NULL,
        rank integer NOT NULL,
        created text NOT NULL,
        seq bigint NOT NULL,
        blocked_by text[] NOT NULL,
        not_before double precision NOT NULL,
        turns bigint NOT NULL,
        cost double precision NOT NULL,
        moved timestamptz NOT NULL DEFAULT clock_timestamp()
    );
    CREATE INDEX tasks_claim_any ON octopoid.tasks (rank, created, seq, id)
        WHERE state = 'incoming';
    CREATE INDEX tasks_claim_role ON octopoid.tasks (role, rank, created, seq, id)
        WHERE state = 'incoming';
    CREATE INDEX tasks_recent ON octopoid.tasks (state, moved);
    CREATE TABLE octopoid.quarantine (
        n bigserial PRIMARY KEY,
        name text NOT NULL,
        reason text NOT NULL,
        body bytea NOT NULL,
        at timestamptz NOT NULL DEFAULT clock_timestamp()
    );
    CREATE SEQUENCE octopoid.task_ids;
    CREATE TABLE octopoid.holds (id text PRIMARY KEY, purpose text NOT NULL);
    """,
    # 2: retry notes, a row per saved piece (title, attempt, review), read in order
    """
    CREATE TABLE octopoid.notes (
        task_id text NOT NULL,
        n bigserial,
        section text NOT NULL,
        at timestamptz NOT NULL DEFAULT clock_timestamp(),
        PRIMARY KEY (task_id, n)
    );
    """,
    # 3: long-term memory (memory/postgres.py), searched through a generated tsvector
    """
    CREATE TABLE octopoid.memory (
        id bigserial PRIMARY KEY,
        content text NOT NULL,
        section text,
        topic text,
        tags text NOT NULL DEFAULT '',
        agent text NOT NULL,
        scope text NOT NULL,
        task_id text,
        session_id text,
        metadata text NOT NULL DEFAULT '{}',
        created double precision NOT NULL,
        updated double precision NOT NULL,
        content_hash text NOT NULL,
        importance double precision NOT NULL DEFAULT 0.5,
        pinned integer NOT NULL DEFAULT 0,
        access_count integer NOT NULL DEFAULT 0,
        search tsvector GENERATED ALWAYS AS (to_tsvector('english',
            content || ' ' || coalesce(topic, '') || ' ' || tags)) STORED,
        UNIQUE (scope, content_hash)
    );
    CREATE INDEX memory_search ON octopoid.memory USING gin (search);
    """,
    # 4: the pinned notes every prompt reads, without a scan of the memory (issue 25);
    # the incoming tasks with blockers, for status's digest
    """
    CREATE INDEX memory_pinned ON octopoid.memory (scope, importance DESC, updated DESC)
        WHERE pinned = 1;
    CREATE INDEX tasks_blocked ON octopoid.tasks (rank, created, seq, id)
        WHERE state = 'incoming' AND cardinality(blocked_by) > 0;
    """,
    # 5: records (keyed documents written by compare-and-swap on their version) and
    # journals (workflows of steps), issue 36: pg_records.py. Keys sort bytewise ("C"),
    # so a prefix is a range of the primary key.
    """
    CREATE SEQUENCE octopoid.record_versions;
    CREATE TABLE octopoid.records (
        key text COLLATE "C" PRIMARY KEY,
        value jsonb NOT NULL,
        version bigint NOT NULL,
        written timestamptz NOT NULL DEFAULT clock_timestamp()
    );
    CREATE TABLE octopoid.journals (
        kind text COLLATE "C" NOT NULL,
        key text COLLATE "C" NOT NULL,
        steps text[] NOT NULL,
        done text[] NOT NULL DEFAULT '{}',
        data jsonb NOT NULL,
        begun timestamptz NOT NULL DEFAULT clock_timestamp(),
        PRIMARY KEY (kind, key)
    );
    """,
    # 6: memory's term index (memory/index.py) instead of the tsvector (issue 41): the
    # notes are indexed by memory/postgres.py on first use (``length`` NULL until then)
    """
    ALTER TABLE octopoid.memory DROP COLUMN search;
    ALTER TABLE octopoid.memory ADD COLUMN length integer;
    CREATE INDEX memory_unindexed ON octopoid.memory (id) WHERE length IS NULL;
    CREATE TABLE octopoid.memory_terms (
        term text COLLATE "C" NOT NULL,
        note bigint NOT NULL,
        tf integer NOT NULL,
        len integer NOT NULL,
        PRIMARY KEY (term, note) INCLUDE (tf, len)
    );
    CREATE INDEX memory_terms_note ON octopoid.memory_terms (note);
    CREATE TABLE octopoid.memory_vocab (term text COLLATE "C" PRIMARY KEY, df integer NOT NULL);
    CREATE TABLE octopoid.memory_totals (
        one integer PRIMARY KEY CHECK (one = 1), notes bigint NOT NULL, length bigint NOT NULL
    );
    INSERT INTO octopoid.memory_totals VALUES (1, 0, 0);
    """,
]
_COLUMNS = "state, body, role, rank, created, seq, blocked_by, not_before, turns, cost"
_VALUES = ", ".join(["%s"] * len(_COLUMNS.split(",")))
_CLAIM_ORDER = "rank, created, seq, id"
_UPGRADE_LOCK = 0x6F63746F  # "octo": one upgrader at a time


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


def redact_dsn(text: str, dsn: str) -> str:
    """``text`` with the DSN's password (if any) replaced, for errors and logs."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        password = conninfo_to_dict(dsn).get("password")
    except Exception:  # an unparsable DSN: say nothing of it
        return text.replace(dsn, "<database URL>")
    return text.replace(str(password), "***") if password else text


def upgrade_database(dsn: str) -> str:
    """Create or migrate the octopoid schema at ``dsn``; one line saying what was done."""
    store = PostgresStore(dsn)
    try:
        applied = store.upgrade()
    finally:
        store.close()
    if not applied:
        return f"the octopoid schema is up to date (version {len(MIGRATIONS)})"
    return f"applied migration(s) {', '.join(map(str, applied))}: now version {len(MIGRATIONS)}"


@lru_cache(maxsize=4)
def shared_store(dsn: str) -> PostgresStore:
    """This process's store (and connections) for ``dsn``, its schema checked once."""
    store = PostgresStore(dsn)
    store.initialize()
    return store


def _title(first_line: str) -> str:
    """A task's title from its body's first line (``# [TASK-<id>] Title``)."""
    match = TITLE_RE.fullmatch(first_line)
    return match.group(2) if match else ""


class PostgresStore(QueueStore):
    def __init__(self, dsn: str, max_connections: int = 8) -> None:
        self.dsn = dsn
        self._local = threading.local()  # the hold connection and depths, per thread
        self.wait_seconds = float(os.environ.get(DATABASE_WAIT_ENV) or 0)
        # one outage, one wait: a runner whose server is gone gives up after it, not after
        # every renewal, notes write and move has waited again
        self.patience = Patience(self.wait_seconds or defaults.DATABASE_WAIT_SECONDS)
        self._connections = Connections(max_connections, self._connect)

    # --- connections --------------------------------------------------------------------

    def _connect(self, first: bool) -> Any:
        """A new connection. While the server is unreachable it is retried with backoff
        for what is left of ``patience``; a process's first connection waits only if the
        process has patience of its own (``DATABASE_WAIT_ENV``: a runner), any other
        process hears at once that the database is down, with the reason."""
        import psycopg

        wait = self.patience.left()
        deadline = time.monotonic() + (min(self.wait_seconds, wait) if first else wait)
        delay = 0.5
        while True:
            try:
                with self._errors():
                    conn = psycopg.connect(self.dsn, connect_timeout=10)
                self.patience.reconnected()
                return conn
            except StorageError:
                self.patience.failed()
                if time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 10.0)

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """A database error becomes one ``StorageError`` without the password."""
        import psycopg

        try:
            yield
        except psycopg.Error as exc:
            message = " ".join(str(exc).split()) or type(exc).__name__  # libpq's are multi-line
            raise StorageError(
                f"the PostgreSQL queue failed: {redact_dsn(message, self.dsn)}"
            ) from None

    @contextmanager
    def _tx(self, batch: bool = False) -> Iterator[Any]:
        """A cursor in one transaction (committed at the end, rolled back on error).

        ``batch``: a ``Batch``, for the moves: statements leave only when an answer is
        needed. While the server is unreachable, waits for a connection (see ``_connect``),
        so a restart or a short outage delays a runner's moves and notes instead of failing
        them; for at most ``patience`` in all, however many operations wait.
        """
        conn = self._connections.get(self.patience.left())
        try:
            if batch:
                with self._errors():
                    yield from _batched(conn)
            else:
                with self._errors(), conn.transaction(), conn.cursor() as cur:
                    yield cur
        finally:
            self._connections.put(conn)

    def _fetch(self, sql: str, args: tuple = ()) -> list[Any]:
        """The rows of one statement, run on its own (autocommit: a transaction of its
        own): one round trip, no BEGIN and COMMIT around it."""
        conn = self._connections.get(self.patience.left())
        try:
            conn.autocommit = True
            with self._errors(), conn.cursor() as cur:
                cur.execute(sql, args)
                return cur.fetchall() if cur.description is not None else []
        finally:
            if not conn.closed:
                conn.autocommit = False
            self._connections.put(conn)

    def _one(self, sql: str, args: tuple = ()) -> Any:
        """The first row of one statement, as ``_fetch`` runs it (None: no row)."""
        rows = self._fetch(sql, args)
        return rows[0] if rows else None

    def close(self) -> None:
        self._connections.close()

    @cached_property
    def records(self) -> PostgresRecords:
        return PostgresRecords(self, CHANNEL)

    @cached_property
    def journals(self) -> PostgresJournals:
        return PostgresJournals(self)

    # --- schema -------------------------------------------------------------------------

    def schema_version(self) -> int:
        with self._tx() as cur:
            cur.execute("SELECT to_regclass('octopoid.migrations') IS NOT NULL")
            if not cur.fetchone()[0]:
                return 0
            cur.execute("SELECT coalesce(max(version), 0) FROM octopoid.migrations")
            return cur.fetchone()[0]

    def upgrade(self) -> list[int]:
        """Apply the migrations this database lacks, in order; return their numbers."""
        with self._tx() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (_UPGRADE_LOCK,))
            cur.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
            cur.execute(
                "CREATE TABLE IF NOT EXISTS octopoid.migrations "
                "(version integer PRIMARY KEY, applied timestamptz NOT NULL DEFAULT now())"
            )
            cur.execute("SELECT coalesce(max(version), 0) FROM octopoid.migrations")
            have = cur.fetchone()[0]
            if have > len(MIGRATIONS):
                raise StorageError(
                    f"the database's octopoid schema is version {have}, newer than this "
                    f"octopoid knows ({len(MIGRATIONS)}): upgrade octopoid"
                )
            applied = []
            for version, sql in enumerate(MIGRATIONS[have:], start=have + 1):
                cur.execute(sql)
                cur.execute("INSERT INTO octopoid.migrations (version) VALUES (%s)", (version,))
                applied.append(version)
        return applied

    def initialize(self) -> None:
        if self.schema_version() != len(MIGRATIONS):
            self.upgrade()

    # --- rows and tasks -----------------------------------------------------------------

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
            self._quarantine_row(cur, task_id, state, body, str(exc))
            return TaskParseError(f"{task_label(task_id)} was quarantined: {exc}")
        task.state, task.path = state, None
        return task

    def _quarantine_row(self, cur: Any, task_id: str, state: TaskState, body: str, why: str):
        cur.execute("DELETE FROM octopoid.tasks WHERE id = %s", (task_id,))
        cur.execute(
            "INSERT INTO octopoid.quarantine (name, reason, body) VALUES (%s, %s, %s)",
            (f"TASK-{task_id}.md", f"{why}\n(from {state.value})", body.encode()),
        )

    def _save(self, cur: Any, task: Task, state: TaskState, moved: bool = True) -> None:
        """Write the task's row; ``moved`` False keeps its time of last move (a rebuild)."""
        columns, values = _COLUMNS, _VALUES
        if moved:
            columns, values = f"{columns}, moved", f"{values}, clock_timestamp()"
        cur.execute(
            f"UPDATE octopoid.tasks SET ({columns}) = ({values}) WHERE id = %s",
            (*self._row(task, state), task.id),
        )
        task.state, task.path = state, None

    # --- the QueueStore interface -------------------------------------------------------

    def allocate_id(self) -> str:
        """The next id: one statement takes it and says whether it is free (a sequence is
        not transactional: no transaction is needed around it)."""
        while True:
            candidate, taken = self._one(
                "WITH n AS (SELECT nextval('octopoid.task_ids')::text AS id) "
                "SELECT id, EXISTS (SELECT 1 FROM octopoid.tasks t WHERE t.id = n.id) FROM n"
            )
            if not taken:
                return candidate
            self._one(  # tasks added with their own ids (an import): jump past them
                "SELECT setval('octopoid.task_ids', GREATEST(%s::bigint, "
                "(SELECT coalesce(max(seq), 0) FROM octopoid.tasks)))",
                (candidate,),
            )

    def add(self, task: Task, state: TaskState) -> Task:
        with self._tx(batch=True) as cur:
            cur.execute(
                f"INSERT INTO octopoid.tasks (id, {_COLUMNS}) VALUES (%s, {_VALUES}) "
                "ON CONFLICT (id) DO NOTHING RETURNING 1",
                (task.id, *self._row(task, state)),
            )
            if cur.fetchone() is None:
                cur.execute("SELECT state FROM octopoid.tasks WHERE id = %s", (task.id,))
                found = cur.fetchone()
                where = found[0] if found else "another transaction"
                raise IllegalTransition(f"{task.label} already exists (in {where})")
            _announce(cur, state, task_id=task.id)
        task.state, task.path = state, None
        return task

    def locate(self, task_id: str) -> TaskState | None:
        row = self._one("SELECT state FROM octopoid.tasks WHERE id = %s", (task_id,))
        return TaskState(row[0]) if row else None

    def get(self, task_id: str) -> Task:
        with self._tx() as cur:
            cur.execute("SELECT state, body FROM octopoid.tasks WHERE id = %s", (task_id,))
            row = cur.fetchone()
            if row is None:
                raise TaskNotFound(f"no task {task_label(task_id)} in any queue")
            task = self._task(cur, task_id, TaskState(row[0]), row[1])
        if isinstance(task, TaskParseError):
            raise task
        return task

    def list(self, state: TaskState) -> list[Task]:
        tasks = []
        with self._tx() as cur:
            cur.execute(
                f"SELECT id, body FROM octopoid.tasks WHERE state = %s ORDER BY {_CLAIM_ORDER}",
                (state.value,),
            )
            found = [self._task(cur, task_id, state, body) for task_id, body in cur.fetchall()]
            tasks = [t for t in found if isinstance(t, Task)]
        return sorted(tasks, key=claim_order)

    def count(self, state: TaskState) -> int:
        if state is TaskState.QUARANTINE:  # its own table: what list_quarantine names
            return self._one("SELECT count(*) FROM octopoid.quarantine", ())[0]
        return self._one("SELECT count(*) FROM octopoid.tasks WHERE state = %s", (state.value,))[0]

    def ids(self, state: TaskState) -> list[str]:
        with self._tx() as cur:
            cur.execute("SELECT id FROM octopoid.tasks WHERE state = %s", (state.value,))
            return sorted((task_id for (task_id,) in cur.fetchall()), key=id_order)

    def list_quarantine(self) -> list[tuple[str, str]]:
        with self._tx() as cur:
            cur.execute("SELECT name, reason FROM octopoid.quarantine ORDER BY name, n")
            return [(name, reason.strip()) for name, reason in cur.fetchall()]

    def move(
        self,
        task_id: str,
        src: TaskState,
        dst: TaskState,
        change: Change,
        guard: Guard | None = None,
    ) -> Task | None:
        with self._tx(batch=True) as cur:
            task = self._locked(cur, task_id, src)
            if isinstance(task, Task):
                if guard is not None and not guard(task):
                    return None
                change(task)
                self._save(cur, task, dst)
                if dst is not src:
                    _announce(cur, dst, src, task_id)
        if isinstance(task, TaskParseError):  # its quarantine has committed
            raise task
        return task

    def update(self, task_id: str, state: TaskState, change: Change) -> Task:
        return self.move(task_id, state, state, change)

    def _locked(self, cur: Any, task_id: str, state: TaskState) -> Task | TaskParseError:
        """The task's row locked for this transaction; ``LostRace`` if not in ``state``."""
        cur.execute("SELECT state, body FROM octopoid.tasks WHERE id = %s FOR UPDATE", (task_id,))
        row = cur.fetchone()
        if row is None or row[0] != state.value:
            raise LostRace(f"{task_label(task_id)} is not in {state.value}")
        return self._task(cur, task_id, state, row[1])

    @contextmanager
    def hold(self, task_id: str, purpose: str) -> Iterator[None]:
        def refused(conn: Any) -> Exception:
            def words() -> str:
                row = conn.execute(
                    "SELECT purpose FROM octopoid.holds WHERE id = %s", (task_id,)
                ).fetchone()
                return row[0] if row else ""

            return busy(task_id, words)

        with self.session_lock(f"octopoid:hold:{task_id}", refused) as (conn, depth):
            if depth == 1:
                with self._errors():
                    conn.execute(
                        "INSERT INTO octopoid.holds VALUES (%s, %s) "
                        "ON CONFLICT (id) DO UPDATE SET purpose = excluded.purpose",
                        (task_id, f"being {purpose} (pid {os.getpid()})"),
                    )
            try:
                yield
            finally:
                if depth == 1:
                    with self._errors():
                        conn.execute("DELETE FROM octopoid.holds WHERE id = %s", (task_id,))

    @contextmanager
    def session_lock(
        self, name: str, refused: Callable[[Any], Exception]
    ) -> Iterator[tuple[Any, int]]:
        """A session advisory lock on ``name``, on this thread's own connection, so it dies
        with the holder's process; yields (that connection, how often this thread holds it
        now). Taken by another session: ``refused(connection)`` is raised at once."""
        conn, depths = self._hold_connection()
        with self._errors():
            if not depths.get(name):
                got = conn.execute(
                    "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (name,)
                ).fetchone()[0]
                if not got:
                    raise refused(conn)
            depths[name] = depths.get(name, 0) + 1
        try:
            yield conn, depths[name]
        finally:
            depths[name] -= 1
            if depths[name] == 0:
                del depths[name]
                with self._errors():
                    conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (name,))

    def holder(self, name: str) -> Any | None:
        """The connection holding the ``session_lock`` ``name`` for this thread, or None.
        Never a new one: a write on it fails if the session, and so the lock, is gone."""
        local = self._local
        if getattr(local, "pid", None) != os.getpid() or not local.depths.get(name):
            return None
        return local.conn

    def _hold_connection(self) -> tuple[Any, dict[str, int]]:
        """This thread's own autocommit connection: a hold lives as long as its session."""
        import psycopg

        local = self._local
        if getattr(local, "pid", None) != os.getpid() or local.conn.closed:
            with self._errors():
                local.conn = psycopg.connect(self.dsn, autocommit=True)
            local.pid, local.depths = os.getpid(), {}
        return local.conn, local.depths

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
                with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    delay = 0.0
                    on_change("")
                    while not stop.is_set():
                        for notice in conn.notifies(timeout=1.0):
                            on_change(notice.payload)
            except psycopg.Error:
                delay = min(30.0, max(1.0, delay * 2))

    def recover(self, task_id: str | None = None) -> list[str]:
        return []  # a transaction that a crash interrupted never happened: nothing to finish

    def claim(self, role: str | None, change: Change, now: datetime) -> Task | None:
        where = "state = 'incoming' AND not_before <= %s"
        args: list[object] = [now.timestamp()]
        if role is not None:
            where += " AND role = %s"
            args.append(role)
        with self._tx(batch=True) as cur:
            while True:
                cur.execute(
                    f"SELECT id, body FROM octopoid.tasks t WHERE {where} AND NOT EXISTS ("
                    "  SELECT 1 FROM unnest(t.blocked_by) AS b(id) WHERE NOT EXISTS ("
                    "    SELECT 1 FROM octopoid.tasks d WHERE d.id = b.id AND d.state = 'done'))"
                    f" ORDER BY {_CLAIM_ORDER} LIMIT 1 FOR UPDATE SKIP LOCKED",
                    args,
                )
                row = cur.fetchone()
                if row is None:
                    return None
                task = self._task(cur, row[0], TaskState.INCOMING, row[1])
                if isinstance(task, TaskParseError):
                    continue  # quarantined in this transaction: take the next
                change(task)
                self._save(cur, task, TaskState.CLAIMED)
                return task

    def waiting(
        self, role: str | None = None, skip: int = 0, limit: int = -1, *, titled: bool = True
    ) -> list[Waiting]:
        body = (  # the title from the body's first line; attempts from its headers
            "split_part(body, E'\\n', 1), rank, "
            "coalesce(substring(body from '\\nATTEMPTS: (\\d+)\\n')::int, 0)"
            if titled
            else "'', rank, 0"
        )
        with self._tx() as cur:
            cur.execute(
                f"SELECT id, created, blocked_by, role, {body} "
                "FROM octopoid.tasks WHERE state = 'incoming' AND (%s::text IS NULL OR role = %s) "
                f"ORDER BY {_CLAIM_ORDER} LIMIT %s OFFSET %s",
                (role, role, None if limit < 0 else limit, skip),
            )
            return [
                Waiting(tid, created, list(blocked), role, _title(first), PRIORITIES[rank], n)
                for tid, created, blocked, role, first, rank, n in cur
            ]

    def waiting_digest(self) -> WaitingDigest:
        with self._tx() as cur:
            cur.execute(
                "SELECT id, created, blocked_by, role FROM octopoid.tasks WHERE state = "
                f"'incoming' AND cardinality(blocked_by) > 0 ORDER BY {_CLAIM_ORDER}"
            )
            blocked = [Waiting(tid, created, list(b), role) for tid, created, b, role in cur]
            cur.execute(
                "SELECT role, count(*) FROM octopoid.tasks WHERE state = 'incoming' GROUP BY role"
            )
            roles = {role: int(n) for role, n in cur.fetchall()}
            cur.execute(
                "SELECT id, created, role FROM octopoid.tasks WHERE state = 'incoming' AND "
                "cardinality(blocked_by) = 0 AND created != '' "
                "ORDER BY created, rank, seq, id LIMIT 1"
            )
            oldest = cur.fetchone()
        free = Waiting(oldest[0], oldest[1], [], oldest[2]) if oldest else None
        return WaitingDigest(blocked, roles, free)

    def usage(self, top: int = 10) -> tuple[int, float, list[tuple[str, str, int, float]]]:
        with self._tx() as cur:
            cur.execute(
                "SELECT coalesce(sum(turns), 0), coalesce(sum(cost), 0) FROM octopoid.tasks"
            )
            turns, cost = cur.fetchone()
            cur.execute(
                "SELECT id, state, turns, cost FROM octopoid.tasks WHERE turns > 0 OR cost > 0 "
                "ORDER BY cost DESC, id LIMIT %s",
                (top,),
            )
            return int(turns), float(cost), [tuple(row) for row in cur.fetchall()]

    def recent(self, state: TaskState, limit: int = 10) -> list[str]:
        with self._tx() as cur:
            cur.execute(
                "SELECT id FROM octopoid.tasks WHERE state = %s ORDER BY moved DESC, id DESC "
                "LIMIT %s",
                (state.value, limit),
            )
            return [task_id for (task_id,) in cur.fetchall()]

    def rebuild(self) -> int:
        """Recompute every row's claim and ledger columns from its text."""
        n = 0
        with self._tx() as cur:
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
        with self._tx() as cur:
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


class Batch:
    """A cursor for one transaction that sends its statements only when an answer is
    needed, several in one message (the simple query protocol; psycopg quotes the values):
    BEGIN leaves with the first read, and the writes, NOTIFY and COMMIT together at the
    end. A move is two round trips instead of five. (psycopg's pipeline mode was tried:
    it sent twice the messages and waited as often.) Each read must follow its statement."""

    def __init__(self, cur: Any) -> None:
        self._cur, self._pending = cur, ["BEGIN"]

    def execute(self, sql: str, args: tuple | list = ()) -> None:
        self._pending.append(self._cur.mogrify(sql, args) if args else sql)

    def send(self, *last: str) -> None:
        """Send what waits (and ``last``); the cursor is left on the last one's rows."""
        statements, self._pending = [*self._pending, *last], []
        if statements:
            self._cur.execute("; ".join(statements))
            while self._cur.nextset():
                pass

    def fetchone(self) -> Any:
        self.send()
        return self._cur.fetchone()

    def fetchall(self) -> list[Any]:
        self.send()
        return self._cur.fetchall()


def _batched(conn: Any) -> Iterator[Batch]:
    """A ``Batch`` on ``conn`` for the caller's transaction, committed once it is done,
    rolled back if it raised after BEGIN had left."""
    import psycopg
    from psycopg.pq import TransactionStatus

    conn.autocommit = True  # BEGIN and COMMIT are ours, sent with the statements
    try:
        batch = Batch(psycopg.ClientCursor(conn))
        try:
            yield batch
            batch.send("COMMIT")
        except BaseException:
            if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
                with suppress(psycopg.Error):
                    conn.execute("ROLLBACK")
            raise
    finally:
        if not conn.closed and conn.info.transaction_status == TransactionStatus.IDLE:
            conn.autocommit = False


class Connections:
    """One process's connections to one database, for its threads: made when first needed,
    kept for reuse, at most ``size`` at once. Not psycopg_pool's pool, because a runner
    starts once per attempt and a pool cost it a thread, a probing connection and a round
    trip per transaction: no thread here, no connection before the first use, and an idle
    connection is checked without a round trip (one the server closed, by a restart, has
    something to read, and is replaced). A forked child starts with none and leaves its
    parent's alone: a libpq connection is never shared between processes (psycopg does not
    end a connection a child inherited when the child drops it)."""

    def __init__(self, size: int, connect: Callable[[bool], Any]) -> None:
        self.size, self._connect = size, connect
        self._lock = threading.Lock()
        self._pid = 0
        self._made = False
        self._idle: list[Any] = []
        self._slots = threading.BoundedSemaphore(size)

    def _mine(self) -> threading.BoundedSemaphore:
        """This process's free slots (a fresh set in a forked child)."""
        with self._lock:
            if self._pid != os.getpid():
                self._pid, self._made, self._idle = os.getpid(), False, []
                self._slots = threading.BoundedSemaphore(self.size)
            return self._slots

    def get(self, timeout: float) -> Any:
        """A connection for one transaction; give it back with ``put``."""
        slots = self._mine()
        if not slots.acquire(timeout=timeout):  # busy, not down: every slot is in use
            raise StorageError(
                f"the PostgreSQL queue is busy: this process's {self.size} connections "
                f"stayed in use for {timeout:.0f} s"
            )
        try:
            with self._lock:
                while self._idle:
                    conn = self._idle.pop()
                    if _idle_and_open(conn):
                        return conn
                    conn.close()
                first, self._made = not self._made, True
            return self._connect(first)
        except BaseException:
            slots.release()
            raise

    def put(self, conn: Any) -> None:
        if self._pid != os.getpid():
            return  # taken before a fork: the parent's
        from psycopg.pq import TransactionStatus

        if conn.closed or conn.broken or conn.info.transaction_status != TransactionStatus.IDLE:
            conn.close()
        else:
            with self._lock:
                self._idle.append(conn)
        self._slots.release()

    def close(self) -> None:
        """Close this process's idle connections (a parent's are left alone)."""
        with self._lock:
            idle, self._idle = (self._idle if self._pid == os.getpid() else []), []
        for conn in idle:
            conn.close()


def _idle_and_open(conn: Any) -> bool:
    """An idle connection has nothing to read: if it has, the server said goodbye (an
    administrator's shutdown, a restart) or closed it."""
    if conn.closed or conn.broken:
        return False
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN)
    return not poller.poll(0)


class Patience:
    """How long a process still waits for the database in the outage it is in: the full
    wait after a success, what is left of it after failures, and at least a moment (a
    server back since the last failure answers at once)."""

    MOMENT = 0.5

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds, self._clock = seconds, clock
        self._down_since: float | None = None

    def left(self) -> float:
        if self._down_since is None:
            return self.seconds
        return max(self.MOMENT, self.seconds - (self._clock() - self._down_since))

    def failed(self) -> None:
        if self._down_since is None:
            self._down_since = self._clock()

    def reconnected(self) -> None:
        self._down_since = None


class PostgresNotes:
    """Retry notes as rows of ``octopoid.notes``: the title, then one row per saved piece
    (an attempt, a rejection). The text read is the rows joined in order, the same text the
    notes file would hold, so prompts and ``octopoid notes`` do not depend on the store.
    Writers of one task's notes are serialised by a transaction-scoped advisory lock."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    @staticmethod
    def _lock(cur: Any, task_id: str) -> None:
        cur.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"octopoid:notes:{task_id}",)
        )

    @staticmethod
    def _rows(cur: Any, task_id: str) -> list[tuple[int, str]]:
        cur.execute(
            "SELECT n, section FROM octopoid.notes WHERE task_id = %s ORDER BY n", (task_id,)
        )
        return cur.fetchall()

    def read(self, task_id: str) -> str | None:
        with self.store._tx() as cur:
            rows = self._rows(cur, task_id)
        return "".join(section for _, section in rows) if rows else None

    def append(self, task_id: str, title: str, make_sections: Callable[[str], str]) -> None:
        with self.store._tx(batch=True) as cur:
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

    def take_back(self, task_id: str, added: str, title: str) -> None:
        with self.store._tx() as cur:
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

    def put(self, task_id: str, text: str) -> bool:
        with self.store._tx() as cur:
            self._lock(cur, task_id)
            rows = self._rows(cur, task_id)
            if not rows:
                cur.execute(
                    "INSERT INTO octopoid.notes (task_id, section) VALUES (%s, %s)",
                    (task_id, text),
                )
        return not rows or "".join(section for _, section in rows) == text

    def remove(self, task_id: str) -> bool:
        with self.store._tx(batch=True) as cur:
            self._lock(cur, task_id)
            cur.execute("DELETE FROM octopoid.notes WHERE task_id = %s RETURNING 1", (task_id,))
            return cur.fetchone() is not None

    def task_ids(self) -> list[str]:
        with self.store._tx() as cur:
            cur.execute("SELECT DISTINCT task_id FROM octopoid.notes ORDER BY task_id")
            return [task_id for (task_id,) in cur.fetchall()]
