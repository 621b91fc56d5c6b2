"""Memory benchmark: retrieval for a prompt and `memory search`, before and after, in one run.

Run by hand:  python scripts/bench_memory.py [--notes 100000] [--rounds 5] [--base 71a2fcd]
              [--stores sqlite,postgres]
With ``--repo PATH`` it is the relevance benchmark on a real project's history instead
(``memory_relevance.py``; the projects and the relevance rule are in ``memory_history.py``).

A realistic corpus: note words drawn from a Zipf distribution over English function words,
developer words and a long tail of rarer terms, with identifiers and file paths of a
project; some notes pinned, some in another scope. 24 tasks written like real ones (title,
context, acceptance criteria), and 60 short `memory search` queries. Each task has a
*relevance set*: notes planted for it (expected among the top results), among distractors
that share its directory or a word. The same store is loaded once and copied, so the old code
(``--base``, exported from git into a temporary folder) and the working tree's code each run
in a worker process of their own, and every sample is taken from both, interleaved (the
first to go alternates). Reports p50 with p10-p90, the median of the paired ratios, and
recall@5 of the relevance set (and whether the expected notes reach the prompt).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCOPE = "notes:octopoid:bench"
TOP_K = 5


def _words(text: str) -> list[str]:
    return text.split()


FUNCTION_WORDS = _words(
    "the a to of and in is for on that it with as be this when not by from or are at an we if "
    "but can so all has was do its no one before after only should then also into than out "
    "does them which must any each more use every first again still"
)
DEV_WORDS = _words(
    "test error fix config run queue task file agent branch merge commit build check retry "
    "timeout lock worker claim review prompt memory note token cache deploy server client "
    "request response status daemon schema index migration database query path log output "
    "input parse format budget limit session scope tag topic version release ci docker "
    "container sandbox socket process signal thread pool connection upgrade backup restore "
    "secret redaction stream chunk buffer window page board list search score rank filter "
    "sort count batch flush sync async event hook webhook callback payload json yaml toml "
    "cli command option flag default value key field column row table trigger lease "
    "heartbeat reaper sweep ledger journal folder rename fsync atomic encode decode utf8 "
    "unicode latency throughput benchmark flaky slow fast cost turns model backend provider"
)
DIRS = "orchestrator orchestrator/store orchestrator/memory orchestrator/roles scripts tests web"


def zipf_weights(n: int, s: float = 1.0) -> list[float]:
    return [1 / (rank**s) for rank in range(1, n + 1)]


class Corpus:
    """Words, identifiers and paths, drawn Zipf-wise from one seeded generator."""

    def __init__(self, rng: random.Random, tail: int = 20_000) -> None:
        self.rng = rng
        syllables = [c + v for c in "bcdfghklmnprstvz" for v in "aeiou"] + ["ex", "or", "in"]
        rare = {"".join(rng.choices(syllables, k=rng.randint(2, 4))) for _ in range(tail)}
        self.words = FUNCTION_WORDS + DEV_WORDS + sorted(rare - set(DEV_WORDS))
        self.cum = list(_accumulate(zipf_weights(len(self.words))))
        tail_words = self.words[len(FUNCTION_WORDS) :]
        self.idents = [f"{rng.choice(DEV_WORDS)}_{rng.choice(tail_words)}" for _ in range(4000)]
        self.paths = [
            f"{rng.choice(DIRS.split())}/{rng.choice(DEV_WORDS)}_{rng.choice(tail_words)}.py"
            for _ in range(3000)
        ]
        self.code_cum = list(_accumulate(zipf_weights(len(self.idents), 0.8)))

    def text(self, k: int) -> str:
        words = self.rng.choices(self.words, cum_weights=self.cum, k=k)
        for _ in range(self.rng.randint(0, 2)):  # a note names an identifier or a file
            pool = self.idents if self.rng.random() < 0.5 else self.paths
            words.insert(self.rng.randrange(len(words) + 1), self._code(pool))
        return " ".join(words)

    def _code(self, pool: list[str]) -> str:
        return self.rng.choices(pool, cum_weights=self.code_cum[: len(pool)])[0]


def _accumulate(weights: list[float]) -> list[float]:
    total, out = 0.0, []
    for w in weights:
        total += w
        out.append(total)
    return out


def build(n: int, seed: int = 42) -> tuple[list[dict], list[dict], list[str]]:
    """Notes (with ``expect`` marks for the relevance set), tasks and search queries."""
    rng = random.Random(seed)
    corpus = Corpus(rng)
    tasks, planted = [], []
    for i in range(24):
        task, notes = topic_task(corpus, i)
        tasks.append(task)
        planted.extend(notes)
    notes = [
        {
            "content": corpus.text(rng.randint(8, 40)),
            "tags": rng.choice(["", "ci", "db", "auth", "ops"]),
            "scope": SCOPE if rng.random() < 0.9 else "notes:octopoid:global",
            "pinned": 0,
        }
        for _ in range(max(0, n - len(planted) - 20))
    ]
    for i in range(20):  # pinned notes: project rules every prompt carries
        notes.append({"content": f"Rule {i}: " + corpus.text(12), "tags": "", "pinned": 1,
                      "scope": SCOPE if i < 15 else "notes:octopoid:global"})  # fmt: skip
    for note in planted:
        notes.insert(rng.randrange(len(notes) + 1), note)
    queries = [corpus.text(rng.randint(1, 3)) for _ in range(40)]
    queries += [" ".join(rng.sample(t["topic"], 2)) for t in tasks[:20]]
    return notes, tasks, queries


def topic_task(corpus: Corpus, i: int) -> tuple[dict, list[dict]]:
    """A task about one identifier in one file, the notes that should come back for it
    (``expect``), and distractors sharing its folder or one word."""
    rng = corpus.rng
    ident, path = f"{rng.choice(DEV_WORDS)}_{corpus.words[300 + 37 * i]}", corpus.paths[i * 7]
    mid = [corpus.words[150 + 11 * i + j] for j in range(2)]
    title = f"Fix {ident} {rng.choice(DEV_WORDS)} in {path.rsplit('/', 1)[-1]} " + corpus.text(4)
    context = (
        f"The {ident} {mid[0]} {corpus.text(25)} See {path} and {corpus.text(30)} "
        f"{mid[1]} {corpus.text(20)}"
    )
    criteria = [corpus.text(rng.randint(6, 12)) for _ in range(3)] + [f"{ident} {mid[1]} tested"]
    expected = [
        f"{ident} in {path}: {corpus.text(10)}",
        f"{path} {mid[0]} {mid[1]} {corpus.text(8)}",
        f"When {ident} {mid[0]} {corpus.text(12)}",
    ]
    distract = [
        f"{path.rsplit('/', 1)[0]}/{rng.choice(DEV_WORDS)}.py {corpus.text(15)}",
        f"{mid[0]} {corpus.text(20)}",
        f"{corpus.text(10)} {mid[1]} {corpus.text(10)}",
    ]
    notes = [{"content": c, "tags": "", "scope": SCOPE, "pinned": 0, "expect": i} for c in expected]
    notes += [{"content": c, "tags": "", "scope": SCOPE, "pinned": 0} for c in distract]
    task = {"title": title, "context": context, "criteria": criteria, "topic": [ident, *mid]}
    return task, notes


# --- the worker: one code version, one store, answering JSON lines ----------------------------


def worker() -> None:
    """Runs with the code under test first on ``sys.path`` (``PYTHONPATH``)."""
    import orchestrator

    store = None
    for line in sys.stdin:
        msg = json.loads(line)
        if msg["op"] == "open":
            t0 = time.perf_counter()
            store = open_store(msg)
            reply = {"ms": (time.perf_counter() - t0) * 1e3, "code": orchestrator.__file__}
        elif msg["op"] == "close":
            store.close()
            reply = {}
        elif msg["op"] == "load":
            reply = {"ms": load(store, msg["notes"]) * 1e3}
        else:
            reply = answer(store, msg)
        print(json.dumps(reply), flush=True)


def open_store(msg: dict) -> Any:
    if msg["backend"] == "sqlite":
        from orchestrator.memory.store import MemoryStore

        return MemoryStore(Path(msg["path"]))
    from orchestrator.memory.postgres import PostgresMemoryStore
    from orchestrator.pg.schema import shared

    return PostgresMemoryStore(shared(msg["dsn"]))


def load(store: Any, path: str) -> float:
    """Bulk insert (one transaction) with the schema this code makes, then its index built
    as a store older than the index is (``index_pending``, code that has one)."""
    import memory_relevance

    from orchestrator.memory.store import content_hash

    notes = json.loads(Path(path).read_text())
    rows = [
        (n["content"], n["tags"], "octopoid", n["scope"], "{}", 1e9 + i, 1e9 + i,
         content_hash(n["content"]), n["pinned"])
        for i, n in enumerate(notes)
    ]  # fmt: skip
    cols = "content, tags, agent, scope, metadata, created, updated, content_hash, pinned"
    t0 = time.perf_counter()
    if memory_relevance.is_sqlite(store):
        with store.db:
            store.db.execute("BEGIN")
            store.db.executemany(f"INSERT INTO notes ({cols}) VALUES (?,?,?,?,?,?,?,?,?)", rows)
    else:
        with store.db.tx() as cur, cur.copy(f"COPY octopoid.memory ({cols}) FROM STDIN") as cp:
            for row in rows:
                cp.write_row(row)
    if hasattr(store, "index_pending"):
        store.index_pending()
    memory_relevance.settle(store)
    return time.perf_counter() - t0


def answer(store: Any, msg: dict) -> dict:
    from orchestrator.memory.retrieval import relevant_notes, task_query
    from orchestrator.model.tasks import Task

    if msg["op"] == "search":
        t0 = time.perf_counter()
        hits = store.search_notes(msg["q"], limit=10)
        return {"ms": (time.perf_counter() - t0) * 1e3, "ids": [h["id"] for h in hits]}
    t = msg["task"]
    sections = [("Context", t["context"] + "\n"), ("Acceptance Criteria", "".join(
        f"- [ ] {c}\n" for c in t["criteria"]))]  # fmt: skip
    task = Task(id="1", title=t["title"], sections=sections)
    if msg["op"] == "rank":
        hits = store.search_notes(task_query(task), scope=SCOPE, limit=TOP_K)
        return {"ids": [h["id"] for h in hits]}
    t0 = time.perf_counter()
    chosen = relevant_notes(task, store, scope=SCOPE, budget=4000)
    return {"ms": (time.perf_counter() - t0) * 1e3, "ids": [n["id"] for n in chosen]}


# --- the parent: stores, workers, interleaved samples, the table ------------------------------


class Worker:
    def __init__(self, code: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(code), "PYTHONDONTWRITEBYTECODE": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "scripts/bench_memory.py"), "--worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=code,
        )  # fmt: skip

    def ask(self, **msg: Any) -> dict:
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def export(rev: str, dest: Path) -> Path:
    """The ``orchestrator`` package as it was at ``rev``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "orchestrator"], check=True, capture_output=True
    ).stdout
    dest.mkdir()
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def stores(backend: str, tmp: Path, notes_file: Path, old: Worker, new: Worker) -> float:
    """Load the corpus with the old code's schema, copy it for the new; the new code's open
    (a migration, if any) is timed."""
    if backend == "sqlite":
        before, after = tmp / "before.db", tmp / "after.db"
        old.ask(op="open", backend="sqlite", path=str(before))
        old.ask(op="load", notes=str(notes_file))
        old.ask(op="close")  # the last connection checkpoints the WAL into the file
        shutil.copy(before, after)
        old.ask(op="open", backend="sqlite", path=str(before))
        return new.ask(op="open", backend="sqlite", path=str(after))["ms"]
    import psycopg

    from tests.pg_server import PgServer

    server = PgServer()
    server.start()
    STOP.append(server.stop)
    old.ask(op="open", backend="postgres", dsn=server.create_database("before"))
    old.ask(op="load", notes=str(notes_file))
    old.ask(op="close")  # a template database must have no connections
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                     "WHERE datname = 'before' AND pid <> pg_backend_pid()")  # fmt: skip
        conn.execute('CREATE DATABASE "after" TEMPLATE "before"')
    old.ask(op="open", backend="postgres", dsn=server.dsn("before"))
    return new.ask(op="open", backend="postgres", dsn=server.dsn("after"))["ms"]


STOP: list[Any] = []


def interleave(workers: list[Worker], msgs: list[dict], rounds: int) -> list[list[dict]]:
    """Every message to every worker, ``rounds`` times, the first to go alternating."""
    out: list[list[dict]] = [[] for _ in workers]
    flip = 0
    for _ in range(rounds):
        for msg in msgs:
            order = list(range(len(workers)))[:: 1 - 2 * (flip % 2)]
            flip += 1
            for i in order:
                out[i].append(workers[i].ask(**msg))
    return out


def spread(ms: list[float]) -> str:
    q = statistics.quantiles(ms, n=10)
    return f"{statistics.median(ms):.2f} ({q[0]:.2f}–{q[-1]:.2f})"


def recall(workers: list[Worker], tasks: list[dict], expected: dict[int, set[int]]) -> list[str]:
    lines = []
    for w in workers:
        found = got = 0
        for i, task in enumerate(tasks):
            want = expected[i]
            found += len(want & set(w.ask(op="rank", task=task)["ids"]))
            got += len(want & set(w.ask(op="retrieve", task=task)["ids"]))
        total = sum(len(v) for v in expected.values())
        lines.append(f"recall@{TOP_K} {found}/{total} = {found / total:.2f}; "
                     f"in the prompt {got}/{total}")  # fmt: skip
    return lines


def run(args: argparse.Namespace, backend: str, tmp: Path, data: tuple, code: list[Path]) -> None:
    notes, tasks, queries = data
    notes_file = tmp / "notes.json"
    workers = [Worker(c) for c in code]
    try:
        migrate_ms = stores(backend, tmp / backend, notes_file, *workers)
        ids = {i + 1: n for i, n in enumerate(notes)}
        expected: dict[int, set[int]] = {}
        for nid, n in ids.items():
            if "expect" in n:
                expected.setdefault(n["expect"], set()).add(nid)
        rec = recall(workers, tasks, expected)  # before timing: access counts change nothing
        retr = interleave(workers, [{"op": "retrieve", "task": t} for t in tasks], args.rounds)
        srch = interleave(workers, [{"op": "search", "q": q} for q in queries], args.rounds)
        print(f"\n### {backend}, {len(notes)} notes (new code's first open: {migrate_ms:.0f} ms)")
        print("| | before (base) | after (working tree) | after/before, paired median |")
        print("|---|---|---|---|")
        for name, rows in (("retrieval for one prompt", retr), ("memory search", srch)):
            ms = [[r["ms"] for r in w] for w in rows]
            ratio = statistics.median(a / b for a, b in zip(ms[1], ms[0], strict=True))
            print(f"| {name}, p50 ms (p10–p90) | {spread(ms[0])} | {spread(ms[1])} | "
                  f"{ratio:.3f} |")  # fmt: skip
        print(f"| relevance set ({len(tasks)} tasks) | {rec[0]} | {rec[1]} | |")
    finally:
        for w in workers:
            w.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notes", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--base", default="71a2fcd", help="git revision of the 'before' code")
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    relevance = parser.add_argument_group("the relevance benchmark (scripts/memory_relevance.py)")
    relevance.add_argument("--repo", help="a project's git repository: its history is the set")
    relevance.add_argument("--filler", action="append", default=[], help="another's (repeat)")
    relevance.add_argument("--tasks", type=int, default=100, help="its last commits as tasks")
    relevance.add_argument("--pad", type=int, default=0, help="synthetic notes up to this many")
    relevance.add_argument("--dsn", help="a PostgreSQL database (default: a throwaway server)")
    relevance.add_argument("--cache", type=Path, help="keep derived histories here (not the repo)")
    args = parser.parse_args()
    if args.worker:
        return worker()
    if args.repo:
        import memory_relevance

        with tempfile.TemporaryDirectory(prefix="octopoid-bench-relevance-") as tmp:
            return memory_relevance.run(args, Path(tmp))
    sys.path.insert(0, str(ROOT))  # tests.pg_server; workers get only the code under test
    tmp = Path(tempfile.mkdtemp(prefix="octopoid-bench-memory-"))
    try:
        data = build(args.notes)
        (tmp / "notes.json").write_text(json.dumps(data[0]))
        old = export(args.base, tmp / "base")
        print(
            f"base {args.base} vs the working tree; {len(data[1])} tasks x {args.rounds} rounds, "
            f"{len(data[2])} queries x {args.rounds}; {os.cpu_count()} cores, shared"
        )
        for backend in args.stores.split(","):
            (tmp / backend).mkdir()
            run(args, backend, tmp, data, [old, ROOT])
    finally:
        for stop in STOP:
            stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
