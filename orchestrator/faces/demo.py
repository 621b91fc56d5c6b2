"""`octopoid demo`: the whole loop on a scratch repository, with a scripted agent.

It makes a small git repository, runs ``init``, enqueues three tasks and runs the real
scheduler (real runner processes, each attempt in its own clone behind bubblewrap where it
works, real retry notes, a real check). One
task fails on its first attempt after printing a clue; another commits work the project's
check rejects. Each second attempt finds what went wrong in its prompt and commits the
fix. Then it accepts everything and shows the merged history. It exits non-zero unless
every step really happened.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from .. import box as sandbox
from .. import config
from ..daemon.scheduler import Scheduler
from ..model.exceptions import OctopoidError
from ..model.tasks import TaskState
from ..queue import machine as queue_utils
from ..review import scratch
from ..review import verdicts as review
from . import demo_agent
from .scaffold import init_project

TASKS = [
    ("Add a greeting module", "Create greeting.py with greet(name)."),
    ("Add a farewell module", "Create farewell.py with farewell(name)."),
    ("Make the clock use UTC", "clock.now() returns local time; the tests expect UTC."),
]
DEADLINE_SECONDS = 90
CHECK = """\
from pathlib import Path

if Path("farewell.py").exists():
    from farewell import farewell

    got = farewell("Ann")
    want = "Goodbye, Ann."
    assert got == want, f"CHECK-CLUE: farewell('Ann') must be {want!r}, not {got!r}"
print("check passed")
"""


CLOCK = "from datetime import datetime\n\n\ndef now() -> datetime:\n    return datetime.now()\n"


def configure(root: Path) -> str:
    """The demo's agents.yaml and config.yaml; what the sandbox is (bubblewrap where it
    works; elsewhere the scripted agent, which octopoid ships, runs unsandboxed)."""
    agents = {
        "lease_seconds": 60,
        "shutdown_grace_seconds": 5,
        "agents": [
            {
                "name": "demo-agent",
                "role": "implement",
                "backend": "command",
                "argv": [sys.executable, demo_agent.__file__],
                "max_concurrent": 2,
                "timeout_seconds": 60,
            }
        ],
    }
    (root / ".octopoid" / "agents.yaml").write_text(yaml.safe_dump(agents, sort_keys=False))
    walls = "none" if sandbox.bwrap.probe()[0] else "bwrap"
    settings = {
        "sandbox": walls,
        "checks": {"commands": [f"{sys.executable} check.py"], "timeout_seconds": 30},
    }
    (root / ".octopoid" / "config.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
    return walls


def run_demo(workdir: Path | None, say: Callable[[str], None]) -> tuple[Path, list[str]]:
    """Run the demo; return its project folder (left for a look around) and the list of
    problems (empty when the loop really worked)."""
    root = Path(workdir or tempfile.mkdtemp(prefix="octopoid-demo-")).resolve()
    if root.exists() and any(root.iterdir()):
        raise OctopoidError(f"{root} is not empty; the demo needs a new or empty directory")
    root.mkdir(parents=True, exist_ok=True)
    os.environ[config.ROOT_ENV] = str(root)
    say(f"demo project: {root}")
    scratch.make_project(root, {"clock.py": CLOCK, "check.py": CHECK})
    init_project(root)
    walls = configure(root)
    say("ran `octopoid init`; agent: a scripted command agent (no API key needed)")
    if walls == "bwrap":
        say("sandbox: bwrap; each attempt works in its own clone behind bubblewrap\n")
    else:
        say(f"sandbox: none; bubblewrap cannot run here ({sandbox.bwrap.probe()[0]}), so the")
        say("scripted agent runs unsandboxed; real agents would not start without it\n")
    ids = [queue_utils.create_task(title, context=ctx).id for title, ctx in TASKS]
    for tid, (title, _) in zip(ids, TASKS, strict=True):
        say(f"enqueued TASK-{tid}: {title}")
    _drive(ids, say)
    problems = _check_retry(ids[2], say) + _check_checks(ids[1], say)
    say("")
    for tid in ids:
        if queue_utils.get_task(tid).state is TaskState.PROVISIONAL:
            done = review.accept(tid, "demo reviewer")
            say(f"accepted TASK-{tid}: merged into main ({done.merged_sha[:8]})")
    say("\nmain now:\n" + scratch.history(root))
    problems += _check_result(root, ids) + _check_walls(ids, walls)
    return root, problems


def _drive(ids: list[str], say: Callable[[str], None]) -> None:
    """Run scheduler passes until every task waits for review, narrating each move."""
    scheduler = Scheduler()
    scheduler.initialize()
    seen: dict[str, int] = {}
    deadline = time.monotonic() + DEADLINE_SECONDS
    try:
        while time.monotonic() < deadline:
            scheduler.loop_once()
            _narrate(ids, seen, say)
            states = {queue_utils.get_task(t).state for t in ids}
            if states <= {TaskState.PROVISIONAL, TaskState.FAILED} and not scheduler.runners:
                return
            time.sleep(0.1)
    finally:
        scheduler.shutdown(5)


def _narrate(ids: list[str], seen: dict[str, int], say: Callable[[str], None]) -> None:
    """Say the History lines added since the last call, oldest first across the tasks (a
    task's lines in turn would put one task's later moves before another's earlier ones)."""
    new: list[tuple[str, str, str]] = []
    for tid in ids:
        history = queue_utils.get_task(tid).history
        new += [(line.split("  ", 1)[0], tid, line) for line in history[seen.get(tid, 0) :]]
        seen[tid] = len(history)
    for _, tid, line in sorted(new, key=lambda event: event[0]):  # stable: a task's own order
        moment, move, who = line.split("  ", 2)
        say(f"  {moment[11:19]}  TASK-{tid}  {move:<26} {who}")
        if move.endswith("→ incoming") and "claimed" in move:
            say(f"           TASK-{tid}  retry notes saved: `octopoid notes TASK-{tid}` shows them")


def _check_retry(tid: str, say: Callable[[str], None]) -> list[str]:
    prompt_file = config.get_logs_dir() / f"TASK-{tid}" / "attempt-2.prompt.md"
    if not prompt_file.exists():
        return [f"TASK-{tid} was not retried"]
    prompt = prompt_file.read_text()
    if "## Previous Agent Notes" not in prompt or "CLUE: " not in prompt:
        return [f"TASK-{tid}'s second prompt does not carry the first attempt's notes"]
    clue = prompt.split("CLUE: ", 1)[1].split("\n", 1)[0]
    say(
        f"\nTASK-{tid}'s second prompt carried the first attempt's notes "
        f"(## Previous Agent Notes):\n    CLUE: {clue}"
    )
    notes = queue_utils.get_task_notes(tid) or ""
    if "the previous attempt left a clue" not in notes:
        return [f"TASK-{tid}'s second attempt did not use the clue"]
    say('and the second attempt used it: "the previous attempt left a clue: ..."')
    return []


def _check_checks(tid: str, say: Callable[[str], None]) -> list[str]:
    prompt_file = config.get_logs_dir() / f"TASK-{tid}" / "attempt-2.prompt.md"
    if not prompt_file.exists() or "CHECK-CLUE: " not in prompt_file.read_text():
        return [f"TASK-{tid}'s second prompt does not carry what the check said"]
    clue = prompt_file.read_text().rsplit("CHECK-CLUE: ", 1)[1].split("\n", 1)[0]
    say(
        f"\nTASK-{tid}'s first attempt failed the project's check (config.yaml checks); its "
        f"second prompt carried what the check said (## Checks):\n    CHECK-CLUE: {clue}"
    )
    return []


def _check_walls(ids: list[str], walls: str) -> list[str]:
    """Every attempt ran in the sandbox the demo announced (its log's first line says)."""
    problems = []
    for tid in ids:
        for log in sorted((config.get_logs_dir() / f"TASK-{tid}").glob("attempt-*.log")):
            if not log.read_text().startswith(f"[octopoid] sandbox: {walls};"):
                problems.append(f"{log.name} of TASK-{tid} did not run with sandbox: {walls}")
    return problems


def _check_result(root: Path, ids: list[str]) -> list[str]:
    problems = []
    for tid in ids:
        task = queue_utils.get_task(tid)
        if task.state is not TaskState.DONE:
            problems.append(f"TASK-{tid} ended in {task.state.value}, not done")
        if queue_utils.get_task_notes(tid) is not None:
            problems.append(f"TASK-{tid}'s notes were not cleaned up")
    for name in ("greeting.py", "farewell.py"):
        if not (root / name).exists():
            problems.append(f"{name} is not on main")
    if "timezone.utc" not in (root / "clock.py").read_text():
        problems.append("clock.py was not fixed on main")
    if "Goodbye" not in (root / "farewell.py").read_text():
        problems.append("farewell.py on main is not the version the check accepts")
    return problems
