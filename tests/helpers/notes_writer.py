"""Save retry notes in a loop. argv: task-id writer-name count.

Each attempt's output is ``<writer>-<n>-BEGIN ... <writer>-<n>-END`` so a test can check
that every section arrived whole and that none interleaved with another.
"""

import sys

from orchestrator.queue.machine import save_task_notes

task_id, writer, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
print("ready", flush=True)
for n in range(count):
    body = f"{writer}-{n}-BEGIN\n" + (f"{writer} line {n}\n" * 60) + f"{writer}-{n}-END"
    save_task_notes(task_id, writer, body, 0, n)
