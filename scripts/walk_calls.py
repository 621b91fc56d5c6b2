"""The walk of one accept and of one attempt through octopoid's modules (issue 38's method).

Run by hand:  python scripts/walk_calls.py [--sandbox bwrap|none] [--edges]

On a scratch project (a git repository, a command agent that makes one commit) it runs,
in this process and traced with ``sys.setprofile`` (every thread), one attempt
(``roles.implementer.run_attempt`` of a claimed task) and one accept
(``review.verdicts.accept`` of a task a runner submitted). Every module of ``orchestrator``
is imported first, so imports are not part of the walk. For each it prints:

- **modules**: the distinct modules of ``orchestrator`` that ran code;
- **climbs**: distinct calls (caller module -> callee module) into a module of a higher
  layer than the caller's, the layers being pyproject's import-linter ``layers`` contract
  (``faces`` highest; ``queue_utils`` counts as the queue's): a function handed down and
  called back up;
- **re-entries**: distinct calls into a module that is already on the call stack below the
  caller, from another module (going back to a module the walk had left downwards);
- **revisits**: distinct calls into a module the walk had entered and returned from
  before (the same module visited again rather than once, its work done in one go).

Counts are of distinct (caller, callee) module pairs, not of events (a loop calling back
a hundred times is one pair); ``--edges`` lists them.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import subprocess
import sys
import tempfile
import threading
import tomllib
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import FrameType

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))  # this tree's octopoid

AGENT = 'echo walked > "walk-$OCTOPOID_TASK_ID" && git add -A && git commit -q -m walk'


def layers() -> dict[str, int]:
    """Top-level part of ``orchestrator`` -> its layer (0 is the highest)."""
    doc = tomllib.loads((HERE / "pyproject.toml").read_text())
    contract = next(
        c for c in doc["tool"]["importlinter"]["contracts"] if c.get("type") == "layers"
    )
    out = {}
    for n, layer in enumerate(contract["layers"]):
        for part in layer.replace("|", ":").split(":"):
            out[part.strip()] = n
    out["queue_utils"] = out["queue"]
    return out


class Walk:
    """What one traced call made: the modules it ran, the climbs and re-entries."""

    def __init__(self, rank: dict[str, int]) -> None:
        self.rank = rank
        self.modules: Counter[str] = Counter()
        self.climbs: Counter[tuple[str, str]] = Counter()
        self.reentries: Counter[tuple[str, str]] = Counter()
        self.revisits: Counter[tuple[str, str]] = Counter()
        self.stacks: dict[int, list[str]] = {}
        self.left: dict[int, set[str]] = {}  # per thread: modules entered and returned from

    def layer(self, module: str) -> int | None:
        return self.rank.get(module.split(".")[1]) if module.count(".") else None

    def profile(self, frame: FrameType, event: str, arg: object) -> None:
        if event not in ("call", "return"):
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("orchestrator."):
            return
        stack = self.stacks.setdefault(threading.get_ident(), [])
        left = self.left.setdefault(threading.get_ident(), set())
        if event == "return":
            if stack and stack.pop() not in stack:
                left.add(module)
            return
        self.modules[module] += 1
        caller = stack[-1] if stack else None
        if caller is not None and caller != module:
            mine, theirs = self.layer(caller), self.layer(module)
            if mine is not None and theirs is not None and theirs < mine:
                self.climbs[(caller, module)] += 1
            if module in stack:
                self.reentries[(caller, module)] += 1
            elif module in left:
                self.revisits[(caller, module)] += 1
        left.discard(module)
        stack.append(module)

    def trace(self, call: Callable[[], object]) -> object:
        threading.setprofile(self.profile)
        sys.setprofile(self.profile)
        try:
            return call()
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]

    def report(self, name: str, edges: bool) -> None:
        print(
            f"{name}: {len(self.modules)} modules, {len(self.climbs)} climbs, "
            f"{len(self.reentries)} re-entries, {len(self.revisits)} revisits"
        )
        if edges:
            for what, pairs in (
                ("climb", self.climbs), ("re-entry", self.reentries), ("revisit", self.revisits)
            ):  # fmt: skip
                for (a, b), n in sorted(pairs.items()):
                    print(f"  {what:8} {a} -> {b} ({n})")
            print("  modules: " + ", ".join(sorted(self.modules)))


def import_everything() -> None:
    """Every module of ``orchestrator`` imported now, so the walk holds no import."""
    import orchestrator

    for info in pkgutil.walk_packages(orchestrator.__path__, "orchestrator."):
        if info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except Exception:  # an optional library missing (a forge's): not on either walk
            continue


def scratch(sandbox: str) -> Path:
    """A project on a fresh git repository, a command agent that commits once."""
    import yaml

    root = Path(tempfile.mkdtemp(prefix="octopoid-walk-"))
    git = ["git", "-C", str(root)]
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    for key, value in (("user.name", "walk"), ("user.email", "walk@example.invalid")):
        subprocess.run([*git, "config", key, value], check=True)
    (root / "README.md").write_text("# walk\n")
    subprocess.run([*git, "add", "README.md"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "init"], check=True)
    os.environ["OCTOPOID_ROOT"] = str(root)
    os.chdir(root)
    from orchestrator.faces.scaffold import init_project

    init_project(root)
    agent = {"name": "walker", "role": "implement", "backend": "command"}
    agent["argv"] = ["bash", "-c", AGENT]
    (root / ".octopoid/agents.yaml").write_text(yaml.safe_dump({"agents": [agent]}))
    (root / ".octopoid/config.yaml").write_text(yaml.safe_dump({"sandbox": {"mode": sandbox}}))
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sandbox", default="none", choices=["bwrap", "none"])
    parser.add_argument("--edges", action="store_true", help="list the pairs counted")
    args = parser.parse_args()
    scratch(args.sandbox)
    import_everything()
    from orchestrator.queue import machine as q
    from orchestrator.review import verdicts
    from orchestrator.roles.implementer import run_attempt

    rank = layers()
    for n in range(2):  # the first pair warms what runs once per process (caches, pools)
        q.create_task(f"walk {n}")
        task = q.claim_task(None, "walker")
        attempt = Walk(rank)
        token = task.headers["CLAIM_TOKEN"]
        report = attempt.trace(partial(run_attempt, task.id, "walker", token))
        if report.next_state != "provisional":
            raise SystemExit(f"the attempt ended in {report.next_state}: {report.reason}")
        accept = Walk(rank)
        accept.trace(partial(verdicts.accept, task.id, "walker"))
    attempt.report("attempt", args.edges)
    accept.report("accept", args.edges)


if __name__ == "__main__":
    main()
