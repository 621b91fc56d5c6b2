"""Stats benchmark: `octopoid stats` over a year of history (50,000 done tasks).

Run by hand:  python scripts/bench_stats.py [--done 50000] [--runs 7] [--store postgres]

Writes ``--done`` tasks into done of a fresh project (folders; with ``--store postgres``, a
database of a throwaway server, tests/pg_server.py's), their History as octopoid's moves
write it, spread over a year and four agents: accepted at the first attempt, after a
failed check, after a rejection, and closed as won't do (setup, not measured; then
``doctor --rebuild`` so the store's index matches files written behind its back). Then:

- ``octopoid stats --json`` as a subprocess (the installed console script): the first run
  (cold: it reads every done task once and keeps their summary, ``stats/done``), then
  ``--runs`` warm runs, beside the same command on an empty project (the start-up floor);
- the stats page's figures and charts in process, ``--runs`` x 3 times (what the board pays
  on each request of /stats, its 300 ms p90 budget);
- one more task moved into done, then one run (the summary extended, not rebuilt).

Targets: warm median <= 1.5x the empty project's (the CLI's start-up budget, as
``bench_status``); in process p90 <= 300 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(1, str(Path(__file__).parents[1]))  # tests/pg_server.py, for --store postgres
from bench_status import octopoid_script, run  # scripts/ is not a package

from orchestrator import config
from orchestrator.faces import scaffold
from orchestrator.faces.scaffold import init_project
from orchestrator.model.tasks import Task, TaskState, format_time, new_task, render_task

START = datetime(2025, 11, 24, 9, 0, tzinfo=UTC)
AGENTS = ("impl-1", "impl-2", "impl-3", "impl-4")
CHECK_FAILED = "checks: 1 passed, 1 failed (pytest -q after 2.0s); 1 commit kept on the branch"


def history_task(i: int, created: datetime) -> Task:
    """Task ``i`` done as one of four stories (see the module docstring)."""
    agent, kind = AGENTS[i % 4], i % 10
    task = new_task(str(i), f"finished task {i}", context="What was asked.", now=created)
    at = [created + timedelta(minutes=m) for m in (5, 30, 40, 70, 200, 230, 260)]
    task.add_history(at[0], "incoming", "claimed", agent, "attempt 1")
    if kind == 7:
        task.add_history(at[1], "claimed", "incoming", agent, CHECK_FAILED)
        task.add_history(at[2], "incoming", "claimed", agent, "attempt 2")
        task.add_event(at[3], "claimed", "checks", "check `pytest -q` passed (2.0s)")
    elif kind == 8:
        task.add_history(at[1], "claimed", "provisional", agent, "1 commit, 9 turns, $0.40")
        task.add_history(at[4], "provisional", "incoming", "human", "the test misses the edge")
        task.add_history(at[5], "incoming", "claimed", agent, "attempt 2")
    if kind == 9:
        task.add_history(at[1], "claimed", "incoming", agent, CHECK_FAILED)
        task.add_history(at[6], "incoming", "done", "human", "closed as wont-do: not needed")
        task.headers.update(CLOSED="wont-do", CLOSE_REASON="not needed")
    else:
        task.add_history(at[5], "claimed", "provisional", agent, "2 commits, 30 turns, $0.61")
        task.add_history(at[6], "provisional", "done", "human", "accepted")
        task.headers.update(ACCEPTED_BY="human")
    task.headers.update(
        ATTEMPTS="2" if kind in (7, 8) else "1",
        COST_USD_TOTAL=f"{0.3 + (i % 50) / 100:.4f}",
        TOKENS_TOTAL=str(20_000 + i % 5000),
        COMPLETED_AT=format_time(at[6]),
    )
    return task


class Folders:
    """The queue in folders: task files written straight into done/, then the store's
    index rebuilt from them (``doctor --rebuild``), as ``bench_status`` does."""

    name = "folder store"

    def __init__(self, script: str, tmp: Path) -> None:
        self.script = script

    def attach(self, root: Path) -> None:
        pass

    def add(self, root: Path, tasks: list[Task]) -> None:
        queue = root / ".octopoid/runtime/queue"
        for task in tasks:
            path = queue / TaskState.DONE.value / f"TASK-{task.id}.md"
            path.write_text(render_task(task), encoding="utf-8")
        (queue / ".last_id").write_text(tasks[-1].id)
        run([self.script, "doctor", "--rebuild"], root)

    def close(self) -> None:
        pass


class Postgres(Folders):
    """The queue in PostgreSQL (tests/pg_server.py's throwaway server, a database per
    project named in its config.yaml): rows inserted in bulk, in order of their moves."""

    name = "PostgreSQL"

    def __init__(self, script: str, tmp: Path) -> None:
        from tests.pg_server import PgServer

        self.server, self.n = PgServer(), 0
        self.server.start()

    def attach(self, root: Path) -> None:
        self.n += 1
        os.environ["OCTOPOID_ROOT"] = str(root)
        scaffold.use_postgres(root, self.server.create_database(f"stats{self.n}"))

    def add(self, root: Path, tasks: list[Task]) -> None:
        from orchestrator.pg.database import Database
        from orchestrator.queue.store.postgres import PostgresStore

        os.environ["OCTOPOID_ROOT"] = str(root)
        store = PostgresStore(Database(config.store_choice()[1]))
        rows = [(task.id, *store._row(task, TaskState.DONE)) for task in tasks]
        with store.db.tx() as cur:
            cur.executemany(
                "INSERT INTO octopoid.tasks (id, state, body, role, rank, created, seq, "
                "blocked_by, not_before, turns, cost) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                rows,
            )
            cur.execute("SELECT setval('octopoid.task_ids', %s)", (int(tasks[-1].id),))
        store.close()

    def close(self) -> None:
        self.server.stop()


def in_process(root: Path, runs: int) -> list[float]:
    """The stats page's figures and charts (``stats_page.page``: ``stats.report`` and the
    SVG) timed in this process, as the board's server computes them, warm."""
    os.environ["OCTOPOID_ROOT"] = str(root)
    from orchestrator.faces.web import stats_page

    stats_page.page({})
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        stats_page.page({})
        times.append(time.perf_counter() - start)
    return times


def spread(times: list[float]) -> str:
    ordered = sorted(times)
    p90 = ordered[max(int(0.9 * len(ordered) + 0.999) - 1, 0)]
    return f"{statistics.median(ordered) * 1000:.0f} ms | {p90 * 1000:.0f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--done", type=int, default=50_000, help="tasks in done/")
    parser.add_argument("--runs", type=int, default=7, help="timed runs of each")
    parser.add_argument("--store", choices=("folder", "postgres"), default="folder")
    args = parser.parse_args()
    script = octopoid_script()
    with tempfile.TemporaryDirectory() as tmp:
        backend = (Postgres if args.store == "postgres" else Folders)(script, Path(tmp))
        try:
            report(args, script, Path(tmp), backend)
        finally:
            backend.close()


def report(args: argparse.Namespace, script: str, tmp: Path, backend: Folders) -> None:
    empty, big = tmp / "empty", tmp / "big"
    for root in (empty, big):
        root.mkdir()
        init_project(root)
        backend.attach(root)
    start = time.perf_counter()
    step = timedelta(days=365) / max(args.done, 1)
    backend.add(big, [history_task(i, START + i * step) for i in range(1, args.done + 1)])
    print(f"wrote {args.done} done tasks in {time.perf_counter() - start:.1f}s", flush=True)
    argv = [script, "stats", "--json"]
    cold = run(argv, big)
    assert cold.code == 0, cold.err
    warm = [run(argv, big).wall for _ in range(args.runs)]
    floor = [run(argv, empty).wall for _ in range(args.runs)]
    inside = in_process(big, args.runs * 3)
    backend.add(big, [history_task(args.done + 1, START + timedelta(days=365))])
    grown = run(argv, big)
    ratio, n = statistics.median(warm) / statistics.median(floor), f"{args.done:,}"
    print(f"\n`octopoid stats --json`, {backend.name}, {n} done tasks, {args.runs} runs each\n")
    print("| what | p50 | p90 |\n|---|---:|---:|")
    print(f"| empty project (start-up floor) | {spread(floor)} |")
    print(f"| {n} done, first run (cold: summary built) | {cold.wall * 1000:.0f} ms | |")
    print(f"| {n} done, warm | {spread(warm)} |")
    print(f"| {n} done + 1 more done (summary extended) | {grown.wall * 1000:.0f} ms | |")
    print(f"| the stats page's figures and charts, in process, x{len(inside)} | {spread(inside)} |")
    print(f"\nwarm / empty median: {ratio:.2f}x (target <= 1.5x); peak RSS of the cold run: "
          f"{cold.rss_mib:.0f} MiB")  # fmt: skip


if __name__ == "__main__":
    main()
