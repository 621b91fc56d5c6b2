"""Scheduler benchmark: enqueue-to-start latency, idle CPU, and per-attempt overhead.

Run by hand:  python scripts/bench_scheduler.py [--tasks 50] [--idle 60] [--attempts 40]
              [--postgres] [--sandbox bwrap,none]
Each part starts the real daemon (`octopoid scheduler run`) on a scratch git repository
with a command agent that does (almost) nothing, so what is measured is octopoid itself.
The latency part runs one daemon per ``--sandbox`` mode side by side, enqueueing into each
in turn, so the modes are compared on the same machine at the same moments; the other
parts use the first mode.
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

# The agent says when it started (its output is its attempt log: a box writes nowhere
# else), then makes an empty commit so the attempt succeeds.
AGENT = r"""
import subprocess, time
print("BENCH_START", time.time(), flush=True)
subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "bench"], check=True)
"""


def started_at(root: Path, label: str) -> float:
    """When the agent of ``label``'s first attempt said it started."""
    log = root / ".octopoid/runtime/logs" / label / "attempt-1.log"
    return float(log.read_text().split("BENCH_START ", 1)[1].split()[0])


def scratch(concurrency: int, sandbox: str = "bwrap") -> Path:
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
    (root / ".octopoid/config.yaml").write_text(yaml.safe_dump({"sandbox": sandbox}))
    if DATABASE is not None:
        from orchestrator.store.postgres import upgrade_database

        dsn = DATABASE.create_database(f"bench_{root.name.replace('-', '_')}")
        upgrade_database(dsn)
        os.environ["OCTOPOID_DATABASE_URL"] = dsn
    os.environ["OCTOPOID_ROOT"] = str(root)
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


def bench_latency(tasks: int, modes: list[str]) -> dict[str, tuple[float, float, float]]:
    """Enqueue one task at a time into an idle daemon per sandbox mode, the modes in turn;
    time until it is claimed (the daemon woke and took it: polled every 2 ms) and until its
    agent starts. {mode: (claimed p50, started p50, started p95)}."""
    roots = {mode: scratch(1, mode) for mode in modes}
    daemons = {}
    for mode, root in roots.items():
        os.environ["OCTOPOID_ROOT"] = str(root)
        daemons[mode] = start_daemon(root)
    time.sleep(1)
    claims: dict[str, list[float]] = {m: [] for m in modes}
    starts: dict[str, list[float]] = {m: [] for m in modes}
    for i in range(tasks):
        for mode, root in roots.items():
            os.environ["OCTOPOID_ROOT"] = str(root)
            enqueued = time.time()
            task = q.create_task(f"latency {i}")
            while q.get_store().locate(task.id) is TaskState.INCOMING:
                time.sleep(0.002)
            claims[mode].append(time.time() - enqueued)
            wait_provisional(i + 1)
            starts[mode].append(started_at(root, task.label) - enqueued)
            time.sleep(0.3)  # let the daemon go idle again
    for mode, root in roots.items():
        stop(daemons[mode], root)
    out = {}
    for mode in modes:
        samples = sorted(starts[mode])
        p95 = samples[int(0.95 * len(samples)) - 1]
        out[mode] = (statistics.median(claims[mode]), statistics.median(samples), p95)
    return out


def bench_idle(seconds: int, mode: str) -> float:
    root = scratch(1, mode)
    daemon = start_daemon(root)
    time.sleep(2)
    proc = psutil.Process(daemon.pid)
    before = proc.cpu_times()
    time.sleep(seconds)
    after = proc.cpu_times()
    stop(daemon, root)
    used = (after.user - before.user) + (after.system - before.system)
    return 100.0 * used / seconds


def bench_overhead(attempts: int, concurrency: int, mode: str) -> float:
    """Wall time per attempt: claim, runner, workspace, prompt, agent, notes, submit."""
    root = scratch(concurrency, mode)
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
    parser.add_argument(
        "--sandbox", default="bwrap,none", help="modes to compare (comma-separated)"
    )
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
    modes = args.sandbox.split(",")
    print(f"queue: {'PostgreSQL' if args.postgres else 'folders'}; sandbox: {', '.join(modes)}")
    latency = bench_latency(args.tasks, modes)
    idle = bench_idle(args.idle, modes[0])
    one = bench_overhead(args.attempts, 1, modes[0])
    four = bench_overhead(args.attempts, 4, modes[0])
    rows = []
    for mode, (claimed, p50, p95) in latency.items():
        rows += [
            (f"enqueue -> claimed, p50 ({args.tasks} tasks, {mode})", f"{claimed * 1e3:.0f} ms"),
            (f"enqueue -> agent start, p50 ({args.tasks} tasks, {mode})", f"{p50 * 1e3:.0f} ms"),
            (f"enqueue -> agent start, p95 ({args.tasks} tasks, {mode})", f"{p95 * 1e3:.0f} ms"),
        ]
    if len(modes) == 2:
        extra = latency[modes[0]][1] - latency[modes[1]][1]
        rows.append((f"agent start, p50: {modes[0]} minus {modes[1]}", f"{extra * 1e3:.0f} ms"))
    rows += [
        (f"idle daemon CPU over {args.idle} s ({modes[0]})", f"{idle:.2f} %"),
        (f"wall time per attempt, 1 agent ({args.attempts}, {modes[0]})", f"{one * 1e3:.0f} ms"),
        (f"wall time per attempt, 4 agents ({args.attempts}, {modes[0]})", f"{four * 1e3:.0f} ms"),
        ("throughput ratio, 4 agents vs 1", f"{one / four:.2f}x"),
    ]
    print(f"{'measure':<60}{'value':>12}")
    for name, value in rows:
        print(f"{name:<60}{value:>12}")


if __name__ == "__main__":
    main()
