"""`octopoid list` and `status` on big queues, this code against an older one, in one run.

Run by hand:  python scripts/bench_list.py [--old REV] [--waiting 10000,50000] [--done 50000]
              [--runs 5]

For each size, three projects: an empty one and two big ones (``--done`` tasks in done/,
``--waiting`` in incoming/, written straight into the folders as bench_status.py does), one
for this checkout's code and one for ``--old`` (a git worktree of REV, run with PYTHONPATH;
each version keeps its own claim index, so neither rebuilds the other's). After
`doctor --rebuild` and a warm-up, each command runs ``--runs`` times, interleaved: empty,
old, new, empty, old, new... Medians with min and max; the ratio is to the empty project
run by the same code. Peak RSS from /usr/bin/time. The machine may be shared: read ratios.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_status import Run, fill, run

from orchestrator.faces.scaffold import init_project

HERE = Path(__file__).resolve().parent.parent


def worktree(rev: str, where: Path) -> Path:
    subprocess.run(
        ["git", "-C", str(HERE), "worktree", "add", "-q", "--detach", str(where), rev], check=True
    )
    return where


def timed(code: Path, command: list[str], root: Path) -> Run:
    """``octopoid COMMAND`` in ``root``, run by the code in ``code`` (PYTHONPATH)."""
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(code)
    try:
        return run([sys.executable, "-m", "orchestrator.faces.cli.main", *command], root)
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before


def spread(runs: list[Run]) -> tuple[float, float, float, float, float]:
    """Median, min and max wall seconds, median CPU seconds, peak RSS MiB."""
    walls = [r.wall for r in runs]
    cpu = statistics.median(r.cpu for r in runs)
    return statistics.median(walls), min(walls), max(walls), cpu, max(r.rss_mib for r in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", default="HEAD~1", help="the code to compare with (a git rev)")
    parser.add_argument("--waiting", default="10000,50000", help="sizes of incoming/")
    parser.add_argument("--done", type=int, default=0, help="tasks in done/ of each")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--commands", default="list,status", help="of: list, status")
    args = parser.parse_args()
    commands = [[name] for name in args.commands.split(",")]
    scratch = Path(tempfile.mkdtemp(prefix="octopoid-bench-list-"))
    old = worktree(args.old, scratch / "old-code")
    rows = []
    try:
        for size in (int(n) for n in args.waiting.split(",")):
            roots = {name: scratch / f"{name}-{size}" for name in ("empty", "old", "new")}
            for root in roots.values():
                root.mkdir()
                init_project(root)
            for name in ("old", "new"):
                fill(roots[name], args.done, size)
            codes = {"empty-old": old, "empty-new": HERE, "old": old, "new": HERE}
            where = {"empty-old": roots["empty"], "empty-new": roots["empty"]}
            where |= {"old": roots["old"], "new": roots["new"]}
            for name, code in codes.items():
                timed(code, ["doctor", "--rebuild"], where[name])
            for command in commands:
                runs: dict[str, list[Run]] = {name: [] for name in codes}
                for name, code in codes.items():  # warm-up: bytecode, caches
                    timed(code, command, where[name])
                for _ in range(args.runs):
                    for name, code in codes.items():
                        done = timed(code, command, where[name])
                        if done.code != 0:
                            sys.exit(f"{name} {command} failed: {done.err}")
                        runs[name].append(done)
                for name in ("old", "new"):
                    med, low, high, cpu, rss = spread(runs[name])
                    empty = spread(runs[f"empty-{name}"])
                    ratios = (med / empty[0], cpu / empty[3])
                    rows.append((size, " ".join(command), name, med, low, high, *ratios, rss))
    finally:
        subprocess.run(["git", "-C", str(HERE), "worktree", "remove", "--force", str(old)])
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"\n{args.runs} runs each, interleaved; old = {args.old}; {args.done:,} done in each")
    print(
        "| waiting | command | code | median s | min | max | x empty (wall) | x empty (CPU) "
        "| peak MiB |"
    )
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|")
    for size, command, name, med, low, high, wall_x, cpu_x, rss in rows:
        print(
            f"| {size:,} | {command} | {name} | {med:.3f} | {low:.3f} | {high:.3f} "
            f"| {wall_x:.2f}x | {cpu_x:.2f}x | {rss:.0f} |"
        )


if __name__ == "__main__":
    main()
