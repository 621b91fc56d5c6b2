"""Memory benchmark: FTS5 search and retrieval vs the original load-everything scan.

Run by hand:  python scripts/bench_memory.py [--notes 100000] [--queries 200]
Writes N synthetic notes (a vocabulary of code-ish words and file paths) through
``MemoryStore.write_note``, then times the same queries two ways in one run: the store's
BM25 search, and the original approach (load every note, score by term counts in Python).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import tempfile
import time
from pathlib import Path

from orchestrator.memory.retrieval import relevant_notes
from orchestrator.memory.store import MemoryStore
from orchestrator.scaffold import init_project
from orchestrator.tasks import Task

WORD_RE = re.compile(r"\w+")


def vocabulary(rng: random.Random, size: int = 6000) -> list[str]:
    stems = [
        "auth",
        "token",
        "cache",
        "queue",
        "retry",
        "lease",
        "worker",
        "schema",
        "index",
        "merge",
        "branch",
        "deploy",
        "config",
        "parser",
        "client",
        "server",
        "payment",
    ]
    words = [
        f"{rng.choice(stems)}{rng.choice(['', '_', ''])}{rng.randrange(10_000)}"
        for _ in range(size)
    ]
    return words + stems


def make_note(rng: random.Random, vocab: list[str]) -> str:
    words = rng.choices(vocab, k=rng.randint(12, 30))
    path = f"src/{rng.choice(vocab)}/{rng.choice(vocab)}.py"
    return f"{' '.join(words)} see {path}"


def naive_search(notes: list[str], query: str, limit: int = 10) -> list[int]:
    """The original way: every note in memory, scored by how often query words occur."""
    terms = [t.lower() for t in WORD_RE.findall(query)]
    scored = []
    for i, note in enumerate(notes):
        low = note.lower()
        score = sum(low.count(t) for t in terms)
        if score:
            scored.append((score, i))
    scored.sort(reverse=True)
    return [i for _, i in scored[:limit]]


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, int(len(ordered) * p) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notes", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    rng = random.Random(42)
    root = Path(tempfile.mkdtemp(prefix="octopoid-bench-memory-"))
    init_project(root)
    os.environ["OCTOPOID_ROOT"] = str(root)
    vocab = vocabulary(rng)
    texts = [make_note(rng, vocab) for _ in range(args.notes)]
    store = MemoryStore()
    start = time.perf_counter()
    for text in texts:
        store.write_note(text, tags=[rng.choice(["ops", "auth", "db"])])
    write_s = time.perf_counter() - start
    queries = [" ".join(rng.choices(vocab, k=rng.randint(2, 5))) for _ in range(args.queries)]

    fts, naive = [], []
    for query in queries:
        t0 = time.perf_counter()
        store.search_notes(query, limit=10)
        fts.append(time.perf_counter() - t0)
    load0 = time.perf_counter()
    loaded = [r[0] for r in store.db.execute("SELECT content FROM notes")]
    load_s = time.perf_counter() - load0
    for query in queries:
        t0 = time.perf_counter()
        naive_search(loaded, query)
        naive.append(time.perf_counter() - t0)

    task = Task(
        id="1",
        title=f"Fix {vocab[7]} retries in the {vocab[99]} client",
        sections=[("Context", f"See src/{vocab[5]}/{vocab[6]}.py; {queries[0]}\n")],
    )
    t0 = time.perf_counter()
    chosen = relevant_notes(task, store, budget=4000)
    retrieval_s = time.perf_counter() - t0
    rows = [
        ("FTS5 BM25 search", statistics.median(fts), percentile(fts, 0.99)),
        ("naive: scan all notes in Python", statistics.median(naive), percentile(naive, 0.99)),
    ]
    print(
        f"{args.notes} notes written in {write_s:.1f} s ({args.notes / write_s:.0f}/s); "
        f"{args.queries} queries"
    )
    print(f"{'search':<36}{'p50 ms':>10}{'p99 ms':>10}{'vs FTS5 p50':>14}")
    for name, p50, p99 in rows:
        print(f"{name:<36}{p50 * 1e3:>10.2f}{p99 * 1e3:>10.2f}{p50 / rows[0][1]:>13.0f}x")
    print(f"naive also loads every note first: {load_s * 1e3:.0f} ms per load")
    print(
        f"retrieval for one task prompt (query, pins, budget, access counts): "
        f"{retrieval_s * 1e3:.1f} ms, {len(chosen)} notes chosen"
    )


if __name__ == "__main__":
    main()
