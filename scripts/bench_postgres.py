"""PostgreSQL store benchmark: claim latency by queue depth, and lifecycle throughput with
1, 4 and 8 concurrent claimers side by side with procrastinate on the same server.

Run by hand:  python scripts/bench_postgres.py [--depths 1000,10000,50000] [--claims 300]
              [--claimers 1,4,8] [--tasks 1000] [--rounds 2] [--dsn URL]
Without ``--dsn`` a throwaway server is started (tests/pg_server.py: Debian's initdb into a
temporary folder, fsync off, as in the tests); every measurement gets a fresh database.

- claim: the queue is filled to each depth (rows inserted in bulk: the fill is not what is
  measured), then ``queue_utils.claim_task`` is timed one claim at a time.
- lifecycle: K processes, each ``claim_task`` then ``complete_task`` until the queue is
  empty (octopoid's claim -> finish, with its lease headers, History and notes cleanup),
  against K procrastinate workers (``run_worker(wait=False)``) running a no-op job until
  theirs is empty. Rounds alternate which goes first, so the machine's noise hits both.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestrator import queue_utils as q
from orchestrator.scaffold import init_project
from orchestrator.store.postgres import PostgresStore, upgrade_database
from orchestrator.tasks import TaskState, new_task

_fresh = iter(range(1, 1_000_000))


class Server:
    """Fresh databases on ``--dsn``'s server or on a throwaway one."""

    def __init__(self, dsn: str | None) -> None:
        self.dsn, self.pg = dsn, None
        if dsn is None:
            from tests.pg_server import PgServer

            self.pg = PgServer()
            self.pg.start()

    def database(self) -> str:
        name = f"bench_{os.getpid()}_{next(_fresh)}"
        if self.pg is not None:
            return self.pg.create_database(name)
        import psycopg
        from psycopg.conninfo import make_conninfo

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return make_conninfo(self.dsn, dbname=name)

    def stop(self) -> None:
        if self.pg is not None:
            self.pg.stop()


def octopoid_queue(dsn: str, tasks: int) -> None:
    """A project on ``dsn`` (made current) with ``tasks`` waiting, inserted in bulk."""
    root = Path(tempfile.mkdtemp(prefix="octopoid-bench-pg-"))
    init_project(root)
    os.environ["OCTOPOID_ROOT"] = str(root)
    os.environ["OCTOPOID_DATABASE_URL"] = dsn
    upgrade_database(dsn)
    store = PostgresStore(dsn)
    rows = []
    for n in range(1, tasks + 1):
        task = new_task(str(n), f"task {n}", priority=f"P{n % 4}", created_by="bench")
        rows.append((task.id, *store._row(task, TaskState.INCOMING)))
    with store._tx() as cur:
        cur.executemany(
            "INSERT INTO octopoid.tasks (id, state, body, role, rank, created, seq, blocked_by,"
            " not_before, turns, cost) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            rows,
        )
        cur.execute("SELECT setval('octopoid.task_ids', %s)", (tasks,))
        cur.execute("ANALYZE octopoid.tasks")
    store.close()


def bench_claims(server: Server, depths: list[int], claims: int) -> list[tuple]:
    rows = []
    for depth in depths:
        octopoid_queue(server.database(), depth)
        q.claim_task(None, "warm-up")  # connect and check the schema outside the timing
        times = []
        for _ in range(claims):
            start = time.perf_counter()
            task = q.claim_task(None, "bench")
            times.append(time.perf_counter() - start)
            assert task is not None
        times.sort()
        p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
        rows.append((depth, statistics.median(times) * 1e3, p99 * 1e3))
        q.get_store().close()
    return rows


def _octopoid_claimer(go: multiprocessing.Event) -> None:
    go.wait()
    while (task := q.claim_task(None, f"bench-{os.getpid()}")) is not None:
        q.complete_task(task)


def _procrastinate_app(dsn: str):
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    @app.task(queue="bench", name="noop")
    def noop(n: int) -> None:
        return None

    return app, noop


def _procrastinate_worker(dsn: str, go: multiprocessing.Event) -> None:
    app, _ = _procrastinate_app(dsn)
    go.wait()
    with app.open():
        app.run_worker(queues=["bench"], wait=False, concurrency=1)


def _race(target: Callable, args: tuple, claimers: int) -> float:
    """Seconds from releasing ``claimers`` processes to the last one finishing."""
    ctx = multiprocessing.get_context("fork")
    go = ctx.Event()
    procs = [ctx.Process(target=target, args=(*args, go)) for _ in range(claimers)]
    for proc in procs:
        proc.start()
    time.sleep(0.5)  # all started and waiting
    start = time.perf_counter()
    go.set()
    for proc in procs:
        proc.join()
        assert proc.exitcode == 0
    return time.perf_counter() - start


def lifecycle_octopoid(server: Server, tasks: int, claimers: int) -> float:
    dsn = server.database()
    octopoid_queue(dsn, tasks)
    elapsed = _race(_octopoid_claimer, (), claimers)
    assert q.get_store().count(TaskState.DONE) == tasks
    q.get_store().close()
    return tasks / elapsed


def lifecycle_procrastinate(server: Server, tasks: int, claimers: int) -> float:
    dsn = server.database()
    app, noop = _procrastinate_app(dsn)
    with app.open():
        app.schema_manager.apply_schema()
        for n in range(tasks):
            noop.defer(n=n)
    elapsed = _race(_procrastinate_worker, (dsn,), claimers)
    import psycopg

    with psycopg.connect(dsn) as conn:
        done = conn.execute(
            "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
        ).fetchone()[0]
    assert done == tasks, done
    return tasks / elapsed


def lifecycle_pair(server: Server, tasks: int, claimers: int, rounds: int) -> tuple[float, float]:
    """Median tasks/s of octopoid and procrastinate, alternating which runs first."""
    ours, theirs = [], []
    for r in range(rounds):
        if r % 2 == 0:
            ours.append(lifecycle_octopoid(server, tasks, claimers))
            theirs.append(lifecycle_procrastinate(server, tasks, claimers))
        else:
            theirs.append(lifecycle_procrastinate(server, tasks, claimers))
            ours.append(lifecycle_octopoid(server, tasks, claimers))
    return statistics.median(ours), statistics.median(theirs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", default="1000,10000,50000")
    parser.add_argument("--claims", type=int, default=300)
    parser.add_argument("--claimers", default="1,4,8")
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--mode", default="claim,lifecycle")
    parser.add_argument("--dsn", help="a server to make scratch databases on")
    args = parser.parse_args()
    import logging

    logging.getLogger("procrastinate").setLevel(logging.ERROR)
    server = Server(args.dsn)
    try:
        if "claim" in args.mode:
            depths = [int(d) for d in args.depths.split(",")]
            print(f"claim latency ({args.claims} claims each)")
            print(f"{'waiting':>10} {'p50 ms':>9} {'p99 ms':>9}")
            for depth, p50, p99 in bench_claims(server, depths, args.claims):
                print(f"{depth:>10,} {p50:>9.2f} {p99:>9.2f}")
        if "lifecycle" in args.mode:
            print(f"\nlifecycle, {args.tasks} tasks, median of {args.rounds} rounds (tasks/s)")
            print(f"{'claimers':>8} {'octopoid':>10} {'procrastinate':>14} {'ratio':>7}")
            for claimers in [int(c) for c in args.claimers.split(",")]:
                ours, theirs = lifecycle_pair(server, args.tasks, claimers, args.rounds)
                print(f"{claimers:>8} {ours:>10.0f} {theirs:>14.0f} {ours / theirs:>6.2f}x")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
