"""A rebuildable SQLite index of ``incoming/`` so a claim does not parse every waiting task.

The folder stays the truth; docs/architecture.md ("Claiming without reading every waiting
task") gives the protocol that keeps the index in step with it. An edit in place that
keeps the inode is seen when the claim re-checks the file, or by ``octopoid doctor
--rebuild``. Its size: the claim index and the usage ledger share one SQLite file and its
writer gate.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

from ...model import defaults
from ...model.tasks import FILE_RE, Task, claim_order
from .queries import TaskQueries

#: A directory's mtime moves in steps of the kernel's coarse clock (4 ms at HZ=250, 10 ms
#: at HZ=100): two changes within one step leave the same mtime.
MTIME_TICK_NS = 20_000_000


SCHEMA_VERSION = 7  # 6: title and attempts, for `octopoid list`; 7: partial indexes
COUNT_KEPT_FROM = 1000  # tasks in a folder before its count is kept (smaller: listed)
RACY_NS = 2_000_000_000  # a folder's mtime this young may hide a second change in its tick
OWN_MTIMES = 64  # recent own writes to recognise incoming/ by (any number of writers)
OWN_MTIMES_TRIM = 16  # a process trims the older ones every this many own writes
_SCHEMA = """
CREATE TABLE IF NOT EXISTS incoming (
    id TEXT PRIMARY KEY,
    role TEXT NOT NULL,
    rank INTEGER NOT NULL,
    created TEXT NOT NULL,
    seq INTEGER NOT NULL,
    blocked_by TEXT NOT NULL,
    inode INTEGER NOT NULL,
    not_before INTEGER NOT NULL,
    title TEXT NOT NULL,
    attempts INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS incoming_order ON incoming (role, rank, created, seq, id);
CREATE INDEX IF NOT EXISTS incoming_order_any ON incoming (rank, created, seq, id);
CREATE INDEX IF NOT EXISTS incoming_free_age ON incoming (created, rank, seq, id)
    WHERE blocked_by = '';
CREATE INDEX IF NOT EXISTS incoming_blocked ON incoming (rank, created, seq, id)
    WHERE blocked_by != '';
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS own_mtimes (mtime_ns INTEGER PRIMARY KEY, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS ledger (
    id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    turns INTEGER NOT NULL,
    cost REAL NOT NULL,
    moved REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS ledger_recent ON ledger (state, moved);
"""


class WriterGate:
    """A readers-writer ``flock``: octopoid's writes to incoming/ hold it shared, from their
    first change there until the folder's new mtime is recorded; a claim that finds an
    mtime nobody recorded takes it exclusively and looks again, so it rescans only for a
    change made outside octopoid. Threads of a process share one shared hold (counted)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._guard = threading.Lock()
        self._holders = 0
        self._fd: int | None = None
        self._pid = 0

    def _open(self) -> int:
        return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._guard:
            if self._pid != os.getpid():  # a forked child opens its own
                self._fd, self._holders, self._pid = self._open(), 0, os.getpid()
            if self._holders == 0:
                fcntl.flock(self._fd, fcntl.LOCK_SH)
            self._holders += 1
        try:
            yield
        finally:
            with self._guard:
                self._holders -= 1
                if self._holders == 0:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)

    @contextmanager
    def quiet(self) -> Iterator[bool]:
        """Hold the gate exclusively for the block (no write in flight, none starting), after
        waiting at most ``WRITER_GATE_WAIT_SECONDS``; yields False, not holding it, when it
        stayed taken that long. Never enter it while this thread writes."""
        fd = self._open()
        try:
            deadline = time.monotonic() + defaults.WRITER_GATE_WAIT_SECONDS
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        yield False
                        return
                    time.sleep(0.0005)
            yield True
        finally:
            os.close(fd)  # drops the lock


class ClaimIndex(TaskQueries):
    MARK, INCOMING, LEDGER = "?", "incoming", "ledger"  # as ``TaskQueries`` reads them
    BLOCKED, FREE = "blocked_by != ''", "blocked_by = ''"  # blockers: a space-separated list
    TITLED = UNTITLED = "title, rank, attempts"
    NO_LIMIT = -1
    _blockers, _title = staticmethod(str.split), staticmethod(str)

    def __init__(self, db_path: Path, incoming_dir: Path) -> None:
        self.db_path = db_path
        self.incoming_dir = incoming_dir
        self._local = threading.local()  # a connection per thread (and per forked process)
        self.writes = WriterGate(db_path.with_name(db_path.name + ".writers"))

    def _db(self) -> sqlite3.Connection:
        conn, pid = getattr(self._local, "conn", None), getattr(self._local, "pid", 0)
        if conn is None or pid != os.getpid():
            try:
                conn = self._open()
            except sqlite3.DatabaseError:
                self.db_path.unlink(missing_ok=True)  # a cache: drop it and start again
                conn = self._open()
            self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    def _reading(self) -> AbstractContextManager[sqlite3.Connection]:
        return nullcontext(self._db())

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.db_path, timeout=30, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        if conn.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
            conn.executescript(
                "DROP TABLE IF EXISTS incoming; DROP TABLE IF EXISTS meta;"
                "DROP TABLE IF EXISTS ledger; DROP TABLE IF EXISTS own_mtimes;"
            )
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.executescript(_SCHEMA)
        return conn

    def upsert(self, task: Task, inode: int) -> None:
        rank, created, seq, tid = claim_order(task)
        due = int(task.not_before.timestamp()) if task.not_before else 0
        blocked = " ".join(task.blocked_by)
        row = (tid, task.role, rank, created, seq, blocked, inode, due, task.title, task.attempts)
        self._db().execute("INSERT OR REPLACE INTO incoming VALUES (?,?,?,?,?,?,?,?,?,?)", row)

    def remove(self, task_id: str) -> None:
        self._db().execute("DELETE FROM incoming WHERE id = ?", (task_id,))

    def candidates(self, role: str | None, after: tuple | None, now: float) -> list[tuple]:
        """Up to ``CLAIM_BATCH`` rows ``(rank, created, seq, id, blockers)`` in claim order.

        ``after`` is the sort key of the last row already seen (keyset paging, so rows that
        other claimers delete meanwhile do not shift the window).
        """
        clauses: list[str] = ["not_before <= ?"]
        args: list[object] = [int(now)]
        if role is not None:
            clauses.append("role = ?")
            args.append(role)
        if after is not None:
            clauses.append("(rank, created, seq, id) > (?, ?, ?, ?)")
            args.extend(after)
        where = "WHERE " + " AND ".join(clauses)
        rows = self._db().execute(
            f"SELECT rank, created, seq, id, blocked_by FROM incoming {where} "
            "ORDER BY rank, created, seq, id LIMIT ?",
            [*args, defaults.CLAIM_BATCH],
        )
        return [(*key, blocked.split()) for *key, blocked in rows]

    def folder_mtime(self) -> int:
        return self.incoming_dir.stat().st_mtime_ns

    def note_own_write(self) -> None:
        """After one of octopoid's own writes in incoming/, remember the folder's mtime as ours.

        A set of recent mtimes rather than one value, so any number of processes writing at
        once keep the index synced (a claim under a steady producer never rescans). A file
        dropped in by hand gives the folder an mtime nobody recorded, and the next claim
        rescans, unless one of our writes came after it: then the scheduler's housekeeping
        reconcile finds it within ``INDEX_RECONCILE_SECONDS`` (``due_for_reconcile``).
        Old mtimes are trimmed every ``OWN_MTIMES_TRIM`` writes of a process, not at each.
        """
        db = self._db()
        db.execute(
            "INSERT OR REPLACE INTO own_mtimes VALUES (?, ?)", (self.folder_mtime(), time.time())
        )
        self._own_writes = getattr(self, "_own_writes", 0) + 1
        if self._own_writes % OWN_MTIMES_TRIM == 0:
            db.execute(
                "DELETE FROM own_mtimes WHERE mtime_ns NOT IN "
                "(SELECT mtime_ns FROM own_mtimes ORDER BY at DESC LIMIT ?)",
                (OWN_MTIMES,),
            )

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Several index changes committed at once (one SQLite commit per queue write)."""
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def known_mtime(self, mtime: int) -> bool:
        if self._get("incoming_mtime") == str(mtime):
            return True
        row = self._db().execute("SELECT 1 FROM own_mtimes WHERE mtime_ns = ?", (mtime,))
        return row.fetchone() is not None

    def mark_stale(self) -> None:
        """Force a rescan at the next claim (after a crash's debris was repaired)."""
        self._set("incoming_mtime", "")
        self._db().execute("DELETE FROM own_mtimes")

    def is_stale(self) -> bool:
        """Has anyone but octopoid changed incoming/ since the index last saw it?"""
        if self.known_mtime(self.folder_mtime()):
            return False
        with self.writes.quiet() as quiet:  # writes in flight record their mtimes first
            if not quiet:  # held too long: rescan rather than stall behind a stopped holder
                return True
            return not self.known_mtime(self.folder_mtime())

    def due_for_reconcile(self, now: float | None = None) -> bool:
        """Time for the housekeeping rescan that catches a drop hidden behind our writes."""
        now = time.time() if now is None else now
        return now - float(self._get("last_reconcile") or 0) > defaults.INDEX_RECONCILE_SECONDS

    def reconcile(self, read: Callable[[Path], Task | None]) -> None:
        """Make the index match the folder: drop gone rows, read new (or replaced) files.

        ``read`` returns None for a file it could not parse (the store quarantines it).
        """
        mtime_before = self.folder_mtime()
        on_disk = {key: (name, inode) for key, name, inode in self._scan()}
        known = dict(self._db().execute("SELECT id, inode FROM incoming"))
        for task_id in known.keys() - on_disk.keys():
            if not os.path.lexists(self.incoming_dir / f"TASK-{task_id}.md"):
                self.remove(task_id)  # (a row written after the listing: its file came too)
        for key, (name, inode) in on_disk.items():
            if known.get(key) != inode:
                task = read(self.incoming_dir / name)
                if task is not None:
                    self.upsert(task, inode)
        # A folder changed within the file system's clock tick may change again with the
        # same mtime (an editor's save just after a drop): then the next claim looks again.
        settled = time.time_ns() - mtime_before > MTIME_TICK_NS
        self._set("incoming_mtime", str(mtime_before) if settled else "")
        self._set("last_reconcile", str(time.time()))

    def _scan(self) -> Iterable[tuple[str, str, int]]:
        """(index key, file name, inode) per entry, from the listing alone (no ``stat``, no
        ``Path`` objects: 50k of those cost more than the listing); a stray name gets a key
        no id can have, so it is read (and quarantined) once."""
        with os.scandir(self.incoming_dir) as entries:
            for entry in entries:
                name = entry.name
                if name.startswith("."):
                    continue
                match = FILE_RE.fullmatch(name)
                yield (match.group(1) if match else "/" + name), name, entry.inode()

    # --- the usage ledger: turns, cost, state and last move per task, kept at every write ---

    def record_usage(self, task: Task, state: str, moved: float | None = None) -> None:
        """The task's totals and state after a write (``moved``: when; default now)."""
        turns = int(task.headers.get("TURNS_TOTAL") or 0)
        cost = float(task.headers.get("COST_USD_TOTAL") or 0)
        row = (task.id, state, turns, cost, time.time() if moved is None else moved)
        self._db().execute("INSERT OR REPLACE INTO ledger VALUES (?, ?, ?, ?, ?)", row)

    def state_of(self, task_id: str) -> str | None:
        """Where octopoid's last write left the task (a hand move does not change it)."""
        row = self._db().execute("SELECT state FROM ledger WHERE id = ?", (task_id,)).fetchone()
        return row[0] if row else None

    def rebuild_ledger(self, tasks: Iterable[Task]) -> int:
        """Forget the ledger and refill it from ``tasks`` (every task, read from the folders).

        A task's state is where its History's last move put it: a file moved by hand
        keeps the state octopoid left it in (it is not done for its dependants)."""
        db = self._db()
        db.execute("BEGIN")
        db.execute("DELETE FROM ledger")
        n = 0
        for task in tasks:
            try:
                moved = task.path.stat().st_mtime if task.path else None
            except FileNotFoundError:
                moved = None
            moves = task.moves()
            self.record_usage(task, moves[-1][1] if moves else task.state.value, moved)
            n += 1
        db.execute("INSERT OR REPLACE INTO meta VALUES ('ledger_built', ?)", (str(time.time()),))
        db.execute("COMMIT")
        return n

    def ledger_built(self) -> bool:
        return self._get("ledger_built") is not None

    def forget_incoming(self) -> None:
        """Drop every row, so the next reconcile reads every waiting task again."""
        self._db().execute("DELETE FROM incoming")

    def counted(self, folder: Path, count: Callable[[], int]) -> int:
        """How many tasks ``folder`` holds: ``count()`` (a listing) only when the folder
        changed since the last one, known by its mtime, read *before* listing: a file that
        comes or goes during the listing leaves a newer mtime, so the next call counts again.
        As git does with its index, a count is not kept while the mtime is younger than the
        file system's timestamp granularity could hide (``RACY_NS``): two changes in one
        tick would share an mtime. 50,000 names cost a 40 ms listing; an unchanged done/, a
        stat. A folder under ``COUNT_KEPT_FROM`` tasks is cheaper to list than to keep: no
        write joins the claims' on the index for it (the scheduler counts every pass)."""
        mtime = folder.stat().st_mtime_ns
        key = f"count:{folder.name}"
        known = (self._get(key) or "").split()
        if len(known) == 2 and known[0] == str(mtime):
            return int(known[1])
        found = count()
        if found >= COUNT_KEPT_FROM and time.time_ns() - mtime > RACY_NS:
            self._set(key, f"{mtime} {found}")
        return found

    def _get(self, key: str) -> str | None:
        row = self._db().execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def _set(self, key: str, value: str) -> None:
        self._db().execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))
