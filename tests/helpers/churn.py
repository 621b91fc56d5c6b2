"""Move tasks through every transition at random, forever, until killed.

argv: seed. Used by the crash test, which kill -9s this process at random moments; it
prints a line after each move, so the test can let it make some first.
"""

import random
import sys

from orchestrator.model.exceptions import OctopoidError
from orchestrator.model.tasks import TaskState
from orchestrator.queue import machine as q

rng = random.Random(int(sys.argv[1]))
print("ready", flush=True)
while True:
    roll = rng.random()
    try:
        if roll < 0.35:
            task = q.claim_task(None, "churner")
            if task is not None:
                q.save_task_notes(task.id, "churner", "output " * rng.randint(1, 900), 0, 3)
                q.submit_completion(task, 1, 3)
                print("moved", flush=True)
            continue
        state = rng.choice([TaskState.CLAIMED, TaskState.PROVISIONAL, TaskState.FAILED])
        tasks = q.list_tasks(state)
        if not tasks:
            continue
        task = rng.choice(tasks)
        if state is TaskState.PROVISIONAL:
            q.reject_completion(task, "again " * rng.randint(1, 50), "reviewer")
        elif state is TaskState.FAILED:
            q.retry_task(task)
        elif roll < 0.7:
            q.requeue_task(task, "churn")
        else:
            q.fail_task(task, "churn")
        print("moved", flush=True)
    except OctopoidError:
        continue  # a race with a leftover of an earlier, killed churner
