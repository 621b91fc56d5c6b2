"""How both memories rank a search, and the bar a note must clear to reach a prompt.

BM25 over the store: a term's weight is its idf (times how specific it is: a path or a
name says more than a word), each note's share of it grows with how often the term occurs
in the note and shrinks with the note's length against the average of every note
(``index.memory_totals``), not of the leaders. A store answers three questions (``Index``):
the terms' document frequencies, the scores of the notes having the chosen terms, and the
rows of some notes through the search's filters; the rest is here, the same for SQLite and
PostgreSQL.

The constants were chosen on one project's history and checked on another, held out
(``scripts/bench_memory.py --repo``; docs/memory.md has the tables): each says why.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Iterator
from typing import Any, Protocol

from .index import indexed_text
from .terms import PATH, SYMBOL, WORD, Term, query_terms, scan

#: BM25's usual constants (FTS5's and Lucene's): term frequency saturates at about k1, and
#: b of a note's length is judged against the average note.
K1, B = 1.2, 0.75
#: How much more than a word of the same rarity a name (``Client.send``, ``iter_lines``)
#: and a path say about a note: a task and a note that name one thing are about it.
KIND_WEIGHT = {WORD: 1.0, SYMBOL: 1.5, PATH: 1.0}
#: A path term counts this much more in a File Knowledge note: the task's own files against
#: what was learned about those files.
FILE_KNOWLEDGE_BOOST = 1.5
#: The absolute bar a note's score must reach to be put in a prompt. A score counts matched
#: terms in units of a term no other note has (idf over the store's size, so the bar means
#: the same in a small store and a large one), each saturating with tf and judged by the
#: note's length: a file the task names is one or two, and it takes that and a few shared
#: rarer words or names. (Tuned on encode/httpx: the lowest bar that put at least half
#: relevant characters in prompts, 54 %; 3.5 gave 41 %, 4.5 55 % with a third fewer
#: relevant notes in prompts.)
BAR = 4.0
#: Or a short note most of whose words and names the task has (``coverage``, its paths
#: aside) clears it with ``FLOOR``: "the build cache lives in .cache/build" for "speed up
#: the build cache" (a note of three words cannot reach ``BAR``). httpx: 0.6 and 1.5 added
#: a handful of notes; a share of the note's paths would let every note that is mostly a
#: file name in, so paths are left out of it.
COVERAGE = 0.6
FLOOR = 1.5
#: A word in this many notes is not searched by: its idf is low and its notes are what a
#: search costs. Words are taken rarest first while their notes fit ``POSTINGS_BUDGET``;
#: paths and names are always taken (they are rare, and the task's most specific terms).
COMMON_CAP = 5000
POSTINGS_BUDGET = 12_000
#: A query's words searched by, in the order given (title and context first); its paths
#: and names come before them and up to ``MAX_SPECIFIC`` are kept, never cut for words.
MAX_QUERY_WORDS = 64
MAX_SPECIFIC = 48
#: The best notes whose rows are read first (filters may reject some: then more).
RERANK = 50


class Index(Protocol):
    """What a store answers for ``search`` (``index.py`` does it for both)."""

    def frequencies(self, terms: list[str]) -> tuple[dict[str, int], int, float]: ...

    def scores(
        self, weights: list[tuple[str, float, bool]], c1: float, c2: float
    ) -> dict[int, tuple[float, float]]: ...

    def rows(self, ids: list[int], where: str, args: list[Any]) -> list[dict[str, Any]]: ...


def selective(terms: list[Term], df: dict[str, int]) -> list[Term]:
    """The query terms worth searching by: every path and name that some note has, then
    words rarest first while their notes fit ``POSTINGS_BUDGET`` (none in ``COMMON_CAP``
    notes or more). A query of common words alone is searched by its rarest word."""
    found = [t for t in terms if df.get(t.text)]
    chosen = [t for t in found if t.kind != WORD]
    total = sum(df[t.text] for t in chosen)
    words = sorted((df[t.text], i, t) for i, t in enumerate(found) if t.kind == WORD)
    for n, _, term in words:
        if n >= COMMON_CAP or total + n > POSTINGS_BUDGET:
            break
        chosen.append(term)
        total += n
    if not chosen and words:
        chosen.append(words[0][2])
    return chosen


def clears_bar(note: dict[str, Any]) -> bool:
    """Whether a search's note is worth a prompt (``BAR``, or ``COVERAGE`` and ``FLOOR``)."""
    score = note["score"]
    return score >= BAR or (note.get("coverage", 0.0) >= COVERAGE and score >= FLOOR)


def idf(notes: int, having: int) -> float:
    """BM25's inverse document frequency (never negative, as in FTS5 and Lucene)."""
    return math.log(1 + (notes - having + 0.5) / (having + 0.5))


def search(
    index: Index, query: str, where: str, args: list[Any], limit: int
) -> list[dict[str, Any]]:
    """Notes matching ``query`` through the filters (``where``/``args``), best first, each
    with its ``score``."""
    terms = query_terms(query, MAX_QUERY_WORDS, MAX_SPECIFIC)
    if not terms:
        return []
    df, notes, average = index.frequencies([t.text for t in terms])
    chosen = selective(terms, df)
    if not chosen:
        return []
    scale = Scale(notes, max(average, 1.0))
    weights = [(t.text, scale.weight(df[t.text], t.kind), t.kind == PATH) for t in chosen]
    scored = index.scores(weights, K1 * (1 - B), K1 * B / scale.average)
    rows: list[dict[str, Any]] = []
    for ids in leaders(scored, limit):
        rows += index.rows(ids, where, args)
        if len(rows) >= limit:
            break
    own = scale.own_scores(index, rows)
    for row in rows:
        total, paths = scored[row["id"]]
        row["score"] = total + _boost(row) * paths
        words = own[row["id"]]  # what its words and names would score; paths aside
        row["coverage"] = min(1.0, (total - paths) / words) if words else 0.0
    return sorted(rows, key=lambda r: (-r["score"], r["id"]))[:limit]


def _boost(row: dict[str, Any]) -> float:
    """What a path term adds beyond its weight in this note (``FILE_KNOWLEDGE_BOOST``)."""
    return FILE_KNOWLEDGE_BOOST - 1 if row.get("section") == "File Knowledge" else 0.0


class Scale:
    """A search's BM25 over this store: a term's weight and a term's share of a note."""

    def __init__(self, notes: int, average: float) -> None:
        self.notes, self.average = notes, average
        self.unit = idf(notes, 1) / (K1 + 1)  # score in terms as rare as a note's own

    def weight(self, having: int, kind: int) -> float:
        return idf(self.notes, having) / self.unit * KIND_WEIGHT[kind]

    def part(self, tf: int, length: int) -> float:
        return tf / (tf + K1 * (1 - B + B * length / self.average))

    def own_scores(self, index: Index, rows: list[dict[str, Any]]) -> dict[int, float]:
        """What each note's words and names (its paths aside) would score if a query named
        them all: the whole a search's ``coverage`` is a share of."""
        cut = {row["id"]: list(scan(indexed_text(row["content"], row["topic"], row["tags"])))
               for row in rows}  # fmt: skip
        df = index.frequencies(list({t.text for terms in cut.values() for t in terms}))[0]
        own = {}
        for row in rows:
            tf = Counter(t.text for t in cut[row["id"]])
            kind: dict[str, int] = {}
            for t in cut[row["id"]]:
                kind[t.text] = max(kind.get(t.text, WORD), t.kind)
            length = sum(tf.values())
            own[row["id"]] = sum(
                self.weight(df.get(term, 1), kind[term]) * self.part(n, length)
                for term, n in tf.items()
                if kind[term] != PATH
            )
        return own


def leaders(scored: dict[int, tuple[float, float]], limit: int) -> Iterator[list[int]]:
    """Note ids best first: the ``RERANK`` leaders (or ``limit``) without sorting every
    note, then the rest in chunks twice as large each time (for filters that reject most
    leaders)."""
    size = max(RERANK, limit)

    def key(note: int) -> tuple[float, int]:
        return (scored[note][0], -note)

    first = heapq.nlargest(size, scored, key=key)
    yield first
    rest = sorted(scored.keys() - set(first), key=key, reverse=True)
    at = 0
    while at < len(rest):
        size *= 2
        yield rest[at : at + size]
        at += size
