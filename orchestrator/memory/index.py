"""The term index both memories keep beside their notes (``terms`` cuts the terms).

Three tables, the same in SQLite and PostgreSQL: ``memory_terms`` (term, note, tf, len: a
term's notes, how often it occurs in each and the note's length, read in one range of the
primary key), ``memory_vocab`` (term, df: how many notes have it) and ``memory_totals``
(notes and their summed length: BM25's average over the store). A note's ``length`` column
is NULL until it is indexed: a store made before the index is indexed by ``index_pending``.
Every change is one pass over the terms whose counts change, sorted, so two writers lock
vocabulary rows in the same order and never deadlock.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, NamedTuple

from ..base.patterns import LazyPattern
from .terms import note_terms

TASK_TAG_RE = LazyPattern(r"TASK-[A-Za-z0-9_-]{1,64}")
PENDING_BATCH = 5000  # notes indexed per transaction by ``index_pending``: a batch's
# vocabulary is written once, and a common word is in every batch (20,000 synthetic notes,
# with lengths written in one executemany and PostgreSQL's postings by COPY: 55 s -> 17 s
# in PostgreSQL, 26-30 s -> 18-25 s in SQLite, where cutting the notes into terms is most)


class Dialect(NamedTuple):
    """How a store names its tables and marks a parameter."""

    mark: str  # "?" or "%s"
    schema: str  # "" or "octopoid."
    notes: str  # the notes table


SQLITE = Dialect("?", "", "notes")
POSTGRES = Dialect("%s", "octopoid.", "octopoid.memory")


def indexed_text(content: str, topic: str | None, tags: Any) -> str:
    """What a note is searched by: its content, topic and tags but the tasks it came from
    (``TASK-12``: every promoted note has one, and "task" would be a word of each)."""
    tags = tags.split() if isinstance(tags, str) else list(tags or ())
    return " ".join([content, topic or "", *(t for t in tags if not TASK_TAG_RE.fullmatch(t))])


def change(cur: Any, d: Dialect, notes: dict[int, tuple[str | None, str | None]]) -> None:
    """Index notes anew: ``{note id: (its old indexed text or None, its new one or None)}``
    (None new: the note is gone). One sorted pass over the vocabulary."""
    m, s = d.mark, d.schema
    df: Counter[str] = Counter()
    count = length = 0
    postings, lengths = [], []
    for note, (old, new) in notes.items():
        if old is not None:
            cur.execute(f"SELECT term, tf FROM {s}memory_terms WHERE note = {m}", (note,))
            gone = dict(cur.fetchall())
            df.subtract(gone.keys())
            count, length = count - 1, length - sum(gone.values())
            cur.execute(f"DELETE FROM {s}memory_terms WHERE note = {m}", (note,))
        if new is not None:
            terms = note_terms(new)
            size = sum(terms.values())
            df.update(terms.keys())
            count, length = count + 1, length + size
            postings += [(term, note, tf, size) for term, tf in terms.items()]
            lengths.append((size, note))
    if lengths:
        cur.executemany(f"UPDATE {d.notes} SET length = {m} WHERE id = {m}", lengths)
    postings.sort()  # in the primary key's order: each page of it is written once
    if postings and d is POSTGRES:  # COPY: a bulk load's postings at a fraction of INSERT's
        with cur.copy("COPY octopoid.memory_terms (term, note, tf, len) FROM STDIN") as copy:
            for row in postings:
                copy.write_row(row)
    elif postings:
        cur.executemany(
            f"INSERT INTO {s}memory_terms (term, note, tf, len) VALUES ({m}, {m}, {m}, {m})",
            postings,
        )
    deltas = sorted((term, n) for term, n in df.items() if n)
    if deltas:
        cur.executemany(
            f"INSERT INTO {s}memory_vocab (term, df) VALUES ({m}, {m}) ON CONFLICT (term) "
            "DO UPDATE SET df = memory_vocab.df + excluded.df",
            deltas,
        )
    gone = [(term,) for term, n in deltas if n < 0]
    if gone:
        cur.executemany(f"DELETE FROM {s}memory_vocab WHERE term = {m} AND df <= 0", gone)
    if count or length:
        cur.execute(
            f"UPDATE {s}memory_totals SET notes = notes + {m}, length = length + {m}",
            (count, length),
        )


def pending(cur: Any, d: Dialect, lock: str = "") -> dict[int, tuple[None, str]]:
    """Up to ``PENDING_BATCH`` notes not indexed yet, as ``change`` takes them."""
    cur.execute(
        f"SELECT id, content, topic, tags FROM {d.notes} WHERE length IS NULL "
        f"ORDER BY id LIMIT {PENDING_BATCH} {lock}"
    )
    return {row[0]: (None, indexed_text(row[1], row[2], row[3])) for row in cur.fetchall()}


# Each term's document frequency beside the store's totals, in one statement (a row per
# term found, and one with no term when none is). PostgreSQL looks each term up in the
# vocabulary's key, as SQLite does (``= ANY`` made a bitmap scan of it: 0.53 ms at the
# median against 0.44 at 100,000 notes, interleaved).
SQLITE_FREQUENCIES = """
SELECT t.notes, t.length, v.term, v.df FROM memory_totals t LEFT JOIN (
    json_each(?) AS j JOIN memory_vocab v ON v.term = j.value) ON 1
"""
POSTGRES_FREQUENCIES = """
SELECT t.notes, t.length, v.term, v.df FROM octopoid.memory_totals t
LEFT JOIN (unnest(%s::text[]) AS q(term) JOIN octopoid.memory_vocab v ON v.term = q.term)
    ON true
"""


def frequencies(fetch: Any, d: Dialect, terms: list[str]) -> tuple[dict[str, int], int, float]:
    """Each term's document frequency, the number of notes, and their average length
    (``fetch(sql, args)`` gives a statement's rows)."""
    if d is SQLITE:
        rows = fetch(SQLITE_FREQUENCIES, (json.dumps(terms),))
    else:
        rows = fetch(POSTGRES_FREQUENCIES, (terms,))
    df = {row[2]: row[3] for row in rows if row[2] is not None}
    notes, length = (rows[0][0], rows[0][1]) if rows else (0, 0)
    return df, int(notes), length / notes if notes else 1.0


#: A note's columns as a read gives them (PostgreSQL's ``SELECT *`` would need a cursor's
#: description: ``memory/postgres.py`` reads in one round trip, without one).
COLUMNS = [
    "id", "content", "section", "topic", "tags", "agent", "scope", "task_id", "session_id",
    "metadata", "created", "updated", "importance", "pinned", "access_count", "length",
]  # fmt: skip
_NOTE = ", ".join(f"notes.{c}" for c in COLUMNS)


# The best ``among`` notes having a chosen term by BM25 (the sum over their terms of the
# term's weight times tf / (tf + c1 + c2 * len)), and the part of it their paths make; then
# their rows through the search's filters, best first. SQLite reads the terms first (CROSS
# JOIN), each a range of the primary key (summing in SQL measured 0.6x the time of reading
# the postings into Python); only the leaders' rows are read.
SQLITE_BEST = """
WITH q(term, w, path) AS MATERIALIZED (
    SELECT value ->> 0, value ->> 1, value ->> 2 FROM json_each(?)),
top AS MATERIALIZED (
    SELECT note, sum(x) AS s, sum(CASE WHEN path THEN x ELSE 0 END) AS p FROM (
        SELECT t.note, q.path, q.w * t.tf / (t.tf + ? + ? * t.len) AS x
        FROM q CROSS JOIN memory_terms t ON t.term = q.term)
    GROUP BY note ORDER BY s DESC, note LIMIT ?)
SELECT notes.*, top.s AS score, top.p AS path_score
FROM top CROSS JOIN notes ON notes.id = top.note
WHERE 1 {where} ORDER BY top.s DESC, top.note LIMIT ?
"""
POSTGRES_BEST = f"""
WITH top AS (
    SELECT note, sum(x) AS s, sum(CASE WHEN path THEN x ELSE 0 END) AS p FROM (
        SELECT t.note, q.path, q.w * t.tf / (t.tf + %s + %s * t.len) AS x
        FROM unnest(%s::text[], %s::float8[], %s::bool[]) AS q(term, w, path)
        JOIN octopoid.memory_terms t ON t.term = q.term) AS hits
    GROUP BY note ORDER BY s DESC, note LIMIT %s)
SELECT {_NOTE}, top.s AS score, top.p AS path_score FROM top
JOIN octopoid.memory notes ON notes.id = top.note
WHERE true {{where}} ORDER BY top.s DESC, top.note LIMIT %s
"""


def best_sql(
    d: Dialect, weights: list[tuple[str, float, bool]], c1: float, c2: float, among: int
) -> tuple[str, list[Any]]:
    """The statement (``{where}`` left to fill) and its first arguments for the ``among``
    best notes by ``weights`` (term, weight, is a path); then come the filters' arguments
    and the limit."""
    if d is SQLITE:
        return SQLITE_BEST, [json.dumps(weights), c1, c2, among]
    terms, ws, paths = zip(*weights, strict=True) if weights else ((), (), ())
    return POSTGRES_BEST, [c1, c2, list(terms), list(ws), list(paths), among]


def consistent(cur: Any, d: Dialect) -> list[str]:
    """What disagrees between the notes and their index (empty: nothing)."""
    s = d.schema
    cur.execute(f"SELECT term, count(*) FROM {s}memory_terms GROUP BY term")
    counted = dict(cur.fetchall())
    cur.execute(f"SELECT term, df FROM {s}memory_vocab")
    vocab = dict(cur.fetchall())
    cur.execute(f"SELECT count(*), coalesce(sum(length), 0) FROM {d.notes}")
    notes, length = cur.fetchone()
    cur.execute(f"SELECT notes, length FROM {s}memory_totals")
    totals = tuple(cur.fetchone())
    problems = [f"df of {t!r}: {vocab.get(t)} for {n} notes" for t, n in counted.items()
                if vocab.get(t) != n]  # fmt: skip
    problems += [f"df of {t!r} without notes" for t in vocab.keys() - counted.keys()]
    if totals != (notes, length):
        problems.append(f"totals {totals} for {notes} notes of length {length}")
    return problems
