"""Say "ready", wait for the go-file, claim tasks until none are left; print one claimed
id per line. argv: name go-file."""

import sys
import time
from pathlib import Path

from orchestrator.queue.machine import claim_task

name, go = sys.argv[1], Path(sys.argv[2])
print("ready", flush=True)  # imported and about to wait: the race starts together
while not go.exists():
    time.sleep(0.005)
claimed = []
while (task := claim_task(None, name)) is not None:
    claimed.append(task.id)
print("\n".join(claimed))
