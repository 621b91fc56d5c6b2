"""The ``octopoid`` schema in PostgreSQL: the queue's tables (``queue/store/postgres.py``)
and the long-term memory's (``memory/postgres.py``), created and migrated by ``upgrade``
(versioned, idempotent, serialised by an advisory lock): ``octopoid init --store URL`` and
``octopoid db upgrade`` call it, and ``shared`` checks it once per process and database.
"""

from __future__ import annotations

from functools import lru_cache

from ..model.exceptions import StorageError
from .database import Database

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
_UPGRADE_LOCK = 0x6F63746F  # "octo": one upgrader at a time


@lru_cache(maxsize=4)
def shared(dsn: str) -> Database:
    """This process's connections to ``dsn`` (one pool for the queue and the memory), its
    schema checked once."""
    db = Database(dsn)
    initialize(db)
    return db


def upgrade_database(dsn: str) -> str:
    """Create or migrate the octopoid schema at ``dsn``; one line saying what was done."""
    db = Database(dsn)
    try:
        applied = upgrade(db)
    finally:
        db.close()
    if not applied:
        return f"the octopoid schema is up to date (version {len(MIGRATIONS)})"
    return f"applied migration(s) {', '.join(map(str, applied))}: now version {len(MIGRATIONS)}"


def schema_version(db: Database) -> int:
    """The version of the database's octopoid schema (0: none yet)."""
    with db.tx() as cur:
        cur.execute("SELECT to_regclass('octopoid.migrations') IS NOT NULL")
        if not cur.fetchone()[0]:
            return 0
        cur.execute("SELECT coalesce(max(version), 0) FROM octopoid.migrations")
        return cur.fetchone()[0]


def upgrade(db: Database) -> list[int]:
    """Apply the migrations this database lacks, in order; return their numbers."""
    with db.tx() as cur:
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


def initialize(db: Database) -> None:
    """Migrate the schema if it is not this octopoid's version."""
    if schema_version(db) != len(MIGRATIONS):
        upgrade(db)
