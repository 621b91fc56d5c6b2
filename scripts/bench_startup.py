"""Startup benchmark: how long `octopoid --help`, `list` and `status` take to start and end.

Run by hand:  python scripts/bench_startup.py [--runs 15]

Each command runs as a whole process, in an empty project (``init`` only), next to
``python -c pass`` on the same interpreter: the console script installed beside this
interpreter is used directly (a pyenv shim would add its own ~50 ms). Every command runs
once first (bytecode compiled, files cached), then ``--runs`` rounds each run every command
once, in an order that rotates from round to round, so drift on a shared machine hits all
alike. Reported: median wall time, the ratio of medians to ``python -c pass`` and the median
of the per-round ratios, and peak RSS (``/usr/bin/time -f %M``, else psutil polling).
Target: each command <= 4x ``python -c pass``.

Then each command (and ``show`` of a task, in a one-task project) runs once with
``PYTHONPROFILEIMPORTTIME=1`` (what ``python -X importtime`` prints) to list what it imports:
GitPython (``git``, ``gitdb``, ``smmap``) and ``anthropic`` must not be among them.
Cross-check by hand: ``/usr/bin/time -v octopoid list`` in a project.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_status import TIME, octopoid_script  # the same console script and RSS probe

from orchestrator.scaffold import init_project
from orchestrator.tasks import TaskState, new_task, render_task

RATIO_TARGET = 4.0
HEAVY = {
    "GitPython": ("git", "gitdb", "smmap"),
    "anthropic": ("anthropic",),
}
IMPORT_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \| *(\S+)\s*$")


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("OCTOPOID_ROOT", "PYTHONPROFILEIMPORTTIME")
    }
    return {**env, **extra}


def run(argv: list[str], cwd: Path) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MiB, exit code) of one run, output thrown away.

    Peak RSS comes from ``/usr/bin/time -f %M`` (psutil polling without it): the child's own
    ``ru_maxrss`` would count this process, which it was forked from. The wrapper's own
    exec (about a millisecond) is in every row alike, ``python -c pass`` included.
    """
    with tempfile.TemporaryDirectory() as tmp:
        rss_file = Path(tmp) / "rss"
        wrapped = [TIME, "-f", "%M", "-o", str(rss_file), *argv] if TIME else argv
        start = time.perf_counter()
        child = subprocess.Popen(
            wrapped, cwd=cwd, env=clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        status, polled = wait(child.pid)
        wall = time.perf_counter() - start
        rss_kib = int(rss_file.read_text().split()[-1]) if TIME else polled
    return wall, rss_kib / 1024, os.waitstatus_to_exitcode(status)


def wait(pid: int) -> tuple[int, int]:
    """Reap ``pid``: (status, peak RSS KiB seen by polling; 0 when not polling)."""
    if TIME:
        return os.waitpid(pid, 0)[1], 0
    import psutil

    proc, peak = psutil.Process(pid), 0
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status, peak
        with contextlib.suppress(psutil.Error):
            peak = max(peak, proc.memory_info().rss // 1024)
        time.sleep(0.002)


def imports_of(argv: list[str], cwd: Path) -> list[tuple[str, int, int]]:
    """(module, self us, cumulative us) for every module the command imports."""
    done = subprocess.run(
        argv, cwd=cwd, env=clean_env(PYTHONPROFILEIMPORTTIME="1"), capture_output=True, text=True
    )
    found = []
    for line in done.stderr.splitlines():
        match = IMPORT_LINE.match(line)
        if match:
            found.append((match.group(3), int(match.group(1)), int(match.group(2))))
    return found


def heavy_found(modules: list[tuple[str, int, int]]) -> dict[str, list[str]]:
    names = [name for name, _, _ in modules]
    return {label: [n for n in names if n.split(".")[0] in roots] for label, roots in HEAVY.items()}


def one_task_project(scratch: Path) -> Path:
    root = scratch / "one-task"
    root.mkdir()
    init_project(root)
    task = new_task("1", "a task to show", context="Some context.")
    path = root / ".octopoid/runtime/queue" / TaskState.INCOMING.value / "TASK-1.md"
    path.write_text(render_task(task), encoding="utf-8")
    (root / ".octopoid/runtime/queue/.last_id").write_text("1")
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="timed rounds")
    args = parser.parse_args()

    script = octopoid_script()
    scratch = Path(
        tempfile.mkdtemp(prefix="octopoid-bench-startup-", dir=os.environ.get("BENCH_DIR"))
    )
    try:
        root = scratch / "empty"
        root.mkdir()
        init_project(root)
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "octopoid --help": [script, "--help"],
            "octopoid list": [script, "list"],
            "octopoid status": [script, "status"],
        }
        timings = time_commands(commands, root, args.runs)
        shown = one_task_project(scratch)
        checks = {
            name: imports_of(argv, root)
            for name, argv in commands.items()
            if name != "python -c pass"
        }
        checks["octopoid show TASK-1"] = imports_of([script, "show", "TASK-1"], shown)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"{script}, python {sys.version.split()[0]}, {os.cpu_count()} cpus")
    verdicts = report_times(timings, args.runs)
    verdicts += report_imports(checks)
    print("\nSummary against the issue's targets")
    print(f"{'measure':<56}{'value':>10}{'target':>10}")
    for name, value, target, ok in verdicts:
        print(f"{name:<56}{value:>10}{target:>10}  {'PASS' if ok else 'FAIL'}")


def time_commands(
    commands: dict[str, list[str]], root: Path, runs: int
) -> dict[str, list[tuple[float, float, int]]]:
    for argv in commands.values():
        run(argv, root)  # warm-up: bytecode compiled, files cached
    timings: dict[str, list[tuple[float, float, int]]] = {name: [] for name in commands}
    names = list(commands)
    for i in range(runs):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            timings[name].append(run(commands[name], root))
    return timings


def report_times(
    timings: dict[str, list[tuple[float, float, int]]], runs: int
) -> list[tuple[str, str, str, bool]]:
    base = [wall for wall, _, _ in timings["python -c pass"]]
    base_median = statistics.median(base)
    print(f"\nWhole-process wall time in an empty project, {runs} rounds after one warm-up each")
    print(f"{'command':<20}{'median ms':>11}{'min ms':>9}{'max ms':>9}{'x pass':>9}", end="")
    print(f"{'x pass (paired)':>17}{'peak RSS MiB':>14}{'exit':>6}")
    verdicts = []
    for name, rows in timings.items():
        walls = [wall for wall, _, _ in rows]
        ratio = statistics.median(walls) / base_median
        paired = statistics.median(w / b for w, b in zip(walls, base, strict=True))
        codes = sorted({code for _, _, code in rows})
        line = f"{name:<20}{statistics.median(walls) * 1e3:>11.1f}{min(walls) * 1e3:>9.1f}"
        line += f"{max(walls) * 1e3:>9.1f}{ratio:>9.2f}{paired:>17.2f}"
        print(line + f"{max(r for _, r, _ in rows):>14.1f}{','.join(map(str, codes)):>6}")
        if name != "python -c pass":
            ok = ratio <= RATIO_TARGET and codes == [0]
            verdicts.append(
                (f"{name} / python -c pass", f"{ratio:.2f}x", f"<= {RATIO_TARGET:g}x", ok)
            )
    return verdicts


def report_imports(
    checks: dict[str, list[tuple[str, int, int]]],
) -> list[tuple[str, str, str, bool]]:
    print("\nWhat each command imports (PYTHONPROFILEIMPORTTIME=1, one run)")
    print(
        f"{'command':<24}{'modules':>8}{'import ms':>11}  heavy modules          slowest (self ms)"
    )
    verdicts = []
    for name, modules in checks.items():
        heavy = heavy_found(modules)
        total = sum(self_us for _, self_us, _ in modules) / 1e3
        slowest = sorted(modules, key=lambda m: -m[1])[:3]
        top = ", ".join(f"{m} {s / 1e3:.0f}" for m, s, _ in slowest)
        seen = [f"{label} ({len(found)})" for label, found in heavy.items() if found]
        print(f"{name:<24}{len(modules):>8}{total:>11.1f}  {', '.join(seen) or 'none':<22} {top}")
        ok = bool(modules) and not any(heavy.values())
        value = (
            "none"
            if ok
            else ("no data" if not modules else "+".join(k for k, v in heavy.items() if v))
        )
        verdicts.append((f"{name}: GitPython or anthropic imported", value, "none", ok))
    return verdicts


if __name__ == "__main__":
    sys.exit(main())
