"""A scripted breakdown agent for the command backend: prints the answer $OCTO_TEST_ANSWER names.

- ``three``: three ordered subtasks (the default).  ``no-block``: prose only.
- ``cycle``: a subtask that depends on a later one.  ``zero``: an empty list.
- ``many``: 500 subtasks.  ``not-json``: a block that is not JSON.
It also checks the prompt carries the task's retry notes (why it burned out).
"""

import json
import os
from pathlib import Path

prompt = Path(os.environ["OCTOPOID_PROMPT_FILE"]).read_text()
assert "## Previous Agent Notes" in prompt and "BURNED-OUT-CLUE" in prompt, "notes missing"
answer = os.environ.get("OCTO_TEST_ANSWER", "three")
three = [
    {"title": "add the parser", "context": "parse the input", "criteria": ["parses"]},
    {"title": "add the printer", "criteria": ["prints"]},
    {"title": "wire them up", "context": "main calls both", "depends_on": [1, 2]},
]
blocks = {
    "three": json.dumps(three, indent=1),
    "cycle": json.dumps([{"title": "a", "depends_on": [2]}, {"title": "b"}]),
    "zero": "[]",
    "many": json.dumps([{"title": f"step {n}"} for n in range(500)]),
    "not-json": "- title: yaml is not accepted",
}
print("I looked at why it burned out; here is the split.")
if answer != "no-block":
    print(f"```subtasks\n{blocks[answer]}\n```")
