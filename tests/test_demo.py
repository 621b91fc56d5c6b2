"""`octopoid demo`'s narration (the whole demo runs in tests/e2e/test_demo.py)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from orchestrator.faces import demo
from orchestrator.model.tasks import utcnow
from orchestrator.queue import machine as q


def test_the_demo_says_moves_in_time_order_across_tasks(project: Path) -> None:
    """Two tasks whose moves interleave: the narration is ordered by time, not by task."""
    t0 = utcnow().replace(microsecond=0)
    ids = [q.create_task(title, now=t0).id for title in ("first", "second")]
    q.claim_task(None, "a", now=t0 + timedelta(seconds=5))  # the first, later
    q.claim_task(None, "a", now=t0 + timedelta(seconds=1))  # the second, earlier
    said: list[str] = []
    demo._narrate(ids, {}, said.append)
    moves = [(line.split()[1], line.split()[2]) for line in said]
    assert moves == [("TASK-1", "new"), ("TASK-2", "new"), ("TASK-2", "incoming"),
                     ("TASK-1", "incoming")]  # fmt: skip
    times = [line.split()[0] for line in said]
    assert times == sorted(times)
    demo._narrate(ids, {tid: 2 for tid in ids}, said.append)  # nothing new: nothing said
    assert len(said) == 4
