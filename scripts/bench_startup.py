"""Startup benchmark: every ``octopoid`` command, as a ratio to ``python -c pass``.

Run by hand:  python scripts/bench_startup.py [--runs 7]

Each command runs as a whole process doing real but small work in a scratch project (a git
repository, ``octopoid init``, one task ``TASK-1`` with a branch to diff), next to ``python -c
pass`` on the same interpreter: the console script installed beside this interpreter is used
directly (a pyenv shim would add its own ~50 ms). Two modes, each with its own ``python -c
pass``:

- ``bytecode``: ``PYTHONPYCACHEPREFIX`` names a cache this run warms first, as an installed
  octopoid reads its ``.pyc`` files;
- ``source``: ``PYTHONDONTWRITEBYTECODE=1`` and an empty ``PYTHONPYCACHEPREFIX``, so every
  module not frozen into the interpreter compiles from source on every run (what a runner
  paid on every attempt where the user's environment sets ``PYTHONDONTWRITEBYTECODE``).

Every command runs once first, then ``--runs`` rounds each run every (command, mode) once,
in an order that rotates from round to round, so drift on a shared machine hits all alike.
Reported: the median wall time and the median, min and max of the per-round ratios to the
same round's ``python -c pass`` of the same mode. Target: each command <= 3x with bytecode.

Then each command runs once with ``PYTHONPROFILEIMPORTTIME=1`` (what ``python -X importtime``
prints) to list which heavy modules it imports (GitPython, PyYAML, ``importlib.metadata``,
``anthropic``). Cross-check by hand: ``/usr/bin/time -v octopoid list`` in a project.
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

RATIO_TARGET = 3.0
HEAVY = {
    "GitPython": ("git", "gitdb", "smmap"),
    "PyYAML": ("yaml",),
    "importlib.metadata": ("importlib.metadata",),
    "anthropic": ("anthropic",),
}
IMPORT_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \| *(\S+)\s*$")
PASS = "python -c pass"
#: One real invocation of every command, each doing small work on TASK-1's project.
COMMANDS = {
    "--version": ["--version"],
    "--help": ["--help"],
    "init": ["init"],  # already set up: checks everything and says so
    "enqueue": ["enqueue", "a benchmark task"],
    "list": ["list"],
    "show": ["show", "TASK-1"],
    "status": ["status"],
    "notes": ["notes", "TASK-1"],
    "diff": ["diff", "TASK-1"],
    "checks": ["checks", "TASK-1"],
    "agents": ["agents"],
    "doctor": ["doctor"],
    "pause": ["pause"],
    "resume": ["resume"],
    "worktrees": ["worktrees"],
    "memory search": ["memory", "search", "retry"],
    "memory show": ["memory", "show", "TASK-1"],
    "scheduler status": ["scheduler", "status"],
    "web --help": ["web", "--help"],
}


def clean_env(**extra: str) -> dict[str, str]:
    dropped = ("OCTOPOID_ROOT", "PYTHONPROFILEIMPORTTIME", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    return {**env, **extra}


def mode_envs(scratch: Path) -> dict[str, dict[str, str]]:
    """The two modes' environments; the ``source`` cache stays empty (nothing is written)."""
    (scratch / "pycache-source").mkdir()
    return {
        "bytecode": clean_env(PYTHONPYCACHEPREFIX=str(scratch / "pycache-bytecode")),
        "source": clean_env(
            PYTHONDONTWRITEBYTECODE="1", PYTHONPYCACHEPREFIX=str(scratch / "pycache-source")
        ),
    }


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, int]:
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
            wrapped, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
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


def imports_of(argv: list[str], cwd: Path, env: dict[str, str]) -> list[tuple[str, int, int]]:
    """(module, self us, cumulative us) for every module the command imports."""
    env = {**env, "PYTHONPROFILEIMPORTTIME": "1"}
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    found = []
    for line in done.stderr.splitlines():
        match = IMPORT_LINE.match(line)
        if match:
            found.append((match.group(3), int(match.group(1)), int(match.group(2))))
    return found


def heavy_found(modules: list[tuple[str, int, int]]) -> list[str]:
    names = {name for name, _, _ in modules}
    return [
        label
        for label, roots in HEAVY.items()
        if any(n == r or n.startswith(r + ".") for n in names for r in roots)
    ]


def scratch_project(root: Path, script: str) -> None:
    """A git repository with octopoid set up, TASK-1 waiting and a branch of its to diff."""
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com"]
    root.mkdir()
    for argv in (
        [*git, "init", "-q", "-b", "main"],
        [*git, "commit", "-q", "--allow-empty", "-m", "start"],
        [script, "init"],
        [script, "enqueue", "a task to show", "--context", "Some context."],
        [*git, "checkout", "-q", "-b", "agent/TASK-1"],
    ):
        subprocess.run(argv, cwd=root, env=clean_env(), check=True, capture_output=True)
    (root / "work.txt").write_text("one line of work\n")
    for argv in (
        [*git, "add", "work.txt"],
        [*git, "commit", "-q", "-m", "work"],
        [*git, "checkout", "-q", "main"],
    ):
        subprocess.run(argv, cwd=root, check=True, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed rounds")
    args = parser.parse_args()

    script = octopoid_script()
    scratch = Path(
        tempfile.mkdtemp(prefix="octopoid-bench-startup-", dir=os.environ.get("BENCH_DIR"))
    )
    try:
        root = scratch / "project"
        scratch_project(root, script)
        envs = mode_envs(scratch)
        commands = {PASS: [sys.executable, "-c", "pass"]}
        commands.update({f"octopoid {n}": [script, *argv] for n, argv in COMMANDS.items()})
        timings = time_commands(commands, envs, root, args.runs)
        checks = {
            name: imports_of(argv, root, envs["bytecode"])
            for name, argv in commands.items()
            if name != PASS
        }
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"{script}, python {sys.version.split()[0]}, {os.cpu_count()} cpus")
    verdicts = report_times(timings, args.runs)
    report_imports(checks)
    print(f"\nSummary: each command <= {RATIO_TARGET:g}x {PASS} with bytecode, exit 0")
    failed = [name for name, ok in verdicts if not ok]
    print(f"{len(verdicts) - len(failed)} of {len(verdicts)} PASS; over: {', '.join(failed)}")


Timings = dict[tuple[str, str], list[tuple[float, float, int]]]


def time_commands(
    commands: dict[str, list[str]], envs: dict[str, dict[str, str]], root: Path, runs: int
) -> Timings:
    """Every (command, mode) once to warm up, then ``runs`` rotating rounds of all of them."""
    keys = [(name, mode) for mode in envs for name in commands]
    for name, mode in keys:
        run(commands[name], root, envs[mode])  # warm-up: the bytecode cache, files cached
    timings: Timings = {key: [] for key in keys}
    for i in range(runs):
        shift = i * len(keys) // runs
        for name, mode in keys[shift:] + keys[:shift]:
            timings[name, mode].append(run(commands[name], root, envs[mode]))
    return timings


def report_times(timings: Timings, runs: int) -> list[tuple[str, bool]]:
    """Print one row per command, both modes; (command, within target with bytecode)."""
    print(f"\nWhole-process wall time, {runs} rounds after one warm-up each")
    print(f"ratios: per-round ratio to the same round's `{PASS}` of the same mode")
    head = f"{'command':<28}{'bytecode ms':>12}{'x pass [min-max]':>22}"
    print(head + f"{'source ms':>11}{'x pass [min-max]':>22}{'RSS MiB':>9}{'exit':>6}")
    verdicts = []
    names = dict.fromkeys(name for name, _ in timings)
    for name in names:
        line = f"{name:<28}"
        ratios = {}
        for mode in ("bytecode", "source"):
            walls = [wall for wall, _, _ in timings[name, mode]]
            base = [wall for wall, _, _ in timings[PASS, mode]]
            paired = [w / b for w, b in zip(walls, base, strict=True)]
            ratios[mode] = statistics.median(paired)
            spread = f"{ratios[mode]:.2f} [{min(paired):.2f}-{max(paired):.2f}]"
            line += f"{statistics.median(walls) * 1e3:>{12 if mode == 'bytecode' else 11}.1f}"
            line += f"{spread:>22}"
        rows = timings[name, "bytecode"] + timings[name, "source"]
        codes = ",".join(map(str, sorted({code for _, _, code in rows})))
        print(line + f"{max(r for _, r, _ in rows):>9.1f}{codes:>6}")
        if name != PASS:
            verdicts.append((name, ratios["bytecode"] <= RATIO_TARGET and codes == "0"))
    return verdicts


def report_imports(checks: dict[str, list[tuple[str, int, int]]]) -> None:
    print("\nWhat each command imports with bytecode (PYTHONPROFILEIMPORTTIME=1, one run)")
    print(f"{'command':<28}{'modules':>8}{'import ms':>11}  {'heavy modules':<34}slowest (self ms)")
    for name, modules in checks.items():
        total = sum(self_us for _, self_us, _ in modules) / 1e3
        slowest = sorted(modules, key=lambda m: -m[1])[:3]
        top = ", ".join(f"{m} {s / 1e3:.0f}" for m, s, _ in slowest)
        heavy = ", ".join(heavy_found(modules)) or "none"
        print(f"{name:<28}{len(modules):>8}{total:>11.1f}  {heavy:<34}{top}")


if __name__ == "__main__":
    sys.exit(main())
