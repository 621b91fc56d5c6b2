"""Workspace benchmark: a task's own clone against `git worktree add`, side by side.

Run by hand:  python scripts/bench_workspaces.py [--files 50000] [--runs 5]
Makes a scratch repository with ``--files`` files (one commit), then, alternating run by
run so both see the same machine: ``git worktree add`` of a new branch (what
``sandbox: none`` does) and ``clone.make`` (what ``sandbox: bwrap`` does: a clone sharing
the objects, checked out, alternates pointed where boxes see them), each removed after.
Also times reading a clone's branch back as data (one new commit, through a boxed
``git upload-pack``) and a box around ``true`` against ``true`` alone.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import git

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestrator.box import bwrap, clone
from orchestrator.box.bwrap import Mounts, command_line


def repository(root: Path, files: int) -> git.Repo:
    """A repository of ``files`` small files in folders of 100, committed once."""
    repo = git.Repo.init(root, initial_branch="main")
    with repo.config_writer() as cfg:
        cfg.set_value("user", "name", "bench")
        cfg.set_value("user", "email", "bench@example.invalid")
    for n in range(files):
        folder = root / "src" / f"pkg{n // 100:04d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"module{n % 100:02d}.py").write_text(f"VALUE = {n}\n" + "# padding\n" * 4)
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(root), "commit", "-q", "-m", "many files"], check=True)
    return repo


def timed(action: Callable[..., object], *args: object) -> float:
    """Seconds ``action(*args)`` takes, starting from written-back disks (the previous
    run's 50,000 removed files must not be flushed on this one's time)."""
    os.sync()
    started = time.perf_counter()
    action(*args)
    return time.perf_counter() - started


def row(name: str, samples: list[float]) -> str:
    return (
        f"{name:<44}{min(samples) * 1e3:>9.0f}{statistics.median(samples) * 1e3:>9.0f}"
        f"{max(samples) * 1e3:>9.0f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    problem, userns = bwrap.probe()
    if problem:
        raise SystemExit(problem)
    with tempfile.TemporaryDirectory(prefix="octopoid-bench-") as scratch:
        root = Path(scratch) / "proj"
        print(f"making a repository of {args.files} files ...", flush=True)
        repo = repository(root, args.files)
        worktrees, clones, reads, boxes, bare = [], [], [], [], []
        for run in range(args.runs):
            wt = Path(scratch) / f"wt{run}"
            worktrees.append(timed(repo.git.worktree, "add", "-q", "-b", f"w{run}", str(wt)))
            repo.git.worktree("remove", "--force", str(wt))
            repo.git.branch(f"agent/TASK-{run}", "main")
            dest = Path(scratch) / f"clone{run}"
            sha = repo.commit("main").hexsha
            clones.append(timed(clone.make, repo, str(run), "main", sha, dest))
            mounts = Mounts(dest, dest, (root,), clone.object_mounts(repo), False)
            in_box = command_line(bwrap.find_bwrap(), mounts, userns)
            subprocess.run(
                [*in_box, "git", "-c", "user.name=b", "-c", "user.email=b@x", "commit", "-q",
                 "--allow-empty", "-m", "work"], check=True,
            )  # fmt: skip
            readback = Mounts(dest, dest, (root,), clone.object_mounts(repo), False, False)
            box = command_line(bwrap.find_bwrap(), readback, userns)
            reads.append(timed(clone.read_back, repo, str(run), dest, box))
            boxes.append(timed(subprocess.run, [*in_box, "true"]))
            bare.append(timed(subprocess.run, ["true"]))
            subprocess.run(["rm", "-rf", str(dest)], check=True)
    print(f"\n{args.files} files, {args.runs} runs each, alternating (ms)")
    print(f"{'':<44}{'min':>9}{'median':>9}{'max':>9}")
    print(row("git worktree add -b (sandbox: none)", worktrees))
    print(row("clone.make (sandbox: bwrap)", clones))
    print(row("clone.read_back, one new commit", reads))
    print(row("bwrap box around true", boxes))
    print(row("true alone", bare))
    ratio = statistics.median(clones) / statistics.median(worktrees)
    print(f"\nclone / worktree, medians: {ratio:.2f}x")
    overhead = statistics.median(boxes) - statistics.median(bare)
    print(f"box overhead, medians: {overhead * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
