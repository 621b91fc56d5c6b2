"""This process's connections to an octopoid PostgreSQL database, shared by the queue's
store and the long-term memory (one pool per database and process: ``schema.shared``).

``Database`` hands out a cursor in one transaction (``tx``, or a ``Batch`` for the moves),
runs one statement on its own (``fetch``, ``one``), turns a database error into one
``StorageError`` without the password (``errors``), and holds session advisory locks on a
connection of each thread's own (``session_lock``). A server that is down is waited for,
at most ``Patience`` in all; ``Connections`` is the pool, without a thread of its own.
"""

from __future__ import annotations

import os
import select
import threading
import time
import weakref
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from ..config import DATABASE_WAIT_ENV
from ..model import defaults
from ..model.exceptions import StorageError


def redact_dsn(text: str, dsn: str) -> str:
    """``text`` with the DSN's password (if any) replaced, for errors and logs."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        password = conninfo_to_dict(dsn).get("password")
    except Exception:  # an unparsable DSN: say nothing of it
        return text.replace(dsn, "<database URL>")
    return text.replace(str(password), "***") if password else text


class Database:
    def __init__(self, dsn: str, max_connections: int = 8) -> None:
        self.dsn = dsn
        self._local = threading.local()  # the hold connection and depths, per thread
        self.wait_seconds = float(os.environ.get(DATABASE_WAIT_ENV) or 0)
        # one outage, one wait: a runner whose server is gone gives up after it, not after
        # every renewal, notes write and move has waited again
        self.patience = Patience(self.wait_seconds or defaults.DATABASE_WAIT_SECONDS)
        self._connections = Connections(max_connections, self._connect)

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
                with self.errors():
                    # prepare_threshold None: the hot statements are prepared by octopoid
                    # (``Batch.prepared``); the driver's own, at any rollback, sent
                    # DEALLOCATE ALL, and a move's next use of its statements failed
                    conn = psycopg.connect(self.dsn, connect_timeout=10, prepare_threshold=None)
                self.patience.reconnected()
                return conn
            except StorageError:
                self.patience.failed()
                if time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 10.0)

    @contextmanager
    def errors(self) -> Iterator[None]:
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
    def tx(self, batch: bool = False) -> Iterator[Any]:
        """A cursor in one transaction (committed at the end, rolled back on error).

        ``batch``: a ``Batch``, for the moves: statements leave only when an answer is
        needed. While the server is unreachable, waits for a connection (see ``_connect``),
        so a restart or a short outage delays a runner's moves and notes instead of failing
        them; for at most ``patience`` in all, however many operations wait.
        """
        conn = self._connections.get(self.patience.left())
        try:
            if batch:
                with self.errors():
                    yield from _batched(conn)
            else:
                with self.errors(), conn.transaction(), conn.cursor() as cur:
                    yield cur
        finally:
            self._connections.put(conn)

    def fetch(self, sql: str, args: tuple = ()) -> list[Any]:
        """The rows of one statement, run on its own (autocommit: a transaction of its
        own): one round trip, no BEGIN and COMMIT around it."""
        conn = self._connections.get(self.patience.left())
        try:
            conn.autocommit = True
            with self.errors(), conn.cursor() as cur:
                cur.execute(sql, args)
                return cur.fetchall() if cur.description is not None else []
        finally:
            if not conn.closed:
                conn.autocommit = False
            self._connections.put(conn)

    def one(self, sql: str, args: tuple = ()) -> Any:
        """The first row of one statement, as ``fetch`` runs it (None: no row)."""
        rows = self.fetch(sql, args)
        return rows[0] if rows else None

    def close(self) -> None:
        self._connections.close()

    @contextmanager
    def session_lock(
        self, name: str, refused: Callable[[Any], Exception]
    ) -> Iterator[tuple[Any, int]]:
        """A session advisory lock on ``name``, on this thread's own connection, so it dies
        with the holder's process; yields (that connection, how often this thread holds it
        now). Taken by another session: ``refused(connection)`` is raised at once."""
        conn, depths = self._hold_connection()
        with self.errors():
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
                with self.errors():
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
            with self.errors():
                local.conn = psycopg.connect(self.dsn, autocommit=True)
            local.pid, local.depths = os.getpid(), {}
        return local.conn, local.depths


class Batch:
    """A cursor for one transaction that sends its statements only when an answer is
    needed, several in one message (the simple query protocol; psycopg quotes the values):
    BEGIN leaves with the first read, and the writes, NOTIFY and COMMIT together at the
    end, or with the last read (``finish``). A move is two round trips instead of five.
    (psycopg's pipeline mode was tried: it sent twice the messages and waited as often.)
    Each read must follow its statement.

    The hot statements are ``prepared``: parsed and planned once per connection, then only
    executed (a claim's planning took three times its execution)."""

    def __init__(self, cur: Any) -> None:
        self._cur, self._pending = cur, ["BEGIN"]
        self._known = _PREPARED.setdefault(cur.connection, set())
        self._preparing: set[str] = set()
        self.finished = False

    def execute(self, sql: str, args: tuple | list = ()) -> None:
        self._pending.append(self._cur.mogrify(sql, args) if args else sql)

    def prepared(self, sql: str, args: tuple | list = ()) -> None:
        """Run ``sql`` (parameters ``$1``, ``$2`` ... given by ``args``) as a statement
        this connection prepared: the PREPARE leaves with the first use, in its message."""
        name = f"octopoid_{zlib.crc32(sql.encode()):08x}"
        if _STATEMENTS.setdefault(name, sql) != sql:  # the code's own texts: fails in tests
            raise RuntimeError(f"two statements are named {name}: rename one")
        if name not in self._known and name not in self._preparing:
            self._pending.append(f"PREPARE {name} AS {sql}")
            self._preparing.add(name)
        values = f" ({', '.join(['%s'] * len(args))})" if args else ""
        self._pending.append(self._cur.mogrify(f"EXECUTE {name}{values}", args))

    def send(self, *last: str) -> None:
        """Send what waits (and ``last``); the cursor is left on the last one's rows."""
        statements, self._pending = [*self._pending, *last], []
        if statements:
            self._run("; ".join(statements))
            while self._cur.nextset():
                pass

    def _run(self, text: str) -> None:
        """Send one message. A connection whose message failed is closed if it carried a
        PREPARE (which of them the server kept is not known), or if the server no longer
        has a statement this connection prepared (``DEALLOCATE``, a pooler that moved the
        session) or its plan no longer fits (a migration changed a column's type): the
        names it knows are wrong, and every later use would fail the same way."""
        import psycopg

        try:
            self._cur.execute(text)
        except psycopg.Error as exc:
            if self._preparing or exc.sqlstate in _STALE_STATEMENT:
                self._cur.connection.close()
            raise
        self._known |= self._preparing
        self._preparing = set()

    def fetchone(self) -> Any:
        self.send()
        return self._cur.fetchone()

    def fetchall(self) -> list[Any]:
        self.send()
        return self._cur.fetchall()

    def finish(self) -> list[list[Any]]:
        """Send what waits with the COMMIT, in one round trip: the transaction is over.
        The rows of each statement that returns rows, in order."""
        self._run("; ".join([*self._pending, "COMMIT"]))
        self._pending, self.finished = [], True
        found = []
        while True:
            if self._cur.description is not None:
                found.append(self._cur.fetchall())
            if not self._cur.nextset():
                return found


#: The statements each connection has prepared (``Batch.prepared``).
_PREPARED: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()
#: Each prepared statement's name and text, so two texts never share a name.
_STATEMENTS: dict[str, str] = {}
#: invalid_sql_statement_name (the statement is gone), feature_not_supported ("cached plan
#: must not change result type").
_STALE_STATEMENT = {"26000", "0A000"}


def _batched(conn: Any) -> Iterator[Batch]:
    """A ``Batch`` on ``conn`` for the caller's transaction, committed once it is done
    (unless it ``finish``ed), rolled back if it raised after BEGIN had left."""
    import psycopg
    from psycopg.pq import TransactionStatus

    conn.autocommit = True  # BEGIN and COMMIT are ours, sent with the statements
    try:
        batch = Batch(psycopg.ClientCursor(conn))
        try:
            yield batch
            if not batch.finished:
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
