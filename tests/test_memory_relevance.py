"""Long-term memory at a size where common words are dropped from a search: the expected notes
still rank first, pinned notes always reach the prompt, and an old store is migrated."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from orchestrator.memory import ranking
from orchestrator.memory import store as memory_store
from orchestrator.memory.ranking import COMMON_CAP, POSTINGS_BUDGET, selective
from orchestrator.memory.retrieval import relevant_notes
from orchestrator.memory.store import SCHEMA_VERSION, MemoryStore, open_memory
from orchestrator.tasks import Task

COMMON = ["the", "test", "fix", "run", "error", "file", "config", "check", "queue", "task"]
SCOPE = "notes:octopoid:proj"


CAP, BUDGET, SAMPLE = 60, 240, 20  # the limits, scaled down to a test's few hundred notes


@pytest.fixture(params=["sqlite", "postgres"])
def store(project: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(ranking, "COMMON_CAP", CAP)
    monkeypatch.setattr(ranking, "POSTINGS_BUDGET", BUDGET)
    monkeypatch.setattr(memory_store, "SAMPLE", SAMPLE)
    if request.param == "postgres":
        monkeypatch.setenv("OCTOPOID_DATABASE_URL", request.getfixturevalue("pg_dsn"))
    s = open_memory()
    yield s
    s.close()


def filler(store, n: int) -> None:
    """``n`` notes of common words (each in more than ``CAP`` notes) and rare ones."""
    rng = random.Random(7)
    for i in range(n):
        words = [*rng.sample(COMMON, 6), f"filler{i}", f"word{rng.randrange(50)}"]
        store.write_note(" ".join(words), scope=SCOPE)


@pytest.fixture
def big(store):
    filler(store, CAP * 5)
    if not isinstance(store, MemoryStore):  # PostgreSQL's counts of common words from ANALYZE
        with store.store._tx() as cur:
            cur.execute("ANALYZE octopoid.memory")
    return store


def test_common_words_are_dropped_rarest_first_within_the_budget() -> None:
    assert selective({"the": COMMON_CAP, "rare": 3, "more": 1, "none": 0}) == ["more", "rare"]
    many = {f"w{i}": COMMON_CAP - 1 for i in range(POSTINGS_BUDGET // COMMON_CAP + 2)}
    chosen = selective({**many, "rare": 3})
    assert chosen[0] == "rare" and 1 < len(chosen) < len(many)
    assert sum({**many, "rare": 3}[t] for t in chosen) <= POSTINGS_BUDGET
    assert selective({"the": COMMON_CAP, "a": COMMON_CAP, "x": 0}) == ["the", "a"]
    assert selective({"x": 0}) == []


def test_counting_only_enough_chooses_what_exact_counts_choose(monkeypatch) -> None:
    rng = random.Random(3)
    for _ in range(200):
        sizes = rng.sample(range(1, COMMON_CAP * 2), 40)  # distinct: no ties to break by name
        true = {f"t{i}": rng.choice([0, sizes[i] % 300 + 1, sizes[i]])
                for i in range(rng.randrange(1, 40))}  # fmt: skip
        if len({n for n in true.values() if n}) < len([n for n in true.values() if n]):
            continue
        asked: list[int] = []

        def count(term: str, at_most: int, true=true, asked=asked) -> int:
            asked.append(min(true[term], at_most))
            return min(true[term], at_most)

        terms = sorted(true, key=lambda t: true[t] + rng.randrange(-200, 200))  # a rough order
        counts = ranking.counted_enough(terms, count)
        exact = {t: min(n, COMMON_CAP) for t, n in true.items()}
        assert sorted(selective(counts)) == sorted(selective(exact))
        assert sum(asked) <= sum(exact.values())
    # a term cut short at the count where the budget overflows, tied with one counted in
    # full and sorting first, is not chosen with its short count
    monkeypatch.setattr(ranking, "POSTINGS_BUDGET", 150)
    true = {"x": 100, "y": 100, "a": 500}
    counts = ranking.counted_enough(["x", "y", "a"], lambda t, at_most: min(true[t], at_most))
    assert selective(counts) == ["x"]


def test_sampling_chooses_the_terms_counting_every_note_would(project: Path, monkeypatch):
    """SQLite reads a phrase's newest notes first (PostgreSQL has ANALYZE's counts)."""
    monkeypatch.setattr(ranking, "COMMON_CAP", CAP)
    monkeypatch.setattr(ranking, "POSTINGS_BUDGET", BUDGET)
    monkeypatch.setattr(memory_store, "SAMPLE", SAMPLE)
    big = MemoryStore(project / "sample.db")
    filler(big, CAP * 5)
    query = "the test queue filler7 filler8 word3 word4 word5 run config missing"
    phrases = memory_store.fts_phrases(query)
    exact = {p: len(big._ids(p)) for p in phrases}
    read: list[tuple[str, int | None]] = []
    ids = big._ids
    monkeypatch.setattr(
        big, "_ids", lambda p, at_most=None: read.append((p, at_most)) or ids(p, at_most)
    )
    chosen = big._postings(phrases, big._size())
    assert exact['"the"'] >= CAP and list(chosen) == selective(exact)
    assert all(chosen[p] == ids(p) for p in chosen)
    assert [n for p, n in read if p == '"the"'] == [SAMPLE]  # the common word's 20 newest


def test_a_filter_that_rejects_the_leaders_still_finds_the_note(big, monkeypatch) -> None:
    monkeypatch.setattr(ranking, "RERANK", 2)
    kept = big.write_note("word3 word4 filler9 at last", scope=SCOPE, tags=["kept"])
    assert [h["id"] for h in big.search_notes("word3 word4", limit=2)] != [kept]
    assert [h["id"] for h in big.search_notes("word3 word4", tags=["kept"])] == [kept]


def test_postgres_counts_common_words_from_analyze(project: Path, pg_dsn: str, monkeypatch):
    """Counts from ANALYZE's statistics: a common word's count is what ANALYZE saw (a stale
    one shows it), a rare word's is counted."""
    monkeypatch.setenv("OCTOPOID_DATABASE_URL", pg_dsn)
    monkeypatch.setattr(ranking, "COMMON_CAP", 10_000)
    store = open_memory()
    filler(store, 200)
    with store.store._tx() as cur:
        cur.execute("ANALYZE octopoid.memory")
        cur.execute("DELETE FROM octopoid.memory WHERE content LIKE '%%queue%%' RETURNING id")
        seen = len(cur.fetchall())
        cur.execute("SELECT content FROM octopoid.memory ORDER BY id LIMIT 1")
        rare = cur.fetchone()[0].split()[6]  # the note's own filler<i>
    counts, size = store._counts(["queue", rare, "nowhere"])
    assert counts == {"'queue'": pytest.approx(seen, abs=1), f"'{rare}'": 1, "'nowher'": 0}
    assert 200 - seen <= size <= 200 and store.search_notes("queue") == []
    store.close()


def test_expected_notes_rank_first_among_common_words(big) -> None:
    webhook = big.write_note(
        "the payment webhook handler in billing/webhooks.py retries the test", scope=SCOPE
    )
    lease = big.write_note("run the queue lease renewal in store/lease.py every check", scope=SCOPE)
    retries = big.write_note("webhook retries back off; fix the run after a 502", scope=SCOPE)
    cases = {
        "fix the payment webhook retries in billing/webhooks.py": {webhook, retries},
        "the lease renewal of the queue": {lease},
        "webhook": {webhook, retries},
    }
    for query, expected in cases.items():
        top = [h["id"] for h in big.search_notes(query, limit=len(expected))]
        assert set(top) == expected, query


def test_a_query_of_common_words_alone_still_finds_notes_ranked(big) -> None:
    hits = big.search_notes("the queue", limit=5)
    assert len(hits) == 5 and all("queue" in h["content"] or "the" in h["content"] for h in hits)
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)


def test_retrieval_carries_every_pinned_note_of_the_scope_and_the_best_match(big) -> None:
    pins = [big.write_note(f"rule {i}: never push to main", scope=SCOPE, pinned=True)
            for i in range(3)]  # fmt: skip
    elsewhere = big.write_note("pinned in another project", scope="notes:octopoid:x", pinned=True)
    relevant = big.write_note("the payment webhook lives in billing/webhooks.py", scope=SCOPE)
    task = Task(
        id="9",
        title="Fix the payment webhook",
        sections=[("Context", "The test run of the queue fails; see billing/webhooks.py.\n")],
    )
    ids = [n["id"] for n in relevant_notes(task, big, scope=SCOPE, budget=4000)]
    assert set(ids[:3]) == set(pins) and relevant in ids and elsewhere not in ids


def test_an_old_sqlite_store_is_migrated_on_open(project: Path) -> None:
    path = project / "old.db"
    old = MemoryStore(path)
    kept = old.write_note("pinned before the upgrade", scope=SCOPE, pinned=True)
    old.db.execute("DROP INDEX notes_pinned")  # the store as version 0 made it
    old.db.execute("PRAGMA user_version = 0")
    old.close()
    store = MemoryStore(path)
    version = store.db.execute("PRAGMA user_version").fetchone()[0]
    plan = " ".join(
        row[3]
        for row in store.db.execute(
            "EXPLAIN QUERY PLAN SELECT * FROM notes WHERE pinned = 1 AND notes.scope = ?", (SCOPE,)
        )
    )
    assert version == SCHEMA_VERSION and "notes_pinned" in plan
    assert [n["id"] for n in store.pinned_notes(SCOPE)] == [kept]
    store.integrity_check()
    store.close()
    with sqlite3.connect(path) as db:  # a second open changes nothing
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_long_query_is_searched_by_its_first_distinct_words(store) -> None:
    late = store.write_note("zanzibar comes late in the query", scope=SCOPE)
    words = [f"w{i}" for i in range(ranking.MAX_QUERY_WORDS)]
    assert store.search_notes(" ".join([*words, "zanzibar"])) == []
    assert [h["id"] for h in store.search_notes(" ".join(["zanzibar", *words]))] == [late]


def test_when_every_word_is_common_the_best_note_is_found_however_new(big) -> None:
    """A query of common words alone must not search only their oldest notes: the newest
    note, the one most about them, comes first (both stores)."""
    best = big.write_note("queue queue queue: the queue", scope=SCOPE)
    hits = big.search_notes("the queue", limit=3)
    assert hits and hits[0]["id"] == best
