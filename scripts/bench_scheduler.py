"""Scheduler benchmark: enqueue-to-start latency, idle CPU, and per-attempt overhead.

Run by hand:  python scripts/bench_scheduler.py [--tasks 50] [--idle 60] [--attempts 40]
              [--postgres]
Each part starts the real daemon (`octopoid scheduler run`) on a scratch git repository
with a command agent that does (almost) nothing, so what is measured is octopoid itself.
``--postgres`` keeps the queue in a throwaway PostgreSQL server (tests/pg_server.py, a
fresh database per part): tasks are enqueued by this process, so only the database's
NOTIFY can wake the idle daemon, as when another machine enqueues.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml

from orchestrator import queue_utils as q
from orchestrator.scaffold import init_project
from orchestrator.tasks import TaskState

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
DATABASE = None  # a tests.pg_server.PgServer with --postgres

# The agent records when it started, then makes an empty commit so the attempt succeeds.
AGENT = r"""
import os, subprocess, sys, time
with open(os.environ["BENCH_STARTS"], "a") as f:
    f.write(f"{os.environ['OCTOPOID_TASK_ID']} {time.time()}\n")
subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "bench"], check=True)
"""


def scratch(concurrency: int) -> Path:
    root = Path(tempfile.mkdtemp(prefix="octopoid-bench-"))
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    for key, value in (("user.name", "bench"), ("user.email", "bench@example.invalid")):
        subprocess.run(["git", "-C", str(root), "config", key, value], check=True)
    subprocess.run(
        ["git", "-C", str(root), "commit", "-q", "--allow-empty", "-m", "init"], check=True
    )
    init_project(root)
    agents = {
        "max_claimed": concurrency,
        "max_provisional": 10_000,
        "agents": [
            {
                "name": "bench",
                "role": "implement",
                "backend": "command",
                "argv": [sys.executable, "-c", AGENT],
                "max_concurrent": concurrency,
            }
        ],
    }
    (root / ".octopoid/agents.yaml").write_text(yaml.safe_dump(agents))
    if DATABASE is not None:
        from orchestrator.store.postgres import upgrade_database

        dsn = DATABASE.create_database(f"bench_{root.name.replace('-', '_')}")
        upgrade_database(dsn)
        os.environ["OCTOPOID_DATABASE_URL"] = dsn
    os.environ["OCTOPOID_ROOT"] = str(root)
    os.environ["BENCH_STARTS"] = str(root / "starts.txt")
    return root


def start_daemon(root: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [shutil.which("octopoid"), "scheduler", "run"],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while not (root / ".octopoid/runtime/scheduler.pid").exists():
        time.sleep(0.05)
    return proc


def stop(proc: subprocess.Popen, root: Path) -> None:
    proc.terminate()
    proc.wait(60)
    shutil.rmtree(root, ignore_errors=True)


def wait_provisional(count: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while q.get_store().count(TaskState.PROVISIONAL) < count:
        if time.monotonic() > deadline or q.get_store().count(TaskState.FAILED):
            raise SystemExit("tasks did not all reach provisional; see the runner logs")
        time.sleep(0.02)


def bench_latency(tasks: int) -> tuple[float, float, float]:
    """Enqueue one task at a time into an idle daemon; time until it is claimed (the
    daemon woke and took it: polled every 2 ms) and until its agent starts."""
    root = scratch(1)
    daemon = start_daemon(root)
    time.sleep(1)
    samples, claims = [], []
    for i in range(tasks):
        enqueued = time.time()
        task = q.create_task(f"latency {i}")
        while q.get_store().locate(task.id) is TaskState.INCOMING:
            time.sleep(0.002)
        claims.append(time.time() - enqueued)
        wait_provisional(i + 1)
        starts = dict(ln.split() for ln in (root / "starts.txt").read_text().splitlines())
        samples.append(float(starts[task.label]) - enqueued)
        time.sleep(0.3)  # let the daemon go idle again
    stop(daemon, root)
    samples.sort()
    p95 = samples[int(0.95 * len(samples)) - 1]
    return statistics.median(claims), statistics.median(samples), p95


def bench_idle(seconds: int) -> float:
    root = scratch(1)
    daemon = start_daemon(root)
    time.sleep(2)
    proc = psutil.Process(daemon.pid)
    before = proc.cpu_times()
    time.sleep(seconds)
    after = proc.cpu_times()
    stop(daemon, root)
    used = (after.user - before.user) + (after.system - before.system)
    return 100.0 * used / seconds


def bench_overhead(attempts: int, concurrency: int) -> float:
    """Wall time per attempt: claim, runner, worktree, prompt, agent, notes, submit."""
    root = scratch(concurrency)
    for i in range(attempts):
        q.create_task(f"overhead {i}")
    start = time.perf_counter()
    daemon = start_daemon(root)
    wait_provisional(attempts)
    elapsed = time.perf_counter() - start
    stop(daemon, root)
    return elapsed / attempts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--idle", type=int, default=60)
    parser.add_argument("--attempts", type=int, default=40)
    parser.add_argument("--postgres", action="store_true", help="the queue in PostgreSQL")
    args = parser.parse_args()
    if args.postgres:
        global DATABASE
        from tests.pg_server import PgServer

        DATABASE = PgServer()
        DATABASE.start()
    try:
        report(args)
    finally:
        if DATABASE is not None:
            DATABASE.stop()


def report(args: argparse.Namespace) -> None:
    print(f"queue: {'PostgreSQL' if args.postgres else 'folders'}")
    claimed, p50, p95 = bench_latency(args.tasks)
    idle = bench_idle(args.idle)
    one = bench_overhead(args.attempts, 1)
    four = bench_overhead(args.attempts, 4)
    print(f"{'measure':<52}{'value':>12}")
    print(f"{f'enqueue -> claimed, p50 ({args.tasks} tasks)':<52}{claimed * 1e3:>9.0f} ms")
    print(f"{f'enqueue -> agent start, p50 ({args.tasks} tasks)':<52}{p50 * 1e3:>9.0f} ms")
    print(f"{f'enqueue -> agent start, p95 ({args.tasks} tasks)':<52}{p95 * 1e3:>9.0f} ms")
    print(f"{f'idle daemon CPU over {args.idle} s':<52}{idle:>10.2f} %")
    print(f"{f'wall time per attempt, 1 agent ({args.attempts} attempts)':<52}{one * 1e3:>9.0f} ms")
    print(
        f"{f'wall time per attempt, 4 agents ({args.attempts} attempts)':<52}{four * 1e3:>9.0f} ms"
    )
    print(f"{'throughput ratio, 4 agents vs 1':<52}{one / four:>11.2f}x")


if __name__ == "__main__":
    main()
