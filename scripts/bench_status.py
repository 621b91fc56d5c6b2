"""Status benchmark: `octopoid status` on a big project against an empty one.

Run by hand:  python scripts/bench_status.py [--done 50000] [--incoming 10000] [--runs 5]

Two projects side by side: an empty one (``init`` only), and one with ``--done`` tasks in
done/ (each with TURNS_TOTAL and COST_USD_TOTAL headers and a full History, as accepted
tasks have) and ``--incoming`` tasks waiting, their files written straight into the folders
(setup, not measured). When ``octopoid --help`` lists ``doctor`` with ``--rebuild``, it is run
on both projects first (so an index or usage ledger kept beside the queue matches the files
written behind octopoid's back); the table says whether it was.

Then the installed ``octopoid`` console script (this interpreter's, not a shim) runs
``status`` as a subprocess: one warm-up run each (reported as "first run": it compiles
bytecode and may build caches), then ``--runs`` timed runs each, alternating empty and big.
Wall time is measured around the child; peak RSS is what ``/usr/bin/time -f %M`` prints
for it (psutil polling when that is missing); CPU is user + sys from ``wait4``. A last
``status --json`` checks the counts.
Targets: the big project's median <= 1.5x the empty one's; its peak RSS <= 80 MiB.
Cross-check by hand with ``/usr/bin/time -v octopoid status`` in each project.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from orchestrator.faces.scaffold import init_project
from orchestrator.model.tasks import (
    PRIORITIES,
    TaskState,
    format_time,
    new_task,
    render_task,
    utcnow,
)

WALL_RATIO_TARGET = 1.5
RSS_TARGET_MIB = 80
TIME = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None  # for peak RSS


@dataclass
class Run:
    wall: float
    rss_mib: float
    cpu: float
    code: int
    out: str
    err: str


@dataclass
class Project:
    name: str
    root: Path
    doctor: str = "not run"
    runs: list[Run] = field(default_factory=list)
    first: Run | None = None
    counts: str = ""


def octopoid_script() -> str:
    """The console script installed beside this interpreter (a pyenv shim would add ~50 ms)."""
    beside = Path(sys.executable).parent / "octopoid"
    if beside.exists():
        return str(beside)
    found = shutil.which("octopoid")
    if found is None:
        sys.exit("no octopoid console script: pip install -e '.[bench]'")
    return found


def run(argv: list[str], cwd: Path) -> Run:
    """Run ``argv`` in ``cwd``: wall time, peak RSS, CPU (user + sys), exit code, output.

    Peak RSS comes from ``/usr/bin/time -f %M``, else from polling with psutil: the child's
    own ``ru_maxrss`` would count this (much bigger) process, which it was forked from.
    """
    env = {k: v for k, v in os.environ.items() if k != "OCTOPOID_ROOT"}
    with tempfile.TemporaryDirectory() as tmp:
        rss_file = Path(tmp) / "rss"
        wrapped = [TIME, "-f", "%M", "-o", str(rss_file), *argv] if TIME else argv
        with open(Path(tmp) / "out", "w+b") as out, open(Path(tmp) / "err", "w+b") as err:
            start = time.perf_counter()
            child = subprocess.Popen(wrapped, cwd=cwd, env=env, stdout=out, stderr=err)
            status, usage, polled = wait(child.pid)
            wall = time.perf_counter() - start
            out.seek(0)
            err.seek(0)
            text, errors = out.read().decode(errors="replace"), err.read().decode(errors="replace")
        rss_kib = int(rss_file.read_text().split()[-1]) if TIME else polled
    cpu = usage.ru_utime + usage.ru_stime
    return Run(wall, rss_kib / 1024, cpu, os.waitstatus_to_exitcode(status), text, errors)


def wait(pid: int) -> tuple[int, os.struct_rusage, int]:
    """Reap ``pid``: (status, rusage, peak RSS KiB seen by polling; 0 when not polling)."""
    if TIME:
        _, status, usage = os.wait4(pid, 0)
        return status, usage, 0
    import psutil

    proc, peak = psutil.Process(pid), 0
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            return status, usage, peak
        with contextlib.suppress(psutil.Error):
            peak = max(peak, proc.memory_info().rss // 1024)
        time.sleep(0.002)


SENTINEL_ID, SENTINEL_TURNS = "987654321", 4242
SENTINEL_TIME = datetime(2001, 1, 1, tzinfo=UTC)
STEP_MINUTES = (0, 5, 25, 55)  # created, claimed, submitted, completed


def done_template(priority: str) -> str:
    """A done task as octopoid writes one (same headers and History as a real accept, made
    through its own API), with sentinel values for what differs between tasks."""
    created, claimed, submitted, completed = (
        SENTINEL_TIME + timedelta(minutes=m) for m in STEP_MINUTES
    )
    task = new_task(
        SENTINEL_ID,
        f"finished task {SENTINEL_ID}",
        priority=priority,
        context="What was asked, in a few lines.\nAnd a second line of context.",
        criteria=["It works.", "Tests pass."],
        now=created,
    )
    task.headers.update(
        ATTEMPTS="1",
        TURNS_TOTAL=str(SENTINEL_TURNS),
        COST_USD_TOTAL=f"{SENTINEL_TURNS * 0.0123:.4f}",
        COMMITS="2",
        TURNS=str(SENTINEL_TURNS),
        SUBMITTED_AT=format_time(submitted),
        ACCEPTED_BY="human",
        COMPLETED_AT=format_time(completed),
    )
    task.add_history(claimed, "incoming", "claimed", "impl-agent-1", "attempt 1")
    task.add_history(submitted, "claimed", "provisional", "impl-agent-1", "2 commits, 30 turns")
    task.add_history(completed, "provisional", "done", "human", "accepted")
    return render_task(task)


def done_text(template: str, i: int, created: datetime, turns: int) -> str:
    """The template with task ``i``'s id, times, turns and cost (set apart: 0.1 s per 1,000)."""
    text = template.replace(SENTINEL_ID, str(i))
    for minutes in STEP_MINUTES:
        step = timedelta(minutes=minutes)
        text = text.replace(format_time(SENTINEL_TIME + step), format_time(created + step))
    for key, old, new in (
        ("TURNS_TOTAL", SENTINEL_TURNS, turns),
        ("TURNS", SENTINEL_TURNS, turns),
        ("COST_USD_TOTAL", f"{SENTINEL_TURNS * 0.0123:.4f}", f"{turns * 0.0123:.4f}"),
    ):
        text = text.replace(f"\n{key}: {old}\n", f"\n{key}: {new}\n")
    return text


def fill(root: Path, done: int, incoming: int) -> float:
    """Write ``done`` + ``incoming`` task files straight into the folders; seconds taken."""
    start = time.perf_counter()
    queue = root / ".octopoid/runtime/queue"
    base = utcnow() - timedelta(days=30)
    templates = {p: done_template(p) for p in PRIORITIES}
    for i in range(1, done + 1):
        template = templates[PRIORITIES[i % 4]]
        text = done_text(template, i, base + timedelta(seconds=i), 5 + i % 60)
        (queue / TaskState.DONE.value / f"TASK-{i}.md").write_text(text, encoding="utf-8")
    for i in range(done + 1, done + incoming + 1):
        task = new_task(
            str(i),
            f"waiting task {i}",
            priority=f"P{i % 4}",
            context="Some context.",
            now=base + timedelta(seconds=i),
        )
        path = queue / TaskState.INCOMING.value / f"TASK-{i}.md"
        path.write_text(render_task(task), encoding="utf-8")
    (queue / ".last_id").write_text(str(done + incoming))
    return time.perf_counter() - start


def doctor_rebuild_available(script: str, cwd: Path) -> bool:
    top = run([script, "--help"], cwd).out
    if not any(line.split()[:1] == ["doctor"] for line in top.splitlines()):
        return False
    return "--rebuild" in run([script, "doctor", "--help"], cwd).out


def check_counts(script: str, project: Project, expect: dict[str, int]) -> None:
    done = run([script, "status", "--json"], project.root)
    try:
        counts = json.loads(done.out)["counts"]
    except (ValueError, KeyError, TypeError):
        project.counts = "unchecked (no counts in status --json)"
        return
    wrong = {k: counts.get(k) for k, v in expect.items() if counts.get(k) != v}
    shown = ", ".join(f"{k}={counts.get(k)}" for k in expect)
    project.counts = f"{shown} ({'as written' if not wrong else 'WRONG, expected ' + str(expect)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--done", type=int, default=50_000, help="tasks in done/")
    parser.add_argument("--incoming", type=int, default=10_000, help="tasks in incoming/")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per project (>= 5)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch projects")
    args = parser.parse_args()

    script = octopoid_script()
    scratch = Path(
        tempfile.mkdtemp(prefix="octopoid-bench-status-", dir=os.environ.get("BENCH_DIR"))
    )
    empty = Project("empty project", scratch / "empty")
    big = Project(f"{args.done:,} done + {args.incoming:,} incoming", scratch / "big")
    try:
        for project in (empty, big):
            project.root.mkdir()
            init_project(project.root)
        written = fill(big.root, args.done, args.incoming)
        print(f"wrote {args.done + args.incoming:,} task files in {written:.1f}s; using {script}")
        rebuild = doctor_rebuild_available(script, empty.root)
        for project in (empty, big):
            if rebuild:
                done = run([script, "doctor", "--rebuild"], project.root)
                ok = "ok" if done.code == 0 else f"exit {done.code}"
                project.doctor = f"run, {done.wall:.1f}s, {ok}"
            else:
                project.doctor = "not available"
        for project in (empty, big):
            project.first = run([script, "status"], project.root)
        for _ in range(args.runs):
            for project in (empty, big):
                project.runs.append(run([script, "status"], project.root))
        check_counts(script, empty, {"done": 0, "incoming": 0})
        check_counts(script, big, {"done": args.done, "incoming": args.incoming})
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    report(args, empty, big)


def report(args: argparse.Namespace, empty: Project, big: Project) -> None:
    print(f"\n`octopoid status`, {args.runs} timed runs each after one warm-up, alternating")
    head = f"{'project':<36}{'first s':>9}{'median s':>10}{'min s':>8}{'max s':>8}"
    print(head + f"{'cpu s':>8}{'peak RSS MiB':>14}  doctor --rebuild")
    for p in (empty, big):
        walls = [r.wall for r in p.runs]
        line = f"{p.name:<36}{p.first.wall:>9.3f}{statistics.median(walls):>10.3f}"
        line += f"{min(walls):>8.3f}{max(walls):>8.3f}"
        line += f"{statistics.median(r.cpu for r in p.runs):>8.3f}"
        print(line + f"{max(r.rss_mib for r in p.runs):>14.1f}  {p.doctor}")
    failed = [r for p in (empty, big) for r in [p.first, *p.runs] if r.code != 0]
    for r in failed[:1]:
        print(f"status exited {r.code}: {r.err.strip()[-400:]}")
    for p in (empty, big):
        print(f"counts seen by status --json, {p.name}: {p.counts}")

    ratio = statistics.median(r.wall for r in big.runs) / statistics.median(
        r.wall for r in empty.runs
    )
    paired = statistics.median(b.wall / e.wall for b, e in zip(big.runs, empty.runs, strict=True))
    rss = max(r.rss_mib for r in big.runs)
    rows = [
        (
            "status time, big / empty (ratio of medians)",
            f"{ratio:.2f}x",
            f"<= {WALL_RATIO_TARGET}x",
            ratio <= WALL_RATIO_TARGET,
        ),
        (
            "status time, big / empty (median of paired runs)",
            f"{paired:.2f}x",
            "(cross-check)",
            None,
        ),
        (
            "status peak RSS, big project",
            f"{rss:.1f} MiB",
            f"<= {RSS_TARGET_MIB} MiB",
            rss <= RSS_TARGET_MIB,
        ),
        ("every status run exited 0", "yes" if not failed else "no", "yes", not failed),
    ]
    print("\nSummary against the issue's targets")
    print(f"{'measure':<52}{'value':>12}{'target':>16}")
    for name, value, target, ok in rows:
        verdict = "info" if ok is None else ("PASS" if ok else "FAIL")
        print(f"{name:<52}{value:>12}{target:>16}  {verdict}")


if __name__ == "__main__":
    sys.exit(main())
