"""A scripted planner for the command backend: prints the plan $OCTO_TEST_PLAN names.

- ``six``: six tasks with dependencies (the default); the second one's title makes the
  scripted implementer (agent.py) fail on its first attempt (``fail-once``).
- ``cycle``: three tasks waiting on each other.  ``dangling``: a task depends on task 9.
- ``many``: 31 tasks (one more than a plan may hold).  ``prose``: no ```plan block.
- ``commit``: the six, after committing a file (a plan is an answer: nothing is kept).
- ``reach``: the six, after trying a host no list names (net_probe.py).
It checks the prompt carries the goal and the answer format.
"""

import json
import os
import subprocess
from pathlib import Path

prompt = Path(os.environ["OCTOPOID_PROMPT_FILE"]).read_text()
assert "GOAL-CLUE" in prompt and "```plan" in prompt, "the goal or the format is missing"
answer = os.environ.get("OCTO_TEST_PLAN", "six")
six = [
    {"title": "add the schema", "context": "tables first", "criteria": ["migrates"]},
    {"title": "add the api fail-once", "criteria": ["serves"], "depends_on": [1]},
    {"title": "add the cli", "priority": "P2", "depends_on": [1]},
    {"title": "write the docs", "depends_on": [2, 3]},
    {"title": "add the web page", "priority": "P0", "depends_on": [2]},
    {"title": "cut the release", "depends_on": [4, 5]},
]
blocks = {
    "six": six,
    "commit": six,
    "reach": six,
    "cycle": [{"title": t, "depends_on": [d]} for t, d in (("a", 3), ("b", 1), ("c", 2))],
    "dangling": [{"title": "a"}, {"title": "b", "depends_on": [9]}],
    "many": [{"title": f"step {n}"} for n in range(31)],
}
if answer == "commit":
    Path("planner-was-here.txt").write_text("a planner's file\n")
    subprocess.run(["git", "add", "planner-was-here.txt"], check=True)
    subprocess.run(["git", "commit", "-q", "-m", "not part of any plan"], check=True)
if answer == "reach":
    from net_probe import fetch  # beside this file

    try:
        fetch("", 0, "CONNECT example.com:443 HTTP/1.1")
    except PermissionError as refused:
        print(f"the network said {refused}")
print("I read the repository; here is the plan.")
if answer != "prose":
    print(f"```plan\n{json.dumps(blocks[answer], indent=1)}\n```")
