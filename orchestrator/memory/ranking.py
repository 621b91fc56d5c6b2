"""How both memories rank a search, and the bar a note must clear to reach a prompt.

BM25 over the store: a term's weight is its idf (times how specific it is: a path or a
name says more than a word), each note's share of it grows with how often the term occurs
in the note and shrinks with the note's length against the average of every note
(``index.memory_totals``), not of the leaders. A store answers two questions (``Index``):
the terms' document frequencies, and the best notes by the terms' weights through the
search's filters; the rest is here, the same for SQLite and PostgreSQL.

The constants were chosen on one project's history and checked on another, held out
(``scripts/bench_memory.py --repo``; docs/memory.md has the tables): each says why. What
the task's files at its base say of a note (code they no longer have) is ``staleness``'s,
with its reason and numbers.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Protocol

from ..base.patterns import LazyPattern
from .index import indexed_text
from .terms import PART_RE, PATH, SYMBOL, WORD, Term, query_terms, scan

#: BM25's k1 (FTS5's and Lucene's): term frequency saturates at about k1. And b, how much
#: of a note's length is judged against the average note: less than the usual 0.75, as a
#: note that says which functions of a file it is about is longer than one that names the
#: file alone, and is more often about the task's own code. (httpx: MRR 0.490 at 0.75,
#: 0.509 at 0.5, 0.548 at 0.3, 0.530 at 0.2; pytest 0.565 -> 0.591 at 0.3.)
K1, B = 1.2, 0.3
#: How much more than a word of the same rarity a name (``Client.send``, ``iter_lines``)
#: and a path say about a note: a task and a note that name one thing are about it. (httpx,
#: b 0.3: a name 2x a word gave 56 % of the block relevant, 3x 46 %, against 60 % at 1.5x:
#: a task's text seldom names the function it changes, and a note's names of others then
#: outweigh the task's file.)
KIND_WEIGHT = {WORD: 1.0, SYMBOL: 1.5, PATH: 1.0}
#: A path term counts this much more in a File Knowledge note: the task's own files against
#: what was learned about those files. (httpx, b 0.3: 1.0 gave 53 %, 2.0 49 % with twice
#: the notes, against 60 %.)
FILE_KNOWLEDGE_BOOST = 1.5
#: The absolute bar a note's score must reach to be put in a prompt. A score counts matched
#: terms in units of a term no other note has (idf over the store's size, so the bar means
#: the same in a small store and a large one), each saturating with tf and judged by the
#: note's length: a file the task names is one or two, and it takes that and a few shared
#: rarer words or names. (Tuned on encode/httpx: the lowest bar that put at least half
#: relevant characters in prompts, 57 % with ``RELATIVE``; 3.5 let in nearly twice the
#: notes at 51 %, 4.5 gave 55 % with a third fewer relevant notes. With b 0.3 and
#: ``RELATIVE`` 0.75 it stays: 3.5 gave 58 % for 1.46 notes a task instead of 1.02.)
BAR = 4.0
#: Or a short note (``SHORT`` terms at most) most of whose words and names the task has
#: (``coverage``, its paths aside) clears it with ``FLOOR``: "the build cache lives in
#: .cache/build" for "speed up the build cache" (a note of three words cannot reach
#: ``BAR``). httpx: 0.6 and 1.5 added a handful of notes; a share of the note's paths would
#: let every note that is mostly a file name in, so paths are left out of it. Longer notes
#: have words enough for ``BAR``, and are not cut into terms again for it. (None of the 17
#: it let in on httpx was relevant by the benchmark's rule, a function both commits
#: changed, which a note of a few words seldom names: about 2 points of the share. Kept
#: for a person's short note about what a task is about, which that rule cannot see.)
COVERAGE = 0.6
FLOOR = 1.5
SHORT = 12
#: And it takes at least this many of the note's words and names (its paths aside) in the
#: task: a note of one word is covered by that word alone, which is chance, not evidence
#: ("httpx/_config.py: Version 0.14.0" for "Version 0.28.0"; "the build cache lives in
#: .cache/build" shares two). (httpx: 72.0 % -> 72.9 % of the block relevant, the three
#: notes it left out all irrelevant, no relevant note lost; pytest unchanged, 64 %; three
#: shared gave the same on both.)
SHARED = 2
#: And this share of the best score among the notes that clear the bar: a task with one
#: strong match gets that one, not the weak ones that clear the bar beside it. (httpx, with
#: b 0.3 and ``PATHLESS_BAR``: the block's relevant share 60 % at 0.65 and 0.7, 63 % at
#: 0.75 with 0.60 relevant notes a task of 1.02; pytest 55 %, 56 %, 60 %. With b 0.75 it
#: was 0.65: 0.8 lost two fifths of the relevant notes.)
RELATIVE = 0.75
#: A note that shares none of the task's files clears the bar only with this: words and
#: names alone are weak evidence that two pieces of work touched the same code. (Of the
#: notes over ``BAR`` without a path of the task, 31 % of the characters were relevant on
#: httpx, 15 % on pytest; 6 and 8 gave the same, the share 57 % -> 60 % on httpx with
#: b 0.3, 51 % -> 55 % on pytest.)
PATHLESS_BAR = 6.0
#: A note longer than ``LONG`` times the store's average note (in terms) needs ``PER_TERM``
#: more for each term over it, ``BAR`` and ``PATHLESS_BAR`` alike: the block's share is by
#: characters, so a long note costs more of it, and its many words gather matches by chance
#: (``B`` judges length lightly for the ranking, which MRR wants; the bar judges it here).
#: Long notes on the task's file were the weakest: of those pytest put in prompts, notes of
#: 200 characters or more were 40 % relevant against 72 % for 100-199. (httpx: 72.9 % ->
#: 75.0 % of the block relevant, relevant notes a task 0.50 -> 0.48 of 0.69 -> 0.65; pytest
#: 64 % -> 69 %, 1.23 -> 1.04 relevant of 1.84 -> 1.47. On httpx, 0.3 or 0.5 a term gave
#: 74.4 %; 1.25 times the average 76.0 %, 75.5 %, 77.5 % at 0.3, 0.5, 1.0, with a seventh of
#: the relevant notes lost; 1.75 times moved nothing. A bar rising with characters from 100
#: or 150 instead cost httpx 2-8 points: its notes of 100-199 characters are its most
#: relevant, 74 %.)
LONG = 1.5
PER_TERM = 1.0
#: A word in this many notes is not searched by: its idf is low and its notes are what a
#: search costs. Words are taken rarest first while their notes fit ``POSTINGS_BUDGET``;
#: paths and names are always taken (they are rare, and the task's most specific terms).
#: (httpx, ~20k notes: 5000/12000 gave MRR 0.498, 2000/6000 0.490 with the same relevant
#: share of the block, 54 %; at 100k synthetic notes a prompt's retrieval took 0.67x. A
#: search's time is mostly its postings: 6000 -> 4000 kept MRR at 0.490, the share went
#: from 58 % to 57 % and the relevant notes a task from 0.73 to 0.71; 3000 lost more.)
COMMON_CAP = 2000
POSTINGS_BUDGET = 4000
#: A query's words searched by, in the order given (title and context first); its paths
#: and names come before them and up to ``MAX_SPECIFIC`` are kept, never cut for words.
MAX_QUERY_WORDS = 64
MAX_SPECIFIC = 48
#: When the task names files, a note that names files, none of them the task's, stays out
#: whatever it scores (``elsewhere``): it says which code it is about, and that is other
#: code. Shared words then say the two pieces of work were alike, not that they touched the
#: same functions; the short-note route let such notes in on a few words ("a.py: drop
#: private imports from test_a.py" for "drop private imports from test_b.py"). (httpx:
#: 63 % -> 64 % of the block relevant, no relevant note lost; pytest 59 % -> 61 %.)
#: A note on the task's file that names functions or classes, none of them by a word of the
#: task (``other_names``), needs ``PATHLESS_BAR``: its names say it is about other code of
#: that file, so the file vouches for nothing. A name's words are its parts between dots
#: and underscores (``get_environment_proxies``: get, environment, proxies); a CamelCase
#: name stays whole, as a class the task names (``WSGITransport``) is as broad as its file
#: and would vouch for a note about any of its methods. (httpx: 64 % -> 72 % of the block
#: relevant, 0.60 -> 0.50 relevant notes a task of 0.98 -> 0.72; pytest 61 % -> 64 %, 1.23
#: relevant of 1.94 -> 1.84. Counting the task's CamelCase names too, simulated on the same
#: candidates: httpx 66 %, pytest 61 %: the notes they kept named another method.)
#: (A URL in a note is no file of the project: it is left out of both.)
URL_RE = LazyPattern(r"\w+://\S*")
#: The best notes whose rows are read (filters may reject some: then four times more).
RERANK = 50


class Index(Protocol):
    """What a store answers for ``search`` (``index.py`` does it for both)."""

    def frequencies(self, terms: list[str]) -> tuple[dict[str, int], int, float]:
        """Each term's document frequency, the number of notes, their average length."""

    def best(
        self, weights: list[tuple[str, float, bool]], c1: float, c2: float, among: int,
        where: str, args: list[Any], limit: int,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """The rows of the ``among`` best notes by ``weights`` that pass the filters, best
        first, at most ``limit``, each with its ``score`` and the part its paths make
        (``path_score``)."""


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


def over_bar(index: Index, notes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The notes of a search worth a prompt: ``BAR`` (``PATHLESS_BAR`` without a path of
    the task, or on it about other functions: ``other_names``), or, for a short note
    sharing ``SHARED`` words or names with the task, ``COVERAGE`` with ``FLOOR``; and
    ``RELATIVE`` of the best of those. None about other files than the task's
    (``elsewhere``)."""
    notes = [n for n in notes if not n.get("elsewhere")]
    top = max((n["score"] for n in notes if n["score"] >= _bar(n)), default=0.0)
    least = max(FLOOR, RELATIVE * top)  # a short note below it is cut whatever it covers
    short = [n for n in notes if least <= n["score"] < _bar(n) and n.get("shared", 0) >= SHARED]
    covered = coverage(index, short) if short else {}
    passing = [n for n in notes if n["score"] >= _bar(n) or covered.get(n["id"], 0.0) >= COVERAGE]
    top = max((n["score"] for n in passing), default=0.0)
    return [n for n in passing if n["score"] >= RELATIVE * top]


def _bar(note: dict[str, Any]) -> float:
    base = BAR if note["path_score"] and not note.get("other_names") else PATHLESS_BAR
    return base + PER_TERM * note.get("excess", 0.0)


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
    c1, c2 = K1 * (1 - B), K1 * B / scale.average
    among, postings = max(RERANK, limit), sum(df[t.text] for t in chosen)
    rows = index.best(weights, c1, c2, among, where, args, limit)
    while len(rows) < limit and among < postings:  # filters rejected leaders: look further
        among *= 4
        rows = index.best(weights, c1, c2, among, where, args, limit)
    names_files = any(t.kind == PATH for t in terms)
    words = {t.text for t in terms if t.kind == WORD}
    asked = {t.text for t in terms if t.kind != PATH}
    for row in rows:
        row["score"] += _boost(row) * row["path_score"]
        row["excess"] = max(0.0, (row["length"] or 0) - LONG * scale.average)  # ``LONG``
        paths, names = _code_of(row) if names_files and _in_question(row) else (False, set())
        row["elsewhere"] = paths and not row["path_score"]
        row["other_names"] = bool(names) and not names & words
        if (row["length"] or 0) <= SHORT and FLOOR <= row["score"] < _bar(row):  # ``SHARED``
            row["shared"] = len(asked & {t.text for t in scan(_indexed(row)) if t.kind != PATH})
    return sorted(rows, key=lambda r: (-r["score"], r["id"]))


def coverage(index: Index, notes: list[dict[str, Any]]) -> dict[int, float]:
    """How much of each note a search matched: its score's words and names (paths aside)
    against what they would score if a query named them all."""
    df, count, average = index.frequencies(list({t.text for n in notes for t in scan(_indexed(n))}))
    scale = Scale(count, max(average, 1.0))
    own = {n["id"]: scale.own_score(_indexed(n), df) for n in notes}
    return {
        n["id"]: min(1.0, (n["score"] - n["path_score"] * (1 + _boost(n))) / own[n["id"]])
        if own[n["id"]]
        else 0.0
        for n in notes
    }


def _in_question(row: dict[str, Any]) -> bool:
    """Whether the task's files could change what a note needs to reach a prompt: only
    such a note is cut into terms again (0.2 ms a note)."""
    longer = PER_TERM * row["excess"]
    if row["path_score"]:
        return BAR + longer <= row["score"] < PATHLESS_BAR + longer
    return row["score"] >= PATHLESS_BAR + longer or (
        row["score"] >= FLOOR and (row["length"] or 0) <= SHORT
    )


def _code_of(note: dict[str, Any]) -> tuple[bool, set[str]]:
    """Whether a note names a file (a URL is no file of the project), and the words of the
    names it names (split at dots and underscores only: ``other_names``)."""
    terms = list(scan(URL_RE.sub(" ", note["content"])))
    names = {w for t in terms if t.kind == SYMBOL for w in PART_RE.findall(t.text)}
    return any(t.kind == PATH for t in terms), names


def _indexed(note: dict[str, Any]) -> str:
    return indexed_text(note["content"], note["topic"], note["tags"])


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

    def own_score(self, text: str, df: dict[str, int]) -> float:
        """What a note's words and names (its paths aside) would score if a query named
        them all: the whole a search's ``coverage`` is a share of."""
        terms = list(scan(text))
        tf = Counter(t.text for t in terms)
        kind: dict[str, int] = {}
        for t in terms:
            kind[t.text] = max(kind.get(t.text, WORD), t.kind)
        length = len(terms)
        return sum(
            self.weight(df.get(term, 1), kind[term]) * self.part(n, length)
            for term, n in tf.items()
            if kind[term] != PATH
        )
