"""How both memories rank a search: the terms worth searching by, every note having one
scored by the summed idf of its terms, and BM25 over the few that lead.

Visiting a note is what a search costs. BM25 on every note that has a query term (FTS5's
``bm25()``, or ``ts_rank`` per word) cost most of a prompt's retrieval at 100k notes; summing
each term's idf over its notes is a dictionary update, and BM25 then orders the ``RERANK``
leaders only. A store supplies the terms' note counts and notes (``selective``, ``idf``)
and the leaders' rows; the scoring here is the same for SQLite and PostgreSQL.
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Callable, Iterator
from typing import Any

# A query term in this many notes is dropped: its idf is low, and visiting its notes is what
# a search costs. The rarest terms are searched by until they match ``POSTINGS_BUDGET``
# notes. (bench_memory at 100k notes: 5000 and 12000 kept the relevance set's recall, 46/72
# vs 39/72 with every word; a budget of 8000 lost it, 28/72: a task's mid-frequency words
# did not fit.)
COMMON_CAP = 5000
POSTINGS_BUDGET = 12_000
# The summed-idf leaders BM25 orders (bench_memory's relevance set, recall@5 and in the
# prompt of 72: 46 and 59 with 50, 45 and 58 with 100, 45 and 56 with 200)
RERANK = 50
# A query's first distinct words searched by: a task's title and context come first, and a
# long one's later words are mostly common (bench_memory: 64 kept recall@5 at 46/72, put 62/72
# in the prompt instead of 58, and took 0.80x the time of all ~95)
MAX_QUERY_WORDS = 64
K1, B = 1.2, 0.75  # BM25's usual constants, as FTS5's bm25() has them
TOKEN_RE = re.compile(r"[^\W_]+")  # a token as FTS5's unicode61 cuts one: "_" separates


def selective(counts: dict[str, int]) -> list[str]:
    """The query terms worth searching by, given how many notes each matches (capped at
    ``COMMON_CAP``): the rarest first while their matches fit ``POSTINGS_BUDGET``.

    A term in most notes adds next to nothing to BM25 (its idf is near 0) yet costs a visit
    to each of those notes; it is dropped, unless no rarer term was asked for. Terms that
    match nothing are dropped too.
    """
    rare = sorted((n, term) for term, n in counts.items() if 0 < n < COMMON_CAP)
    if not rare:
        return [term for term, n in counts.items() if n]
    chosen, total = [], 0
    for n, term in rare:
        if chosen and total + n > POSTINGS_BUDGET:
            break
        chosen.append(term)
        total += n
    return chosen


def counted_enough(terms: list[str], count: Callable[[str, int], int]) -> dict[str, int]:
    """Counts that make ``selective`` choose as exact counts would, counting little.

    ``count(term, at_most)`` counts a term's notes up to ``at_most``. Once the terms counted
    overflow the budget, ``selective`` cannot choose a term as common as the one it stops
    at, so the next terms are counted only up to that, and one reaching it is as good as
    common (never chosen with a count cut short): ``terms`` in a likely rarest-first order
    make most counts short.
    """
    counts: dict[str, int] = {}
    at_most = COMMON_CAP
    for term in terms:
        n = count(term, at_most)
        counts[term] = n if n < at_most else COMMON_CAP
        if n < at_most:
            rare = sorted(n for n in counts.values() if 0 < n < COMMON_CAP)
            total = 0
            for n in rare:
                if total and total + n > POSTINGS_BUDGET:
                    at_most = n
                    break
                total += n
    return counts


def idf(notes: int, having: int) -> float:
    """BM25's inverse document frequency (never negative, as in FTS5)."""
    return math.log(1 + (notes - having + 0.5) / (having + 0.5))


def summed_idf(postings: dict[str, list[int]], notes: int) -> dict[int, float]:
    """Each note's summed idf over the terms it has."""
    score: dict[int, float] = {}
    get = score.get
    for ids in postings.values():
        weight = idf(notes, len(ids))
        for note in ids:
            score[note] = get(note, 0.0) + weight
    return score


def term_weights(
    postings: dict[str, list[int]], notes: int, among: list[int]
) -> dict[int, list[float]]:
    """The idfs of the terms each note of ``among`` has (what ``rerank`` weighs)."""
    weights: dict[int, list[float]] = {note: [] for note in among}
    for ids in postings.values():
        weight = idf(notes, len(ids))
        for note in weights.keys() & set(ids):
            weights[note].append(weight)
    return weights


def leaders(score: dict[int, float], limit: int) -> Iterator[list[int]]:
    """Note ids best first: the ``RERANK`` leaders (or ``limit``) without sorting every
    note, then the rest in chunks twice as large each time (for filters that reject most
    leaders)."""
    size = max(RERANK, limit)
    first = heapq.nlargest(size, score, key=score.get)
    yield first
    rest = sorted(score.keys() - set(first), key=lambda i: (-score[i], i))
    at = 0
    while at < len(rest):
        size *= 2
        yield rest[at : at + size]
        at += size


def rerank(rows: list[dict[str, Any]], weights: dict[int, list[float]]) -> list[dict[str, Any]]:
    """``rows`` (notes as the stores return them) best first, each with its BM25 ``score``.

    A note's terms count once each (notes are a sentence or two: a term seldom repeats); its
    length is its tokens', against the average of the notes ranked.
    """
    lengths = [
        len(TOKEN_RE.findall(f"{r['content']} {r['topic'] or ''} {' '.join(r['tags'])}"))
        for r in rows
    ]
    average = max(1.0, sum(lengths) / max(1, len(lengths)))
    for row, length in zip(rows, lengths, strict=True):
        norm = K1 * (1 - B + B * length / average)
        row["score"] = sum(w * (K1 + 1) / (1 + norm) for w in weights[row["id"]])
    return sorted(rows, key=lambda r: (-r["score"], r["id"]))
