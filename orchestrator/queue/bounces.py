"""Tasks that bounce: sent back with the same refusal, attempt after attempt.

A refusal is a move back to incoming from review (a reviewer's reject, a forge's verdict)
or from claimed by failing checks (the merge pre-check's conflicts among them), as History
records it. When a task's last ``BOUNCE_REPEATS`` refusals say the same thing, its
attempts are not settling it (one task looped twelve times on one merge conflict in a real
run): `status` and `doctor` say so, with the way out. Read-only.
"""

from __future__ import annotations

from itertools import takewhile
from typing import Any

from ..base.patterns import LazyPattern
from ..model.defaults import BOUNCE_REPEATS
from ..model.tasks import Task, TaskState

S = TaskState
NUMBERS_RE = LazyPattern(r"\d+(\.\d+)?")  # durations and counts differ between attempts
KEPT_RE = LazyPattern(r"; # commits? kept on the branch$")  # the checks' own count


def _refusal(line: str) -> str | None:
    """The refusal a History line records, with what differs between attempts evened
    out; None for any other line."""
    parts = line.split("  ", 2)
    if len(parts) < 3:
        return None
    move, said = parts[1], parts[2].strip()
    _, _, why = said.removeprefix("(").removesuffix(")").partition(": ")
    checks = move == f"{S.CLAIMED.value} → {S.INCOMING.value}" and why.startswith("checks: ")
    if move != f"{S.PROVISIONAL.value} → {S.INCOMING.value}" and not checks:
        return None
    return KEPT_RE.sub("", NUMBERS_RE.sub("#", " ".join(why.split())).lower()) or None


def bouncing(task: Task) -> dict[str, Any] | None:
    """``{"id", "times", "refusal"}`` when the task's last refusals say the same thing at
    least ``BOUNCE_REPEATS`` times in a row (the refusal as History last gives it)."""
    said = [(line, key) for line in task.history if (key := _refusal(line)) is not None]
    if len(said) < BOUNCE_REPEATS:
        return None
    last = said[-1][1]
    times = sum(1 for _ in takewhile(lambda one: one[1] == last, reversed(said)))
    if times < BOUNCE_REPEATS:
        return None
    refusal = said[-1][0].split("  ", 2)[2].strip().removeprefix("(").removesuffix(")")
    return {"id": task.label, "times": times, "refusal": refusal.partition(": ")[2]}


def line(found: dict[str, Any]) -> str:
    """What `status` and `doctor` say of a bouncing task, with the way out."""
    label = found["id"]
    return (
        f"{label} keeps coming back with the same refusal ({found['times']} times in a row: "
        f"{found['refusal']}): its attempts are not settling it. Read `octopoid notes "
        f"{label}`, then reject it with what to do differently, settle it yourself and "
        f"`octopoid close {label} --reason ...`, or `octopoid close {label} --wont-do "
        "--reason ...`"
    )
