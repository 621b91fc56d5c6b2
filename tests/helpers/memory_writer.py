"""Write working notes from a separate process. argv: name count mode (add | diff)."""

import sys

from orchestrator.memory.notes import NotesManager

name, count, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
notes = NotesManager()
print("ready", flush=True)
for i in range(count):
    if mode == "add":
        notes.add_item("Important Facts", f"{name} fact {i}")
        continue
    current = notes.get_section_items("Important Facts")
    batch = [{"section": "Important Facts", "item": f"batch {i} item {j}"} for j in range(10)]
    notes.apply_diff(batch, current)
