"""Queue benchmark: lifecycle throughput, claim latency vs queue depth, and huey/persist-queue.

Run by hand:  python scripts/bench_queue.py [--tasks 400] [--depths 1000,10000,50000]
Needs the bench extra (pip install -e '.[bench]'). Everything runs in one process tree in
one run, so the ratios compare like with like on a shared, noisy machine.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from orchestrator import queue_utils as q
from orchestrator.scaffold import init_project
from orchestrator.tasks import Task, TaskState, format_time, render_task, utcnow


def fresh_project() -> Path:
    root = Path(tempfile.mkdtemp(prefix="octopoid-bench-", dir=os.environ.get("BENCH_DIR")))
    init_project(root)
    os.environ["OCTOPOID_ROOT"] = str(root)
    return root


def lifecycle(count: int) -> None:
    """Create, claim, submit and accept ``count`` times (with other processes doing the same,
    a claim may take another process's task, or find none left: both are fine)."""
    for i in range(count):
        q.create_task(f"bench {os.getpid()} {i}")
        drain(1)


def drain(limit: int | None = None) -> None:
    done = 0
    while limit is None or done < limit:
        claimed = q.claim_task(None, f"agent-{os.getpid()}")
        if claimed is None:
            return
        q.submit_completion(claimed, 1, 1)
        q.accept_completion(claimed)
        done += 1


def _lifecycle_worker(root: str, count: int, go: mp.Event) -> None:
    os.environ["OCTOPOID_ROOT"] = root
    go.wait()
    lifecycle(count)


def bench_lifecycle(total: int, procs: int) -> float:
    root = fresh_project()
    if procs == 1:
        start = time.perf_counter()
        lifecycle(total)
        return total / (time.perf_counter() - start)
    go = mp.Event()
    workers = [
        mp.Process(target=_lifecycle_worker, args=(str(root), total // procs, go))
        for _ in range(procs)
    ]
    for w in workers:
        w.start()
    time.sleep(0.3)
    start = time.perf_counter()
    go.set()
    for w in workers:
        w.join()
    drain()  # whatever the workers' claims missed at the very end
    elapsed = time.perf_counter() - start
    assert all(w.exitcode == 0 for w in workers)
    assert q.get_store().count(TaskState.DONE) == total // procs * procs
    return total / elapsed


def fill_incoming(root: Path, depth: int) -> None:
    """Write ``depth`` task files straight into incoming (setup, not measured)."""
    incoming = root / ".octopoid/runtime/queue/incoming"
    base = utcnow()
    for i in range(1, depth + 1):
        task = Task(id=str(i), title=f"waiting {i}")
        task.headers.update(
            ROLE="implement",
            PRIORITY=f"P{i % 4}",
            CREATED=format_time(base + timedelta(seconds=i)),
            ATTEMPTS="0",
        )
        task.sections.append(("Context", "Some context.\n\n"))
        (incoming / f"TASK-{i}.md").write_text(render_task(task))
    (root / ".octopoid/runtime/queue/.last_id").write_text(str(depth))


def bench_claim_latency(depth: int, claims: int) -> tuple[float, float, float]:
    root = fresh_project()
    fill_incoming(root, depth)
    start = time.perf_counter()
    q.claim_task(None, "warm")  # first claim builds the index from the folder
    rebuild = time.perf_counter() - start
    samples = []
    for _ in range(claims):
        start = time.perf_counter()
        assert q.claim_task(None, "bench") is not None
        samples.append(time.perf_counter() - start)
    samples.sort()
    return (statistics.median(samples), samples[int(len(samples) * 0.99) - 1], rebuild)


def bench_huey(total: int) -> float:
    from huey import SqliteHuey

    path = Path(tempfile.mkdtemp(dir=os.environ.get("BENCH_DIR"))) / "huey.db"
    storage = SqliteHuey(filename=str(path)).storage
    start = time.perf_counter()
    for i in range(total):
        storage.enqueue(f"task {i}".encode())
        assert storage.dequeue() is not None  # huey's dequeue deletes: claim and ack in one
    return total / (time.perf_counter() - start)


def bench_persist_queue(total: int) -> float:
    from persistqueue import SQLiteAckQueue

    path = tempfile.mkdtemp(dir=os.environ.get("BENCH_DIR"))
    queue = SQLiteAckQueue(path, auto_commit=True, multithreading=False)
    start = time.perf_counter()
    for i in range(total):
        queue.put(f"task {i}")
        item = queue.get(block=False)
        queue.ack(item)
    return total / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=400)
    parser.add_argument("--depths", default="1000,10000,50000")
    parser.add_argument("--claims", type=int, default=200)
    args = parser.parse_args()

    one = bench_lifecycle(args.tasks, 1)
    four = bench_lifecycle(args.tasks, 4)
    huey = bench_huey(args.tasks)
    pq = bench_persist_queue(args.tasks)
    print(
        f"Lifecycle throughput, {args.tasks} tasks (create -> claim -> submit -> accept;"
        " others: enqueue -> dequeue -> ack)"
    )
    print(f"{'system':<40}{'tasks/s':>10}{'vs octopoid x1':>16}")
    for name, rate in [
        ("octopoid, 1 process (durable)", one),
        ("octopoid, 4 processes (durable)", four),
        ("huey SqliteHuey storage", huey),
        ("persist-queue SQLiteAckQueue", pq),
    ]:
        print(f"{name:<40}{rate:>10.1f}{rate / one:>16.2f}")
    print()
    print(f"Claim latency with N tasks waiting in incoming ({args.claims} claims each)")
    print(f"{'waiting':>10}{'p50 ms':>10}{'p99 ms':>10}{'index build s':>15}")
    for depth in (int(d) for d in args.depths.split(",")):
        p50, p99, rebuild = bench_claim_latency(depth, args.claims)
        print(f"{depth:>10}{p50 * 1e3:>10.2f}{p99 * 1e3:>10.2f}{rebuild:>15.2f}")


if __name__ == "__main__":
    sys.exit(main())
