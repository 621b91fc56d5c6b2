"""Long-term memory: notes in one SQLite database, searchable with FTS5 and ranked by BM25.

Each note has content, section/topic, tags, agent, a scope (``notes:<agent>:<project>``
or ``notes:<agent>:global``), task and session ids, metadata, importance, a pinned flag and
an access count. The same content written again in the same scope reinforces the existing
note instead of adding a copy. The FTS index is an external-content table kept in step by
triggers, so updates and deletes never leave it stale.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import config
from ..exceptions import InvalidMemoryInput, MemoryStoreError
from . import ranking
from .notes import normalize_item

if TYPE_CHECKING:
    from .postgres import PostgresMemoryStore

_SCHEMA = """
CREATE TABLE IF NOT EXISTS notes (
    id INTEGER PRIMARY KEY,
    content TEXT NOT NULL,
    section TEXT,
    topic TEXT,
    tags TEXT NOT NULL DEFAULT '',
    agent TEXT NOT NULL,
    scope TEXT NOT NULL,
    task_id TEXT,
    session_id TEXT,
    metadata TEXT NOT NULL DEFAULT '{}',
    created REAL NOT NULL,
    updated REAL NOT NULL,
    content_hash TEXT NOT NULL,
    importance REAL NOT NULL DEFAULT 0.5,
    pinned INTEGER NOT NULL DEFAULT 0,
    access_count INTEGER NOT NULL DEFAULT 0,
    UNIQUE (scope, content_hash)
);
CREATE VIRTUAL TABLE IF NOT EXISTS notes_fts USING fts5(
    content, topic, tags, content='notes', content_rowid='id', tokenize='porter unicode61'
);
CREATE TRIGGER IF NOT EXISTS notes_ai AFTER INSERT ON notes BEGIN
    INSERT INTO notes_fts(rowid, content, topic, tags)
    VALUES (new.id, new.content, new.topic, new.tags);
END;
CREATE TRIGGER IF NOT EXISTS notes_ad AFTER DELETE ON notes BEGIN
    INSERT INTO notes_fts(notes_fts, rowid, content, topic, tags)
    VALUES ('delete', old.id, old.content, old.topic, old.tags);
END;
CREATE TRIGGER IF NOT EXISTS notes_au AFTER UPDATE OF content, topic, tags ON notes BEGIN
    INSERT INTO notes_fts(notes_fts, rowid, content, topic, tags)
    VALUES ('delete', old.id, old.content, old.topic, old.tags);
    INSERT INTO notes_fts(rowid, content, topic, tags)
    VALUES (new.id, new.content, new.topic, new.tags);
END;
CREATE INDEX IF NOT EXISTS notes_pinned ON notes (scope, importance DESC, updated DESC)
    WHERE pinned = 1;
"""
# 1: the pinned notes' partial index (every prompt reads them: a scan of every note before)
SCHEMA_VERSION = 1  # PRAGMA user_version; a store of an older version gets _SCHEMA again
WORD_RE = re.compile(r"\w+")
REINFORCE_STEP = 0.1  # importance gained when the same note is written again
# A phrase's oldest notes read first: all of a rare one's, and a common one's rate (its
# notes per note up to the last of these; 300 make it good to 6%)
SAMPLE = 300
PLAINLY = 1.5  # an estimate this many times what is asked is taken as enough (8 sigma)
# A term's notes after a rowid, oldest first (FTS5 reads a doclist forward: newest first
# would read all of it), as one string: one value to step over, not a row per note
POSTINGS = (
    "SELECT group_concat(rowid) FROM (SELECT rowid FROM notes_fts WHERE notes_fts MATCH ? "
    "AND rowid > ? LIMIT ?)"
)
# Notes by id, in the order given, through the filters (``search_notes``)
BY_IDS = "SELECT notes.* FROM json_each(?) AS j CROSS JOIN notes ON notes.id = j.value WHERE 1"


def content_hash(content: str) -> str:
    return hashlib.sha256(normalize_item(content).encode()).hexdigest()


def project_scope(agent: str = "octopoid", global_: bool = False) -> str:
    """``notes:<agent>:<project>``: the project is the root folder's name, or with the queue
    in PostgreSQL (clones on several machines, named as each likes) the database's name."""
    return f"notes:{agent}:{'global' if global_ else project_name()}"


def project_name() -> str:
    backend, dsn = config.store_choice()
    if backend == "postgres" and dsn:
        from psycopg.conninfo import conninfo_to_dict

        return str(conninfo_to_dict(dsn).get("dbname") or "postgres")
    return config.find_project_root().name


def fts_phrases(text: str) -> list[str]:
    """Safe FTS5 phrases from free text: each distinct word a quoted phrase of its parts.

    ``auth.py`` -> ``"auth py"``, ``token-refresh`` -> ``"token refresh"``, ``c++`` -> ``"c"``,
    ``don't`` -> ``"don t"``: punctuation never reaches FTS5's query syntax.
    """
    phrases = []
    for word in text.lower().split():  # FTS5 folds case: "The" is "the", counted once
        parts = WORD_RE.findall(word)
        if parts:
            phrases.append('"' + " ".join(parts) + '"')
    return list(dict.fromkeys(phrases))


def _tags(tags: Any) -> str:
    items = [tags] if isinstance(tags, str) else list(tags or ())
    return " ".join(dict.fromkeys(t.strip() for t in items if t and t.strip()))


class MemoryStore:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or config.get_memory_dir() / "memory.db"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA busy_timeout=30000")
        self.db.execute("PRAGMA synchronous=NORMAL")  # WAL: safe against crashes of ours
        if self.db.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
            self.db.executescript(
                f"BEGIN IMMEDIATE; {_SCHEMA} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
            )  # one migrator at a time; IF NOT EXISTS makes a second one a no-op

    def close(self) -> None:
        self.db.close()

    def write_note(
        self,
        content: str,
        *,
        section: str | None = None,
        topic: str | None = None,
        tags: Any = (),
        agent: str = "octopoid",
        scope: str | None = None,
        task_id: str | None = None,
        session_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        importance: float = 0.5,
        pinned: bool = False,
    ) -> int:
        """Store a note; the same content in the same scope reinforces the existing one."""
        content = content.strip()
        if not content:
            raise InvalidMemoryInput("an empty note cannot be stored")
        scope = scope or project_scope(agent)
        digest, now = content_hash(content), time.time()
        self.db.execute("BEGIN IMMEDIATE")
        try:
            row = self.db.execute(
                "SELECT id, tags, importance FROM notes WHERE scope = ? AND content_hash = ?",
                (scope, digest),
            ).fetchone()
            if row is not None:
                merged = _tags([*row["tags"].split(), *([tags] if isinstance(tags, str) else tags)])
                self.db.execute(
                    "UPDATE notes SET importance = min(1.0, importance + ?), updated = ?, "
                    "tags = ?, pinned = max(pinned, ?) WHERE id = ?",
                    (REINFORCE_STEP, now, merged, int(pinned), row["id"]),
                )
                note_id = row["id"]
            else:
                cur = self.db.execute(
                    "INSERT INTO notes (content, section, topic, tags, agent, scope, task_id, "
                    "session_id, metadata, created, updated, content_hash, importance, pinned) "
                    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        content,
                        section,
                        topic,
                        _tags(tags),
                        agent,
                        scope,
                        task_id,
                        session_id,
                        json.dumps(metadata or {}),
                        now,
                        now,
                        digest,
                        importance,
                        int(pinned),
                    ),
                )
                note_id = cur.lastrowid
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return int(note_id)

    def search_notes(
        self,
        query: str,
        *,
        agent: str | None = None,
        scope: str | None = None,
        tags: Any = None,
        topic: str | None = None,
        session_id: str | None = None,
        limit: int = 10,
    ) -> list[dict[str, Any]]:
        """Notes matching ``query``, best first (``score``: higher is better, BM25 over the
        ``ranking`` leaders of its ``selective`` terms)."""
        size = self._size()
        phrases = fts_phrases(query)[: ranking.MAX_QUERY_WORDS]
        postings = self._postings(phrases, size)
        where, args = filters("?", "instr", agent, scope, tags, topic, session_id)
        if postings is None:  # every word common: BM25 over all their notes, newest too
            rows = self.db.execute(
                "SELECT notes.*, -bm25(notes_fts) AS score FROM notes_fts "
                "JOIN notes ON notes.id = notes_fts.rowid "
                f"WHERE notes_fts MATCH ? {where} ORDER BY bm25(notes_fts) LIMIT ?",
                [" OR ".join(phrases), *args, limit],
            )
            return [_row(r) for r in rows]
        if not postings:
            return []
        score = ranking.summed_idf(postings, size)
        rows: list[dict[str, Any]] = []
        for ids in ranking.leaders(score, limit):
            rows += map(_row, self.db.execute(f"{BY_IDS} {where}", [json.dumps(ids), *args]))
            if len(rows) >= limit:
                break
        weights = ranking.term_weights(postings, size, [r["id"] for r in rows])
        return ranking.rerank(rows, weights)[:limit]

    def _postings(self, phrases: list[str], newest: int) -> dict[str, list[int]] | None:
        """The notes of each ``selective`` phrase, visiting few of the others' notes; None
        when every phrase is common (their oldest notes would hide the newest, best ones).

        One read of each phrase's oldest ``SAMPLE`` notes has all of a rare phrase's, and
        estimates how many a common one has from how old the last of them is. Then
        ``counted_enough`` asks, rarest first by that, how many notes a phrase has up to the
        most it needs: an estimate ``PLAINLY`` above that is enough ("the" costs 300 visits,
        not 5000), and the others are read on, as far as that. (A phrase common only in the
        oldest notes counts as common; its idf was low anyway.)
        """
        sample = {p: self._ids(p, SAMPLE) for p in phrases}
        estimate = {
            p: len(ids) if len(ids) < SAMPLE else SAMPLE * newest // ids[-1]
            for p, ids in sample.items()
        }
        found: dict[str, list[int]] = {}

        def count(phrase: str, at_most: int) -> int:
            ids = sample[phrase]
            if len(ids) < SAMPLE or len(ids) >= at_most:  # all of them, or enough
                found[phrase] = ids
                return min(len(ids), at_most)
            if estimate[phrase] >= PLAINLY * at_most:
                return at_most
            found[phrase] = ids + self._ids(phrase, at_most - len(ids), after=ids[-1])
            return len(found[phrase])

        counts = ranking.counted_enough(sorted(phrases, key=estimate.__getitem__), count)
        chosen = ranking.selective(counts)
        if chosen and all(counts[p] >= ranking.COMMON_CAP for p in chosen):
            return None
        return {p: found[p] for p in chosen}  # a chosen phrase was read to the end

    def _ids(self, phrase: str, at_most: int = 0, after: int = 0) -> list[int]:
        """The ids of the phrase's oldest notes after ``after``, up to ``at_most``
        (``COMMON_CAP``)."""
        args = (phrase, after, at_most or ranking.COMMON_CAP)
        text = self.db.execute(POSTINGS, args).fetchone()[0]
        return list(map(int, text.split(","))) if text else []

    def _size(self) -> int:
        """The highest note id: the number of notes, give or take the deleted ones (idf and
        a phrase's rate need no more; ``count(*)`` would visit every note)."""
        return int(self.db.execute("SELECT max(id) FROM notes").fetchone()[0] or 0)

    def get_recent_notes(self, *, limit: int = 10, **given: Any) -> list[dict[str, Any]]:
        """Newest first; ``filters`` as for ``search_notes`` (agent, scope, tags, topic,
        session_id)."""
        where, args = filters("?", "instr", **given)
        rows = self.db.execute(
            f"SELECT * FROM notes WHERE 1 {where} ORDER BY updated DESC, id DESC LIMIT ?",
            [*args, limit],
        )
        return [_row(r) for r in rows]

    def find_note(self, content: str, scope: str) -> int | None:
        """The id of the note with this content (normalised) in ``scope``, if any."""
        row = self.db.execute(
            "SELECT id FROM notes WHERE scope = ? AND content_hash = ?",
            (scope, content_hash(content)),
        ).fetchone()
        return row["id"] if row else None

    def get_note(self, note_id: int) -> dict[str, Any] | None:
        row = self.db.execute("SELECT * FROM notes WHERE id = ?", (note_id,)).fetchone()
        return _row(row) if row else None

    def pinned_notes(self, scope: str | None = None) -> list[dict[str, Any]]:
        where, args = filters("?", "instr", scope=scope)
        rows = self.db.execute(
            f"SELECT * FROM notes WHERE pinned = 1 {where} ORDER BY importance DESC, updated DESC",
            args,
        )
        return [_row(r) for r in rows]

    def delete_note(self, note_id: int) -> bool:
        return self.db.execute("DELETE FROM notes WHERE id = ?", (note_id,)).rowcount > 0

    def update_note(
        self,
        note_id: int,
        *,
        content: str | None = None,
        tags: Any = None,
        topic: str | None = None,
        importance: float | None = None,
        pinned: bool | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> bool:
        changes = note_changes(content, tags, topic, importance, pinned, metadata)
        if not changes:
            return self.get_note(note_id) is not None
        sets = ", ".join(f"{key} = ?" for key in changes)
        try:
            cur = self.db.execute(
                f"UPDATE notes SET {sets} WHERE id = ?", [*changes.values(), note_id]
            )
        except sqlite3.IntegrityError:
            raise MemoryStoreError("the same note already exists in that scope") from None
        return cur.rowcount > 0

    def record_access(self, note_ids: list[int]) -> None:
        """Count an injection into a prompt (only notes actually injected)."""
        self.db.execute(  # one statement, one transaction: not a commit per note
            "UPDATE notes SET access_count = access_count + 1 "
            "WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps(note_ids),),
        )

    def count(self) -> int:
        return self.db.execute("SELECT count(*) FROM notes").fetchone()[0]

    def integrity_check(self) -> None:
        """Raise ``sqlite3.DatabaseError`` if the FTS index disagrees with the notes."""
        self.db.execute("INSERT INTO notes_fts(notes_fts, rank) VALUES ('integrity-check', 1)")


def note_changes(
    content: str | None,
    tags: Any,
    topic: str | None,
    importance: float | None,
    pinned: bool | None,
    metadata: dict[str, Any] | None,
) -> dict[str, Any]:
    """The columns ``update_note`` sets for the fields given (none: an empty dict)."""
    changes: dict[str, Any] = {}
    if content is not None:
        changes.update(content=content.strip(), content_hash=content_hash(content))
    if tags is not None:
        changes["tags"] = _tags(tags)
    if topic is not None:
        changes["topic"] = topic
    if importance is not None:
        changes["importance"] = importance
    if pinned is not None:
        changes["pinned"] = int(pinned)
    if metadata is not None:
        changes["metadata"] = json.dumps(metadata)
    if changes:
        changes["updated"] = time.time()
    return changes


def filters(
    mark: str,
    find: str,
    agent: str | None = None,
    scope: str | None = None,
    tags: Any = None,
    topic: str | None = None,
    session_id: str | None = None,
) -> tuple[str, list[Any]]:
    """``AND ...`` clauses and their arguments for the search filters, in a dialect's
    placeholder (``?``, ``%s``) and substring function (``instr``, ``strpos``)."""
    clauses, args = [], []
    for column, value in (
        ("agent", agent),
        ("scope", scope),
        ("topic", topic),
        ("session_id", session_id),
    ):
        if value is not None:
            clauses.append(f"AND notes.{column} = {mark}")
            args.append(value)
    for tag in _tags(tags).split():
        clauses.append(f"AND {find}(' ' || notes.tags || ' ', {mark}) > 0")
        args.append(f" {tag} ")
    return " ".join(clauses), args


def open_memory() -> Memory:
    """Long-term memory where the queue is: PostgreSQL (shared by every machine on the
    queue) or this project's SQLite file."""
    backend, dsn = config.store_choice()
    if backend == "postgres" and dsn:
        from ..store.postgres import shared_store
        from .postgres import PostgresMemoryStore

        return PostgresMemoryStore(shared_store(dsn))
    return MemoryStore()


def _row(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(row)
    out["tags"] = out["tags"].split()
    out["metadata"] = json.loads(out["metadata"] or "{}")
    out["pinned"] = bool(out["pinned"])
    out.pop("content_hash", None)
    return out


if TYPE_CHECKING:
    Memory = MemoryStore | PostgresMemoryStore  # what open_memory gives: the same methods
