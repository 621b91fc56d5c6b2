"""Startup benchmark: every ``octopoid`` command, as a ratio to ``python -c pass``.

Run by hand:  python scripts/bench_startup.py [--runs 7] [--old REV] [--new REV]
                 [--commands status,diff] [--no-source]

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

With ``--old REV``, the code of that git revision (``git archive``d into the scratch
directory) runs every command too, in the same rounds, on a project of its own: before and
after in one run. ``--new REV`` times a revision in place of this checkout as it is (whose
uncommitted changes would count). Each version's code is named by ``PYTHONPATH``, so both
start alike whatever the install points at.

Every command runs once first, then ``--runs`` rounds each run every (command, mode,
version) once, in an order that rotates from round to round, so drift on a shared machine
hits all alike. Reported: the median wall time and the median, min and max of the
per-round ratios to the same round's ``python -c pass`` of the same mode, and with
``--old`` the paired new/old ratio. Target: each command <= 3x with bytecode.

Then, with bytecode, where each command's time goes (median of ``--probes`` runs, in the
process): its module bodies (lazy ones too, which ``-X importtime`` does not see), the
processes it waits for (git, the bwrap probe) and its fsyncs; the rest is its own work.
What is left over 3x once imports are gone is the floor those processes set. Last, one run
with ``PYTHONPROFILEIMPORTTIME=1`` lists which heavy modules each command imports
(GitPython, PyYAML, ``importlib.metadata``, ``anthropic``). Cross-check by hand:
``/usr/bin/time -v octopoid list`` in a project.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

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


class Run(NamedTuple):
    wall: float  #: seconds, from start to reaped
    rss: float  #: peak MiB
    code: int
    cpu: float  #: user + sys seconds, the processes it waited for included


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> Run:
    """One run, output thrown away.

    Peak RSS comes from ``/usr/bin/time -f %M`` (psutil polling without it): the child's own
    ``ru_maxrss`` would count this process, which it was forked from. The wrapper's own
    exec (about a millisecond) is in every row alike, ``python -c pass`` included. CPU comes
    from ``wait4``: on a loaded machine it moves less than the wall time does.
    """
    with tempfile.TemporaryDirectory() as tmp:
        rss_file = Path(tmp) / "rss"
        wrapped = [TIME, "-f", "%M", "-o", str(rss_file), *argv] if TIME else argv
        start = time.perf_counter()
        child = subprocess.Popen(
            wrapped, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        status, usage, polled = wait(child.pid)
        wall = time.perf_counter() - start
        rss_kib = int(rss_file.read_text().split()[-1]) if TIME else polled
    cpu = usage.ru_utime + usage.ru_stime
    return Run(wall, rss_kib / 1024, os.waitstatus_to_exitcode(status), cpu)


def wait(pid: int) -> tuple[int, resource.struct_rusage, int]:
    """Reap ``pid``: (status, its usage, peak RSS KiB seen by polling; 0 when not polling)."""
    if TIME:
        return (*os.wait4(pid, 0)[1:], 0)
    import psutil

    proc, peak = psutil.Process(pid), 0
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            return status, usage, peak
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


def scratch_project(root: Path, script: str, code: Path) -> None:
    """A git repository that the octopoid in ``code`` set up, with TASK-1 waiting and a
    branch of its to diff."""
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com"]
    root.mkdir()
    env = with_code(clean_env(), code)
    for argv in (
        [*git, "init", "-q", "-b", "main"],
        [*git, "commit", "-q", "--allow-empty", "-m", "start"],
        [script, "init"],
        [script, "enqueue", "a task to show", "--context", "Some context."],
        [*git, "checkout", "-q", "-b", "agent/TASK-1"],
    ):
        subprocess.run(argv, cwd=root, env=env, check=True, capture_output=True)
    (root / "work.txt").write_text("one line of work\n")
    for argv in (
        [*git, "add", "work.txt"],
        [*git, "commit", "-q", "-m", "work"],
        [*git, "checkout", "-q", "main"],
    ):
        subprocess.run(argv, cwd=root, check=True, capture_output=True)


HERE = Path(__file__).resolve().parent.parent  # this checkout: the new code
NEW, OLD = "new", "old"
Key = tuple[str, str, str]  # (command, mode, version)
Timings = dict[Key, list[Run]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed rounds")
    parser.add_argument("--old", metavar="REV", help="also time this git revision's code")
    parser.add_argument("--new", metavar="REV", help="time this revision, not the checkout")
    parser.add_argument("--probes", type=int, default=3, help="runs of the where-time-goes probe")
    parser.add_argument("--commands", help="only these, comma-separated (e.g. status,diff)")
    parser.add_argument("--no-source", action="store_true", help="time with bytecode only")
    args = parser.parse_args()
    chosen = args.commands.split(",") if args.commands else list(COMMANDS)
    unknown = set(chosen) - set(COMMANDS)
    if unknown:
        parser.error(f"no such command here: {', '.join(sorted(unknown))}")

    script, load_before = octopoid_script(), load()
    scratch = Path(
        tempfile.mkdtemp(prefix="octopoid-bench-startup-", dir=os.environ.get("BENCH_DIR"))
    )
    try:
        codes = {NEW: archive(args.new, scratch / "new-code") if args.new else HERE}
        if args.old:
            codes[OLD] = archive(args.old, scratch / "old-code")
        roots = {version: scratch / f"project-{version}" for version in codes}
        for version, root in roots.items():
            scratch_project(root, script, codes[version])
        envs = mode_envs(scratch)
        if args.no_source:
            del envs["source"]
        commands = {PASS: [sys.executable, "-c", "pass"]}
        commands.update({f"octopoid {n}": [script, *COMMANDS[n]] for n in chosen})
        timings = time_commands(commands, envs, codes, roots, args.runs)
        named = {name: argv for name, argv in commands.items() if name != PASS}
        probe_env = with_code(envs["bytecode"], codes[NEW])
        probes = {
            name: probe(argv, roots[NEW], probe_env, args.probes) for name, argv in named.items()
        }
        checks = {name: imports_of(argv, roots[NEW], probe_env) for name, argv in named.items()}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    cpus = f"{os.cpu_count()} cpus, load {load_before} before, {load()} after"
    print(f"{script}, python {sys.version.split()[0]}, {cpus}")
    verdicts = report_times(timings, args.runs, args.old)
    report_probes(probes, timings)
    report_imports(checks)
    print(f"\nSummary: each command <= {RATIO_TARGET:g}x {PASS} with bytecode, exit 0")
    failed = [name for name, ok, _ in verdicts if not ok]
    print(f"{len(verdicts) - len(failed)} of {len(verdicts)} PASS; over: {', '.join(failed)}")
    by_cpu = [name for name, _, ok in verdicts if not ok]  # steadier on a loaded machine
    print(f"by CPU (user + sys): {len(verdicts) - len(by_cpu)} PASS; over: {', '.join(by_cpu)}")


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def archive(rev: str, where: Path) -> Path:
    """``rev``'s tree, unpacked at ``where`` (no worktree: the repository is left as it is)."""
    where.mkdir()
    tar = subprocess.run(
        ["git", "-C", str(HERE), "archive", "--format=tar", rev], check=True, capture_output=True
    )
    subprocess.run(["tar", "-x", "-C", str(where)], input=tar.stdout, check=True)
    return where


def with_code(env: dict[str, str], code: Path) -> dict[str, str]:
    """``env`` running the octopoid in ``code`` (its ``orchestrator`` first on the path)."""
    return {**env, "PYTHONPATH": str(code)}


def time_commands(
    commands: dict[str, list[str]],
    envs: dict[str, dict[str, str]],
    codes: dict[str, Path],
    roots: dict[str, Path],
    runs: int,
) -> Timings:
    """Every (command, mode, version) once to warm up, then ``runs`` rotating rounds of all
    of them; ``python -c pass`` once per mode in each round."""
    keys = [
        (name, mode, version)
        for mode in envs
        for version in codes
        for name in commands
        if name != PASS or version == NEW
    ]

    def one(key: Key) -> Run:
        name, mode, version = key
        return run(commands[name], roots[version], with_code(envs[mode], codes[version]))

    for key in keys:
        one(key)  # warm-up: the bytecode cache, files cached
    timings: Timings = {key: [] for key in keys}
    for i in range(runs):
        shift = i * len(keys) // runs
        for key in keys[shift:] + keys[:shift]:
            timings[key].append(one(key))
    return timings


def paired(timings: Timings, key: Key, base: Key, cpu: bool = False) -> list[float]:
    """Per-round ratios of ``key``'s runs to ``base``'s, wall time or CPU."""
    pairs = zip(timings[key], timings[base], strict=True)
    return [a.cpu / b.cpu if cpu else a.wall / b.wall for a, b in pairs]


def spread(ratios: list[float]) -> str:
    return f"{statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]"


def report_times(timings: Timings, runs: int, old: str | None) -> list[tuple[str, bool, bool]]:
    """One table per mode, a row per command, wall time then CPU; (command, within target
    with bytecode, the new code and exit 0: by wall time, by CPU)."""
    verdicts = []
    names = dict.fromkeys(name for name, _, _ in timings)
    versions = (NEW, OLD) if old else (NEW,)
    for mode in dict.fromkeys(mode for _, mode, _ in timings):
        print(f"\n{mode}: whole process, {runs} rounds after one warm-up each; x pass: per-round")
        print(f"ratio to the same round's `{PASS}`, median [min-max]; CPU: user + sys")
        head = f"{'command':<26}{'new ms':>8}{'new x pass':>19}{'CPU x pass':>19}"
        if old:
            head += f"{'old ms':>8}{'old x pass':>19}{'CPU x pass':>19}"
            head += f"{'new / old':>19}{'CPU new / old':>19}"
        print(head + f"{'RSS MiB':>8}{'exit':>5}")
        base = (PASS, mode, NEW)
        for name in names:
            line, rows = f"{name:<26}", []
            for version in versions:
                key = (name, mode, version)
                if key not in timings:  # `python -c pass` runs once a round, as "new"
                    line += " " * 46
                    continue
                rows += timings[key]
                line += f"{statistics.median(r.wall for r in timings[key]) * 1e3:>8.1f}"
                line += f"{spread(paired(timings, key, base)):>19}"
                line += f"{spread(paired(timings, key, base, cpu=True)):>19}"
            if old:
                now, then = (name, mode, NEW), (name, mode, OLD)
                line += f"{spread(paired(timings, now, then)):>19}" if then in timings else " " * 19
                cpu = spread(paired(timings, now, then, cpu=True)) if then in timings else ""
                line += f"{cpu:>19}"
            codes = ",".join(map(str, sorted({r.code for r in rows})))
            print(line + f"{max(r.rss for r in rows):>8.1f}{codes:>5}")
            if name != PASS and mode == "bytecode":
                key = (name, mode, NEW)
                ok = {r.code for r in timings[key]} == {0}
                wall = statistics.median(paired(timings, key, base))
                cpu = statistics.median(paired(timings, key, base, cpu=True))
                verdicts.append((name, ok and wall <= RATIO_TARGET, ok and cpu <= RATIO_TARGET))
    return verdicts


#: Runs one command in this process and says where its time went, as one JSON line on
#: stderr: module bodies (timed at the loaders, so lazy modules count), child processes
#: (from start to reaped) and fsyncs, in seconds.
PROBE = """
import json, os, subprocess, sys, time
from importlib import _bootstrap_external as loaders
start, depth, spent = time.perf_counter(), [0], {"imports": 0.0, "children": 0.0, "fsync": 0.0}
children = []

def timing(cls):
    inner = cls.exec_module
    def exec_module(self, module):
        depth[0] += 1
        began = time.perf_counter()
        try:
            inner(self, module)
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                spent["imports"] += time.perf_counter() - began
    cls.exec_module = exec_module
timing(loaders.SourceFileLoader)
timing(loaders.SourcelessFileLoader)
timing(loaders.ExtensionFileLoader)

popen_init, popen_wait = subprocess.Popen.__init__, subprocess.Popen.wait
def init(self, args, *rest, **kw):
    self._bench_start = time.perf_counter()
    popen_init(self, args, *rest, **kw)
    self._bench_argv = args
def wait(self, *rest, **kw):
    code = popen_wait(self, *rest, **kw)
    if getattr(self, "_bench_start", None) is not None:
        spent["children"] += time.perf_counter() - self._bench_start
        given = self._bench_argv
        argv = [str(a) for a in given] if isinstance(given, (list, tuple)) else [str(given)]
        words = [a for a in argv[1:] if not a.startswith("-") and "/" not in a and "=" not in a]
        name = os.path.basename(argv[0])
        children.append(f"{name} {words[0]}" if name == "git" and words else name)
        self._bench_start = None
    return code
subprocess.Popen.__init__, subprocess.Popen.wait = init, wait
real_fsync = os.fsync
def fsync(fd):
    began = time.perf_counter()
    real_fsync(fd)
    spent["fsync"] += time.perf_counter() - began
os.fsync = fsync

sys.argv = ["octopoid", *sys.argv[1:]]
try:
    from orchestrator.faces.cli.main import main
    main()
except SystemExit:
    pass
finally:
    sys.stdout.flush()
    spent["total"] = time.perf_counter() - start
    print(json.dumps({**spent, "what": children}), file=sys.stderr)
"""


@dataclass
class Spent:
    """Milliseconds of one command in its own process (medians), and what it waited for."""

    total: float
    imports: float
    children: float
    fsync: float
    waited_for: list[str]

    @property
    def rest(self) -> float:
        return self.total - self.imports - self.children - self.fsync


def probe(argv: list[str], cwd: Path, env: dict[str, str], runs: int) -> Spent:
    """Where ``argv``'s time goes in its own process: medians of ``runs`` runs."""
    found = []
    for _ in range(runs):
        command = [sys.executable, "-c", PROBE, *argv[1:]]
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
        found.append(json.loads(done.stderr.strip().splitlines()[-1]))
    ms = {p: statistics.median(f[p] for f in found) * 1e3 for p in ("total", "imports")}
    ms |= {p: statistics.median(f[p] for f in found) * 1e3 for p in ("children", "fsync")}
    return Spent(**ms, waited_for=found[-1]["what"])


def report_probes(probes: dict[str, Spent], timings: Timings) -> None:
    """Per command: the process's own time split into imports, children, fsync and the
    rest, next to the interpreter's start (the median wall time of ``python -c pass``)."""
    interpreter = statistics.median(r.wall for r in timings[PASS, "bytecode", NEW]) * 1e3
    print("\nWhere the time goes, new code with bytecode (ms, medians, in the process after")
    print(f"the interpreter started; `{PASS}` took {interpreter:.1f} ms in all)")
    head = f"{'command':<28}{'in process':>11}{'imports':>9}{'children':>10}{'fsync':>7}"
    print(head + f"{'rest':>7}  processes waited for")
    for name, s in probes.items():
        line = f"{name:<28}{s.total:>11.1f}{s.imports:>9.1f}{s.children:>10.1f}{s.fsync:>7.1f}"
        print(line + f"{s.rest:>7.1f}  {', '.join(s.waited_for) or '-'}")


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
