"""PostgreSQL store benchmark: claim latency by queue depth, and lifecycle throughput with
1, 4 and 8 concurrent claimers and a producer, side by side with procrastinate on the same
server.

Run by hand:  python scripts/bench_postgres.py [--depths 1000,10000,50000] [--claims 300]
              [--claimers 1,4,8] [--tasks 1000] [--backlog 0.5] [--rounds 3]
              [--fsync on|off] [--dsn URL] [--mode claim,lifecycle]
Without ``--dsn`` a throwaway server is started (tests/pg_server.py's, but with ``fsync``,
``synchronous_commit`` and ``full_page_writes`` on, as a real queue runs, unless
``--fsync off``); every measurement gets a fresh database.

- claim: the queue is filled to each depth (rows inserted in bulk: the fill is not what is
  measured), then ``queue_utils.claim_task`` is timed one claim at a time.
- lifecycle: ``--backlog`` of the tasks wait when the clock starts (inserted in bulk, not
  measured); one producer process enqueues the rest one at a time while K claimer
  processes work, each until the producer is done and nothing is left. octopoid's producer
  is ``queue_utils.create_task``, its claimers ``claim_task`` then ``complete_task`` (lease
  headers, History, the notes' clean-up), woken by the store's own LISTEN when the queue is
  empty. procrastinate's producer is ``defer``, its claimers workers (``wait=True``, then
  ``wait=False`` to drain once the producer is done) running an async no-op job (its
  fastest kind). Rounds alternate which goes first, so the machine's noise hits both.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestrator.faces.scaffold import init_project
from orchestrator.model.tasks import TaskState, new_task
from orchestrator.pg.database import Database
from orchestrator.pg.schema import upgrade_database
from orchestrator.queue import machine as q
from orchestrator.queue.store.postgres import PostgresStore
from tests.pg_server import PgServer, find_bin

_fresh = iter(range(1, 1_000_000))


class DurableServer(PgServer):
    """The tests' throwaway server, with ``fsync`` on or off (the tests run it off)."""

    def __init__(self, fsync: bool) -> None:
        super().__init__()
        self.fsync = fsync

    def resume(self) -> None:
        durable = "on" if self.fsync else "off"
        options = (
            f"-c listen_addresses='' -c unix_socket_directories='{self.sock}' "
            f"-c fsync={durable} -c synchronous_commit={durable} "
            f"-c full_page_writes={durable} -c max_connections=200 -c shared_buffers=64MB"
        )
        done = self._run(
            [find_bin("pg_ctl"), "-D", str(self.data), "-o", options,
             "-l", str(self.root / "log"), "-w", "-t", "60", "start"]
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed: {done.stderr[-400:]}")


class Server:
    """Fresh databases on ``--dsn``'s server or on a throwaway one."""

    def __init__(self, dsn: str | None, fsync: bool) -> None:
        self.dsn, self.pg = dsn, None
        if dsn is None:
            self.pg = DurableServer(fsync)
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

    def settings(self) -> str:
        import psycopg

        with psycopg.connect(self.database(), autocommit=True) as conn:
            found = [
                f"{name}={conn.execute(f'SHOW {name}').fetchone()[0]}"
                for name in ("server_version", "fsync", "synchronous_commit", "full_page_writes")
            ]
        return ", ".join(found)

    def cpu(self) -> float:
        """CPU seconds the server has used so far: the postmaster, its live processes and
        the backends it has reaped (their time is in its children's); 0 on ``--dsn``."""
        if self.pg is None:
            return 0.0
        import psutil

        pid = int((self.pg.data / "postmaster.pid").read_text().split()[0])
        postmaster = psutil.Process(pid)
        total = sum(postmaster.cpu_times()[:4])  # user, system, children's user and system
        for child in postmaster.children():
            with contextlib.suppress(psutil.NoSuchProcess):
                total += sum(child.cpu_times()[:2])
        return total

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
    store = PostgresStore(Database(dsn))
    rows = []
    for n in range(1, tasks + 1):
        task = new_task(str(n), f"task {n}", priority=f"P{n % 4}", created_by="bench")
        rows.append((task.id, *store._row(task, TaskState.INCOMING)))
    with store.db.tx() as cur:
        cur.executemany(
            "INSERT INTO octopoid.tasks (id, state, body, role, rank, created, seq, blocked_by,"
            " not_before, turns, cost) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            rows,
        )
        cur.execute("SELECT setval('octopoid.task_ids', %s)", (max(tasks, 1),))
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


# --- the lifecycle race: one producer and K claimers per system ----------------------------


def _octopoid_producer(n: int, go, produced, took) -> None:
    q.get_store().count(TaskState.DONE)  # connected before the clock starts, as the others
    go.wait()
    start = time.perf_counter()
    for i in range(n):
        q.create_task(f"produced {i}", priority=f"P{i % 4}", created_by="bench")
    took.value = time.perf_counter() - start
    produced.set()


def _octopoid_claimer(go, produced) -> None:
    store = q.get_store()
    woken = threading.Event()
    # LISTEN, as the scheduler waits; a claimer of incoming tasks wakes for those (no task
    # here has a blocker a done one could release), as procrastinate's workers for a job
    stop_listening = store.watch(lambda state: woken.set() if state in ("incoming", "") else None)
    me = f"bench-{os.getpid()}"
    go.wait()
    while True:
        last_chance = produced.is_set()  # before the claim: then an empty queue is final
        woken.clear()
        task = q.claim_task(None, me)
        if task is not None:
            q.complete_task(task)
        elif last_chance:
            break
        else:
            woken.wait(0.1)
    stop_listening()


def _procrastinate_app(dsn: str):
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    @app.task(queue="bench", name="noop")
    async def noop(n: int) -> None:
        return None

    return app, noop


def _procrastinate_producer(dsn: str, n: int, go, produced, took) -> None:
    app, noop = _procrastinate_app(dsn)
    with app.open():
        go.wait()
        start = time.perf_counter()
        for i in range(n):
            noop.defer(n=i)
        took.value = time.perf_counter() - start
    produced.set()


def _procrastinate_claimer(dsn: str, go, produced) -> None:
    from procrastinate.worker import Worker

    app, _ = _procrastinate_app(dsn)

    async def work() -> None:
        async with app.open_async():
            waiting = Worker(app, queues=["bench"], wait=True, install_signal_handlers=False)
            running = asyncio.create_task(waiting.run())
            await asyncio.to_thread(produced.wait)
            waiting.stop()  # graceful: its job in hand is finished
            await running
            draining = Worker(app, queues=["bench"], wait=False, install_signal_handlers=False)
            await draining.run()

    go.wait()
    asyncio.run(work())


class Race(NamedTuple):
    seconds: float  # from the release of the producer and claimers to the last one's end
    producing: float  # the producer's own seconds
    cpu: float  # CPU seconds of the producer, claimers and server in that time


def _race(
    server: Server, producer: tuple[Callable, tuple], claimer: tuple[Callable, tuple], k: int
) -> Race:
    ctx = multiprocessing.get_context("fork")
    go, produced, took = ctx.Event(), ctx.Event(), ctx.Value("d", 0.0)
    procs = [ctx.Process(target=producer[0], args=(*producer[1], go, produced, took))]
    procs += [ctx.Process(target=claimer[0], args=(*claimer[1], go, produced)) for _ in range(k)]
    for proc in procs:
        proc.start()
    time.sleep(1.0)  # all started, connected and waiting
    ours = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = server.cpu() + ours.ru_utime + ours.ru_stime
    start = time.perf_counter()
    go.set()
    for proc in procs:
        proc.join()
        assert proc.exitcode == 0, proc.exitcode
    seconds = time.perf_counter() - start
    ours = resource.getrusage(resource.RUSAGE_CHILDREN)
    return Race(seconds, took.value, server.cpu() + ours.ru_utime + ours.ru_stime - cpu)


class Rates(NamedTuple):
    tasks: float  # tasks/s through the whole lifecycle
    enqueued: float  # the producer's tasks/s
    cpu_ms: float  # CPU ms per task, clients and server (the children's time includes
    # what the claimers did before the clock started: connecting, a LISTEN)


def lifecycle_octopoid(server: Server, tasks: int, backlog: int, claimers: int) -> Rates:
    dsn = server.database()
    octopoid_queue(dsn, backlog)
    q.get_store().close()  # the children connect for themselves
    race = _race(
        server, (_octopoid_producer, (tasks - backlog,)), (_octopoid_claimer, ()), claimers
    )
    assert q.get_store().count(TaskState.DONE) == tasks
    q.get_store().close()
    return _rates(race, tasks, backlog)


def lifecycle_procrastinate(server: Server, tasks: int, backlog: int, claimers: int) -> Rates:
    dsn = server.database()
    app, noop = _procrastinate_app(dsn)
    with app.open():
        app.schema_manager.apply_schema()
        if backlog:
            noop.batch_defer(*({"n": n} for n in range(backlog)))
    race = _race(
        server,
        (_procrastinate_producer, (dsn, tasks - backlog)),
        (_procrastinate_claimer, (dsn,)),
        claimers,
    )
    import psycopg

    with psycopg.connect(dsn) as conn:
        done = conn.execute(
            "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
        ).fetchone()[0]
    assert done == tasks, done
    return _rates(race, tasks, backlog)


def _rates(race: Race, tasks: int, backlog: int) -> Rates:
    return Rates(tasks / race.seconds, (tasks - backlog) / race.producing, race.cpu / tasks * 1e3)


def lifecycle_pair(
    server: Server, tasks: int, backlog: int, claimers: int, rounds: int
) -> tuple[list[Rates], list[Rates]]:
    """Rates of octopoid and procrastinate per round, alternating which runs first."""
    ours, theirs = [], []
    for r in range(rounds):
        pair = [
            lambda: ours.append(lifecycle_octopoid(server, tasks, backlog, claimers)),
            lambda: theirs.append(lifecycle_procrastinate(server, tasks, backlog, claimers)),
        ]
        for run in pair if r % 2 == 0 else reversed(pair):
            run()
    return ours, theirs


def spread(values: list[float], digits: int = 0) -> str:
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{mid:.{digits}f} ({low:.{digits}f}-{high:.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", default="1000,10000,50000")
    parser.add_argument("--claims", type=int, default=300)
    parser.add_argument("--claimers", default="1,4,8")
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--backlog", type=float, default=0.5, help="share waiting at the start")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fsync", choices=("on", "off"), default="on")
    parser.add_argument("--mode", default="claim,lifecycle")
    parser.add_argument("--dsn", help="a server to make scratch databases on")
    args = parser.parse_args()
    import logging

    logging.getLogger("procrastinate").setLevel(logging.ERROR)
    server = Server(args.dsn, args.fsync == "on")
    try:
        print(f"server: {server.settings()}")
        if "claim" in args.mode:
            depths = [int(d) for d in args.depths.split(",")]
            print(f"claim latency ({args.claims} claims each)")
            print(f"{'waiting':>10} {'p50 ms':>9} {'p99 ms':>9}")
            for depth, p50, p99 in bench_claims(server, depths, args.claims):
                print(f"{depth:>10,} {p50:>9.2f} {p99:>9.2f}")
        if "lifecycle" in args.mode:
            backlog = int(args.tasks * args.backlog)
            print(
                f"\nlifecycle, {args.tasks} tasks ({backlog} waiting at the start, the rest "
                f"produced during the claims), {args.rounds} rounds: tasks/s median (min-max)"
            )
            print(
                f"{'claimers':>8} {'octopoid':>16} {'procrastinate':>16} {'paired ratio':>20}"
                f" {'enqueued/s: octopoid':>22} {'procrastinate':>16}"
                f" {'CPU ms/task: octopoid':>22} {'procrastinate':>16}"
            )
            for claimers in [int(c) for c in args.claimers.split(",")]:
                ours, theirs = lifecycle_pair(server, args.tasks, backlog, claimers, args.rounds)
                ratios = [a.tasks / b.tasks for a, b in zip(ours, theirs, strict=True)]
                print(
                    f"{claimers:>8} {spread([r.tasks for r in ours]):>16} "
                    f"{spread([r.tasks for r in theirs]):>16} {spread(ratios, 2):>20} "
                    f"{spread([r.enqueued for r in ours]):>22} "
                    f"{spread([r.enqueued for r in theirs]):>16} "
                    f"{spread([r.cpu_ms for r in ours], 1):>22} "
                    f"{spread([r.cpu_ms for r in theirs], 1):>16}"
                )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
