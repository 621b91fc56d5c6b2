"""Queue benchmark: lifecycle throughput, the fsync bound, claim latency, restart.

Run by hand:  python scripts/bench_queue.py [--mode all] [--tasks 400]
              [--depths 1000,10000,50000] [--claims 500] [--rate 50] [--restarts 3]
Needs the bench extra (pip install -e '.[bench]'); uses ``strace`` when installed to count
syscalls. BENCH_DIR=<dir> puts the scratch projects on another disk; BENCH_KEEP=1 keeps them.
Everything a ratio compares is measured side by side in this one run, so it holds on a
shared, noisy machine. With the defaults it takes a few minutes (longer while claims are
slow: the steady mode claims back to back once a claim takes longer than 1/rate).

``--mode`` takes one or more of (comma separated; ``all`` is the first four):

- ``throughput``: tasks/s of a whole lifecycle. octopoid: create -> claim -> submit ->
  accept, 1 and 4 processes durable, and 1 process with ``durability: relaxed`` in
  config.yaml ("not available" when the config does not accept that key); huey's SQLite
  storage (default settings, and ``fsync=False``): enqueue -> dequeue -> result written ->
  result read; persist-queue ``SQLiteAckQueue`` (auto_commit): put -> get -> ack.
- ``fsync``: counts the fsyncs (of files and of directories), renames and links of one
  durable lifecycle (``strace -f -y`` of a child process, between two marker calls; without
  strace, by wrapping ``os.fsync``/``os.rename`` in this process, which misses SQLite's own
  fsyncs), then replays that syscall sequence on scratch files (each file fsync after
  writing a task-sized file) to get the "fsync bound" rate on the same disk, alternating
  rounds with octopoid's durable lifecycle; the share is the median of the rounds' own
  ratios. Target: octopoid >= 65% of the bound.
- ``steady``: N tasks written straight into incoming/ (setup; the first claim builds the
  index and is reported apart), then one process creates tasks (``create_task``) at a
  steady rate while this one claims at the same rate; claim latency p50/p99 per depth.
  Targets: p50 <= 2 ms and p99 <= 10 ms at the deepest queue, and its p50 <= 1.5x the p50
  of the shallowest. Each claim is followed by its floor: the same file operations alone
  (``skeleton_claim``) timed in a scratch folder under the same producer.
- ``restart``: the deepest queue, index built, then its ``last_reconcile`` aged past the
  60 s reconcile period, and a fresh Python process's first claim timed (after imports).
  A fresh process with a fresh index is the control. Target <= 50 ms.
- ``idle``: the older table: claim latency at each depth with nobody producing.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import multiprocessing as mp
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from orchestrator import config
from orchestrator.faces.scaffold import init_project
from orchestrator.model.exceptions import ConfigError
from orchestrator.model.tasks import TaskState, new_task, render_task, utcnow
from orchestrator.queue import machine as q

ALL_MODES = ("throughput", "fsync", "steady", "restart")
MODES = (*ALL_MODES, "idle")
RECONCILE_AGE_SECONDS = 61  # the issue's "restart more than 60 s after the last reconcile"
MARK_DIR = "/nonexistent-octopoid-bench"  # marker renames that fail, seen by strace
STRACE_CALLS = "fsync,fdatasync,rename,renameat,renameat2,link,linkat,unlink,unlinkat"

# --- projects --------------------------------------------------------------------------------


def fresh_project(relaxed: bool = False) -> Path:
    root = Path(tempfile.mkdtemp(prefix="octopoid-bench-", dir=os.environ.get("BENCH_DIR")))
    init_project(root)
    if relaxed:
        with (root / ".octopoid/config.yaml").open("a", encoding="utf-8") as f:
            f.write("\ndurability: relaxed\n")
    os.environ["OCTOPOID_ROOT"] = str(root)
    return root


@functools.cache
def relaxed_problem() -> str | None:
    """Why ``durability: relaxed`` cannot be used (None: this octopoid's config accepts it)."""
    root = fresh_project(relaxed=True)
    try:
        config.load_config()
    except ConfigError as exc:
        return str(exc).splitlines()[0].split("config.yaml: ", 1)[-1]
    finally:
        discard(root)
    return None


def discard(root: Path) -> None:
    if not os.environ.get("BENCH_KEEP"):
        shutil.rmtree(root, ignore_errors=True)


def fill_incoming(root: Path, depth: int) -> float:
    """Write ``depth`` task files straight into incoming (setup, not measured); seconds taken.

    ``create_task`` would fsync every one of them; these are the same text, written plainly.
    """
    start = time.perf_counter()
    incoming = root / ".octopoid/runtime/queue/incoming"
    base = utcnow() - timedelta(seconds=depth + 60)
    for i in range(1, depth + 1):
        task = new_task(
            str(i),
            f"waiting {i}",
            priority=f"P{i % 4}",
            context="Some context.",
            criteria=["It works."],
            now=base + timedelta(seconds=i),
        )
        (incoming / f"TASK-{i}.md").write_text(render_task(task), encoding="utf-8")
    (root / ".octopoid/runtime/queue/.last_id").write_text(str(depth))
    return time.perf_counter() - start


def percentile(samples: list[float], pct: float) -> float:
    """Nearest-rank percentile of ``samples``."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


# --- lifecycle throughput --------------------------------------------------------------------


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
        q.submit_completion(claimed, 1, 1)  # the claimed Task carries its claim token
        q.accept_completion(claimed.id)  # a person's accept: no token
        done += 1


def _lifecycle_worker(root: str, count: int, go: mp.Event) -> None:
    os.environ["OCTOPOID_ROOT"] = root
    go.wait()
    lifecycle(count)


def bench_lifecycle(total: int, procs: int, relaxed: bool = False) -> float:
    root = fresh_project(relaxed)
    try:
        if procs == 1:
            lifecycle(1)  # untimed: creates the claim index, lock files and notes folder
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
    finally:
        discard(root)


def bench_huey(total: int, fsync: bool | None) -> float:
    """enqueue -> dequeue -> result written -> result read, on huey's SQLite storage."""
    from huey import SqliteHuey

    folder = Path(tempfile.mkdtemp(dir=os.environ.get("BENCH_DIR")))
    extra = {} if fsync is None else {"fsync": fsync}
    storage = SqliteHuey(filename=str(folder / "huey.db"), **extra).storage
    start = time.perf_counter()
    for i in range(total):
        storage.enqueue(f"task {i}".encode())
        assert storage.dequeue() is not None  # huey's dequeue deletes: claim and ack in one
        storage.put_data(f"result-{i}", b"ok")
        assert storage.pop_data(f"result-{i}") == b"ok"
    rate = total / (time.perf_counter() - start)
    shutil.rmtree(folder, ignore_errors=True)
    return rate


def bench_persist_queue(total: int) -> float:
    from persistqueue import SQLiteAckQueue

    path = tempfile.mkdtemp(dir=os.environ.get("BENCH_DIR"))
    queue = SQLiteAckQueue(path, auto_commit=True, multithreading=False)
    start = time.perf_counter()
    for i in range(total):
        queue.put(f"task {i}")
        item = queue.get(block=False)
        queue.ack(item)
    rate = total / (time.perf_counter() - start)
    shutil.rmtree(path, ignore_errors=True)
    return rate


def run_throughput(args: argparse.Namespace, results: dict) -> None:
    one = bench_lifecycle(args.tasks, 1)
    four = bench_lifecycle(args.tasks, 4)
    problem = relaxed_problem()
    relaxed = None if problem else bench_lifecycle(args.tasks, 1, relaxed=True)
    results["relaxed"] = relaxed
    results["relaxed_problem"] = problem
    rows = [
        ("octopoid, 1 process (durable)", one),
        ("octopoid, 4 processes (durable)", four),
        ("octopoid, 1 process (durability: relaxed)", relaxed),
        ("huey SqliteHuey (default settings)", bench_huey(args.tasks, None)),
        ("huey SqliteHuey(fsync=False)", bench_huey(args.tasks, False)),
        ("persist-queue SQLiteAckQueue (auto_commit)", bench_persist_queue(args.tasks)),
    ]
    print(f"\nLifecycle throughput, {args.tasks} tasks in one run")
    print("  octopoid: create -> claim -> submit -> accept (4 moves)")
    print("  huey: enqueue -> dequeue -> put result -> read result; persist-queue: put/get/ack")
    print(f"{'system':<46}{'tasks/s':>10}{'vs octopoid x1':>16}")
    for name, rate in rows:
        if rate is None:
            print(f"{name:<46}{'n/a':>10}{'':>16}  not available: {problem}")
        else:
            print(f"{name:<46}{rate:>10.1f}{rate / one:>16.2f}")
    results["throughput"] = dict(rows)


# --- counting syscalls, and the fsync bound --------------------------------------------------

COUNT_CHILD = r"""
import os, sys
os.environ["OCTOPOID_ROOT"] = sys.argv[1]
from orchestrator.queue import machine as q

def lifecycle(i):
    q.create_task(f"counted {i}")
    task = q.claim_task(None, "counter")
    q.submit_completion(task, 1, 1)
    q.accept_completion(task.id)

def mark(name):
    try:
        os.rename(sys.argv[3] + "/" + name, sys.argv[3] + "/x")
    except OSError:
        pass

lifecycle(0)  # warm-up: index, lock files and notes folder exist after it, as in a daemon
mark("start")
for i in range(int(sys.argv[2])):
    lifecycle(i + 1)
mark("end")
"""

TRACE_LINE = re.compile(r"^(?:\[pid\s+\d+\]\s+|\d+\s+)?(\w+)\((.*\)) += (-?\d+)")
FD_PATH = re.compile(r"^\d+<(.*?)>")


def count_with_strace(root: Path, count: int) -> list[str] | None:
    """The op sequence of ``count`` lifecycles, seen by strace: F/D fsync of a file/dir,
    R rename, L link, U unlink. None when strace is missing or cannot trace here."""
    strace = shutil.which("strace")
    if strace is None:
        return None
    out = root / "strace.txt"
    cmd = [strace, "-f", "-y", "-qq", "-e", f"trace={STRACE_CALLS}", "-e", "signal=none"]
    cmd += ["-o", str(out), sys.executable, "-c", COUNT_CHILD, str(root), str(count), MARK_DIR]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0 or not out.exists():
        print(f"(strace failed: {done.stderr.strip()[-300:]}; counting in-process instead)")
        return None
    ops, inside = [], False
    for line in out.read_text(errors="replace").splitlines():
        if f"{MARK_DIR}/start" in line:
            inside = True
            continue
        if f"{MARK_DIR}/end" in line:
            break
        match = TRACE_LINE.match(line)
        if not inside or match is None or "resumed>" in line:
            continue
        op = classify(match.group(1), match.group(2))
        if op and match.group(3) == "0":  # a call that failed changed nothing
            ops.append(op)
    return ops


def classify(call: str, rest: str) -> str | None:
    if call in ("fsync", "fdatasync"):
        path = FD_PATH.match(rest)
        return "D" if path and os.path.isdir(path.group(1)) else "F"
    if call.startswith("rename"):
        return "R"
    if call.startswith("link"):
        return "L"
    if call.startswith("unlink"):
        return "U"
    return None


def count_in_process(root: Path, count: int) -> list[str]:
    """The op sequence from wrapping os.fsync/rename/replace/link/unlink (Python calls only)."""
    import stat

    os.environ["OCTOPOID_ROOT"] = str(root)
    lifecycle(1)
    ops: list[str] = []
    real = {name: getattr(os, name) for name in ("fsync", "rename", "replace", "link", "unlink")}

    def fsync(fd: int) -> None:
        ops.append("D" if stat.S_ISDIR(os.fstat(fd).st_mode) else "F")
        real["fsync"](fd)

    def wrap(name: str, op: str):
        def call(*a, **kw):
            ops.append(op)
            return real[name](*a, **kw)

        return call

    os.fsync = fsync
    os.rename, os.replace = wrap("rename", "R"), wrap("replace", "R")
    os.link, os.unlink = wrap("link", "L"), wrap("unlink", "U")
    try:
        lifecycle(count)
    finally:
        for name, fn in real.items():
            setattr(os, name, fn)
    return ops


def syscall_profile(count: int, relaxed: bool = False) -> tuple[list[str], str]:
    root = fresh_project(relaxed)
    try:
        ops = count_with_strace(root, count)
        if ops is not None:
            return ops, "strace -f -y (all of the process, SQLite included)"
        return count_in_process(root, count), "wrapped os.* calls (misses SQLite's own fsyncs)"
    finally:
        discard(root)


def per_lifecycle(ops: list[str], count: int) -> dict[str, float]:
    return {op: ops.count(op) / count for op in "FDRLU"}


def skeleton_rate(ops: list[str], count: int, total: int) -> float:
    """Replay ``ops`` (``count`` lifecycles' worth) on scratch files until ``total``
    lifecycles are done; lifecycles per second. Unlinks are not replayed."""
    scratch = Path(tempfile.mkdtemp(prefix="fsync-bound-", dir=os.environ.get("BENCH_DIR")))
    dirs = [scratch / name for name in ("incoming", "claimed", "provisional", "done")]
    for d in dirs:
        d.mkdir()
    data = b"x" * 700  # about a task file
    reps = max(1, math.ceil(total / count))
    n, here, current, pair, turn = 0, 0, None, (0, 0), 0
    start = time.perf_counter()
    for _ in range(reps):
        for op in ops:
            n += 1
            if op == "F" or (op in "RL" and current is None):
                current = dirs[here] / f"f{n}"
                fd = os.open(current, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                os.write(fd, data)
                if op == "F":
                    os.fsync(fd)
                os.close(fd)
            if op in "RL":
                nxt = (here + 1) % len(dirs)
                target = dirs[nxt] / f"m{n}"
                (os.rename if op == "R" else os.link)(current, target)
                current, pair, here, turn = target, (nxt, here), nxt, 0
            elif op == "D":
                fd = os.open(dirs[pair[turn % 2]], os.O_RDONLY | os.O_DIRECTORY)
                os.fsync(fd)
                os.close(fd)
                turn += 1
    rate = reps * count / (time.perf_counter() - start)
    shutil.rmtree(scratch, ignore_errors=True)
    return rate


def run_fsync(args: argparse.Namespace, results: dict) -> None:
    count = args.count_lifecycles
    ops, how = syscall_profile(count)
    each = per_lifecycle(ops, count)
    print(f"\nSyscalls per durable lifecycle (mean of {count}; counted by {how})")
    print(f"{'file fsync':>12}{'dir fsync':>11}{'rename':>8}{'link':>6}{'unlink':>8}")
    print(
        f"{each['F']:>12.2f}{each['D']:>11.2f}{each['R']:>8.2f}{each['L']:>6.2f}{each['U']:>8.2f}"
    )
    problem = relaxed_problem()
    if problem is None:
        loose = per_lifecycle(syscall_profile(count, relaxed=True)[0], count)
        fsyncs = loose["F"] + loose["D"]
        moves = loose["R"] + loose["L"]
        print(f"with durability: relaxed: {fsyncs:.2f} fsyncs, {moves:.2f} renames/links")
        results["relaxed_fsyncs"] = fsyncs
    else:
        print(f"durability: relaxed: not available ({problem})")
    print(
        f"skeleton replays these {each['F'] + each['D']:.2f} fsyncs and "
        f"{each['R'] + each['L']:.2f} renames/links per lifecycle, in octopoid's order"
    )
    bound, octo = [], []
    for _ in range(args.rounds):
        bound.append(skeleton_rate(ops, count, args.round_tasks))
        octo.append(bench_lifecycle(args.round_tasks, 1))
    print(
        f"\nDurable lifecycle vs the fsync bound: {args.rounds} alternating rounds of "
        f"{args.round_tasks} lifecycles each"
    )
    print(f"{'round':>6}{'bound /s':>11}{'octopoid /s':>13}{'octopoid %':>12}")
    shares = [100 * o / b for b, o in zip(bound, octo, strict=True)]
    for i, (b, o, pct) in enumerate(zip(bound, octo, shares, strict=True), 1):
        print(f"{i:>6}{b:>11.1f}{o:>13.1f}{pct:>11.1f}%")
    share = statistics.median(shares)
    print(f"{'median':>6}{statistics.median(bound):>11.1f}{statistics.median(octo):>13.1f}", end="")
    print(f"{share:>11.1f}%  (median of the rounds' own ratios)")
    print(
        "a slow or busy disk raises the share (fsync then dominates both sides): quote it from "
        "a quiet machine, and with the bound's rate beside it"
    )
    results["fsync_share"] = share
    results["fsync_counts"] = each


# --- claim latency: steady producer, idle, restart ------------------------------------------


def _producer(root: str, rate: float, ready, stop, out) -> None:
    os.environ["OCTOPOID_ROOT"] = root
    from orchestrator.queue import machine as pq

    interval, made, latencies = 1 / rate, 0, []
    pq.create_task("producer warm-up")
    ready.set()
    due = time.perf_counter()
    while not stop.is_set():
        start = time.perf_counter()
        pq.create_task(f"produced {made}")
        latencies.append(time.perf_counter() - start)
        made += 1
        due = max(due + interval, time.perf_counter())
        time.sleep(max(0.0, due - time.perf_counter()))
    out.put((made, statistics.median(latencies) if latencies else 0.0))


def build_index(root: Path) -> float:
    """Seconds of the first claim, which builds the claim index from the folder."""
    os.environ["OCTOPOID_ROOT"] = str(root)
    start = time.perf_counter()
    assert q.claim_task(None, "warm") is not None
    return time.perf_counter() - start


def timed_claims(claims: int, rate: float | None, floor: Path | None = None) -> list:
    """Claim latencies; with ``floor``, each claim is paired with a timed skeleton claim
    (``skeleton_claim``) in that scratch folder, before it on odd ticks and after it on even
    ones (the producer's rhythm must not favour either), as (claim, skeleton) pairs."""
    samples, due = [], time.perf_counter()

    def claim() -> float:
        start = time.perf_counter()
        assert q.claim_task(None, "bench") is not None
        return time.perf_counter() - start

    def skeleton(i: int) -> float:
        start = time.perf_counter()
        skeleton_claim(floor, i)
        return time.perf_counter() - start

    for i in range(claims):
        if floor is None:
            samples.append(claim())
        elif i % 2:
            took = skeleton(i)
            samples.append((claim(), took))
        else:
            took = claim()
            samples.append((took, skeleton(i)))
        if rate:
            due = max(due + 1 / rate, time.perf_counter())
            time.sleep(max(0.0, due - time.perf_counter()))
    return samples


def skeleton_floor(claims: int) -> Path:
    """A scratch queue of ``claims`` fsynced task-sized files for ``skeleton_claim``."""
    scratch = Path(tempfile.mkdtemp(prefix="claim-floor-", dir=os.environ.get("BENCH_DIR")))
    for name in ("incoming", "claimed"):
        (scratch / name).mkdir()
    for i in range(claims):
        (scratch / "incoming" / f"TASK-{i}.md").write_bytes(b"x" * 700)
    os.sync()
    return scratch


def skeleton_claim(scratch: Path, i: int) -> None:
    """Exactly a durable claim's file operations and nothing else: the new text staged and
    fsynced beside the target, the current file renamed aside, the staged file renamed in,
    the aside unlinked, both folders fsynced. Its latency is the floor of a claim here."""
    incoming, claimed = scratch / "incoming", scratch / "claimed"
    staged, aside = claimed / f".TASK-{i}.md.new", incoming / f".TASK-{i}.md.old"
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, b"x" * 800)
    os.fsync(fd)
    os.close(fd)
    os.rename(incoming / f"TASK-{i}.md", aside)
    os.rename(staged, claimed / f"TASK-{i}.md")
    os.unlink(aside)
    for folder in (claimed, incoming):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(fd)
        os.close(fd)


def count_rescans() -> list[int] | None:
    """Count this process's claim-index reconciles from now on (a one-item list, updated);
    None when the store has no ``index.reconcile`` to count."""
    index = getattr(q.get_store(), "index", None)
    real = getattr(index, "reconcile", None)
    if real is None:
        return None
    counter = [0]

    def counted(*args, **kwargs):
        counter[0] += 1
        return real(*args, **kwargs)

    index.reconcile = counted  # this store instance only; the project is thrown away after
    return counter


def steady_depth(depth: int, args: argparse.Namespace) -> dict:
    root = fresh_project()
    try:
        fill = fill_incoming(root, depth)
        build = build_index(root)
        rescans = count_rescans()
        spawn = mp.get_context("spawn")
        ready, stop, out = spawn.Event(), spawn.Event(), spawn.Queue()
        producer = spawn.Process(target=_producer, args=(str(root), args.rate, ready, stop, out))
        producer.start()
        assert ready.wait(60), "the producer did not start"
        floor = skeleton_floor(args.claims)
        start = time.perf_counter()
        pairs = timed_claims(args.claims, args.rate, floor)
        elapsed = time.perf_counter() - start
        stop.set()
        shutil.rmtree(floor, ignore_errors=True)
        samples, skeleton = [c for c, _ in pairs], [f for _, f in pairs]
        made, create_p50 = out.get(timeout=60)
        producer.join(60)
        return {
            "depth": depth,
            "fill": fill,
            "build": build,
            "p50": statistics.median(samples),
            "p99": percentile(samples, 99),
            "max": max(samples),
            "floor_p50": statistics.median(skeleton),
            "floor_p99": percentile(skeleton, 99),
            "made_rate": made / elapsed,
            "create_p50": create_p50,
            "rescans": rescans[0] if rescans else None,
        }
    finally:
        discard(root)


def run_steady(args: argparse.Namespace, results: dict) -> None:
    rows = [steady_depth(depth, args) for depth in args.depth_list]
    print(
        f"\nClaim latency, steady producer: {args.claims} claims at {args.rate:g}/s per depth "
        f"while another process creates tasks at {args.rate:g}/s"
    )
    head = f"{'waiting':>9}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}"
    head += f"{'floor p50':>11}{'floor p99':>11}"
    print(head + f"{'index build s':>15}{'rescans':>9}{'created /s':>12}{'create p50 ms':>15}")
    for r in rows:
        line = f"{r['depth']:>9}{r['p50'] * 1e3:>9.2f}{r['p99'] * 1e3:>9.2f}{r['max'] * 1e3:>9.2f}"
        line += f"{r['floor_p50'] * 1e3:>11.2f}{r['floor_p99'] * 1e3:>11.2f}"
        line += f"{r['build']:>15.2f}{'?' if r['rescans'] is None else r['rescans']:>9}"
        print(line + f"{r['made_rate']:>12.1f}{r['create_p50'] * 1e3:>15.2f}")
    print("rescans: claims (of those timed) that re-listed incoming/ because the index was stale")
    print(
        "floor: right after each claim, the same file operations alone (stage+fsync, rename "
        "aside, rename in, unlink, fsync both folders) in a scratch folder on the same disk"
    )
    results["steady"] = rows


def run_idle(args: argparse.Namespace, results: dict) -> None:
    print(f"\nClaim latency, nobody producing ({args.claims} claims back to back per depth)")
    print(f"{'waiting':>9}{'p50 ms':>9}{'p99 ms':>9}{'index build s':>15}")
    for depth in args.depth_list:
        root = fresh_project()
        try:
            fill_incoming(root, depth)
            build = build_index(root)
            samples = timed_claims(args.claims, None)
        finally:
            discard(root)
        p50, p99 = statistics.median(samples) * 1e3, percentile(samples, 99) * 1e3
        print(f"{depth:>9}{p50:>9.2f}{p99:>9.2f}{build:>15.2f}")


RESTART_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from orchestrator.queue import machine as q
t1 = time.perf_counter()
if sys.argv[1] == "warm":  # build the secret scanner a first History line needs, untimed
    try:
        from orchestrator.base.redaction import redact
        redact("warm up")
    except ImportError:
        pass
t2 = time.perf_counter()
first = q.claim_task(None, "restarted")
t3 = time.perf_counter()
second = q.claim_task(None, "restarted")
t4 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "first": t3 - t2, "second": t4 - t3,
                  "ok": first is not None and second is not None}))
"""


def index_files(root: Path) -> list[Path]:
    """SQLite files under the queue folder (the claim index, and whatever sits beside it)."""
    queue = root / ".octopoid/runtime/queue"
    found = [p for p in queue.rglob("*") if p.is_file() and not p.name.endswith(("-wal", "-shm"))]
    return [p for p in found if p.read_bytes()[:16] == b"SQLite format 3\x00"]


def meta_last_reconcile(path: Path, age: float | None = None) -> float | None:
    """The ``last_reconcile`` meta value (a Unix time) of one SQLite file; with ``age``,
    first set it to ``age`` seconds ago. None when the file has no such row."""
    conn = sqlite3.connect(path, timeout=30)
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'last_reconcile'").fetchone()
        if row is None:
            return None
        value = float(row[0])  # refuse a format this script does not know
        if age is not None:
            value = time.time() - age
            conn.execute("UPDATE meta SET value = ? WHERE key = 'last_reconcile'", (str(value),))
            conn.commit()
        return value
    except (sqlite3.Error, ValueError):
        return None
    finally:
        conn.close()


def age_last_reconcile(root: Path, seconds: float) -> bool:
    """Make the index's last reconcile ``seconds`` old; False if no index has one.

    Only ever run while no process has the index open (this process never opens it)."""
    return any([meta_last_reconcile(p, seconds) is not None for p in index_files(root)])


def last_reconcile(root: Path) -> float | None:
    values = [meta_last_reconcile(p) for p in index_files(root)]
    return max((v for v in values if v is not None), default=None)


def restart_claim(root: Path, warm: bool = False) -> dict:
    """A fresh Python process: imports, then two claims; their times, from inside it."""
    env = {**os.environ, "OCTOPOID_ROOT": str(root)}
    how = "warm" if warm else "cold"
    done = subprocess.run(
        [sys.executable, "-c", RESTART_CHILD, how], env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"restart child failed: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def aged_restart(root: Path, warm: bool) -> tuple[dict, str] | None:
    """Age the last reconcile past the period, restart, claim; None if it cannot be aged."""
    if not age_last_reconcile(root, RECONCILE_AGE_SECONDS + 1):
        return None
    before = time.time()
    run = restart_claim(root, warm)
    after = last_reconcile(root)
    return run, "yes" if after is not None and after >= before else "no"


def run_restart(args: argparse.Namespace, results: dict) -> None:
    depth, age = max(args.depth_list), RECONCILE_AGE_SECONDS + 1
    root = fresh_project()
    try:
        fill = fill_incoming(root, depth)
        build = restart_claim(root)  # the index is built by a process that then exits
        rows = [("fresh index (control)", restart_claim(root), "-")]
        aged_runs: list[float] = []
        for i in range(args.restarts):
            aged = aged_restart(root, warm=False)
            if aged is None:
                results["restart_problem"] = "no last_reconcile in the index's meta table to age"
                break
            rows.append((f"last reconcile {age}s ago, #{i + 1}", *aged))
            aged_runs.append(aged[0]["first"])
        warm = aged_restart(root, warm=True)
        if warm is not None:
            rows.append((f"last reconcile {age}s ago, scanner warm", *warm))
    finally:
        discard(root)
    print(
        f"\nRestart with {depth} waiting (files written in {fill:.1f}s; index built by a first "
        f"claim in {build['first']:.2f}s, in a process that then exited)"
    )
    print("A fresh Python process's first claim, timed inside it after its imports")
    print(f"{'case':<40}{'first claim ms':>16}{'second ms':>11}{'imports ms':>12}{'rescan':>8}")
    for name, run, ran in rows:
        line = f"{name:<40}{run['first'] * 1e3:>16.2f}{run['second'] * 1e3:>11.2f}"
        print(line + f"{run['import'] * 1e3:>12.1f}{ran:>8}")
    if warm is not None:
        print(
            "(scanner warm: redact() was called before the timed claim, so the secret scanner "
            "a claim's History line needs is built; the row shows the claim without that setup)"
        )
    if results.get("restart_problem"):
        print(f"aged restart not measured: {results['restart_problem']}")
    results["restart"] = statistics.median(aged_runs) if aged_runs else None
    results["restart_depth"] = depth


# --- report ----------------------------------------------------------------------------------


def summary(results: dict) -> None:
    rows: list[tuple[str, str, str, str]] = []

    def add(name: str, shown: str, target: str, ok: bool | None) -> None:
        rows.append((name, shown, target, "n/a" if ok is None else ("PASS" if ok else "FAIL")))

    if results.get("steady"):
        deep, shallow = results["steady"][-1], results["steady"][0]
        where = f"{deep['depth']:,} waiting, steady producer"
        add(f"claim p50, {where}", f"{deep['p50'] * 1e3:.2f} ms", "<= 2 ms", deep["p50"] <= 0.002)
        add(f"claim p99, {where}", f"{deep['p99'] * 1e3:.2f} ms", "<= 10 ms", deep["p99"] <= 0.01)
        ratio = deep["p50"] / shallow["p50"]
        versus = f"claim p50 {deep['depth']:,} / p50 {shallow['depth']:,}"
        add(versus, f"{ratio:.2f}x", "<= 1.5x", ratio <= 1.5)
        floor = f"{deep['floor_p50'] * 1e3:.2f} ms"
        rows.append(("  its floor: the claim's file operations alone, p50", floor, "", "info"))
    if "restart" in results:
        value = results["restart"]
        name = f"first claim after restart, {results['restart_depth']:,} waiting, index stale"
        if value is None:
            add(name, "not measured", "<= 50 ms", None)
        else:
            add(name, f"{value * 1e3:.1f} ms", "<= 50 ms", value <= 0.050)
    if "fsync_share" in results:
        share = results["fsync_share"]
        add("durable lifecycle, % of the fsync bound", f"{share:.1f}%", ">= 65%", share >= 65)
    if "throughput" in results:
        relaxed = results["relaxed"]
        shown = "not available" if relaxed is None else f"{relaxed:.1f} tasks/s"
        rows.append(("lifecycle, durability: relaxed", shown, "(vs huey, pq above)", "info"))
    if rows:
        print("\nSummary against the issue's targets")
        print(f"{'measure':<62}{'value':>14}{'target':>22}")
        for name, value, target, ok in rows:
            print(f"{name:<62}{value:>14}{target:>22}  {ok}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", default="all", help=f"all, or any of {', '.join(MODES)}")
    parser.add_argument("--tasks", type=int, default=400, help="lifecycles per throughput row")
    parser.add_argument("--depths", default="1000,10000,50000", help="tasks waiting in incoming")
    parser.add_argument("--claims", type=int, default=500, help="timed claims per depth")
    parser.add_argument("--rate", type=float, default=50, help="creates/s and claims/s (steady)")
    parser.add_argument("--restarts", type=int, default=3, help="aged restarts to time")
    parser.add_argument("--rounds", type=int, default=7, help="fsync bound vs octopoid rounds")
    parser.add_argument("--round-tasks", type=int, default=150, help="lifecycles per round")
    parser.add_argument("--count-lifecycles", type=int, default=20, help="lifecycles traced")
    args = parser.parse_args()
    modes: list[str] = []
    for mode in args.mode.split(","):
        modes += [m for m in (ALL_MODES if mode == "all" else [mode]) if m not in modes]
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"unknown mode {', '.join(sorted(unknown))}; choose from {', '.join(MODES)}")
    args.modes = modes
    args.depth_list = sorted(int(d) for d in args.depths.split(","))
    return args


def main() -> None:
    args = parse_args()
    results: dict = {}
    where = os.environ.get("BENCH_DIR") or tempfile.gettempdir()
    print(f"octopoid queue benchmark: {', '.join(args.modes)}")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, scratch projects in {where}")
    runners = {
        "throughput": run_throughput,
        "fsync": run_fsync,
        "steady": run_steady,
        "restart": run_restart,
        "idle": run_idle,
    }
    for mode in args.modes:
        runners[mode](args, results)
    summary(results)


if __name__ == "__main__":
    sys.exit(main())
