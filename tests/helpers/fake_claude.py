"""A stand-in for the `claude` CLI that replays a recorded stream-json session.

It prints its argv and the prompt (the first user message on stdin) as one
``FAKE_CLAUDE_CALL {json}`` line (it may run in a box, whose writes outside its workspace
no test can see; the line lands in the attempt's log), then prints the lines of
$FAKE_CLAUDE_SESSION. Bash tool calls in the recording are really run in the current
directory, so a replayed session that committed commits again. Knobs:
FAKE_CLAUDE_DIE_AFTER=N (SIGKILL itself after N lines), FAKE_CLAUDE_GARBAGE=1 (mix in
non-JSON lines, unknown events, and cut the last line short), FAKE_CLAUDE_FLOOD_MB=N
(stream N MB of assistant text before the result).
"""

import json
import os
import signal
import subprocess
import sys

first = json.loads(sys.stdin.readline())  # --input-format stream-json: stdin stays open
prompt = first["message"]["content"]
out = sys.stdout
out.write(f"FAKE_CLAUDE_CALL {json.dumps({'argv': sys.argv[1:], 'prompt': prompt})}\n")
with open(os.environ["FAKE_CLAUDE_SESSION"]) as session:
    lines = session.read().splitlines()
die_after = int(os.environ.get("FAKE_CLAUDE_DIE_AFTER", "0"))
garbage = os.environ.get("FAKE_CLAUDE_GARBAGE") == "1"
flood_mb = int(os.environ.get("FAKE_CLAUDE_FLOOD_MB", "0"))

for n, line in enumerate(lines, 1):
    event = json.loads(line)
    if event["type"] == "result" and flood_mb:
        text = "y" * 1000
        chunk = (
            json.dumps(
                {
                    "type": "assistant",
                    "message": {"id": "msg_flood", "content": [{"type": "text", "text": text}]},
                }
            )
            + "\n"
        )
        for _ in range(flood_mb * 1024 * 1024 // len(chunk)):
            out.write(chunk)
    if garbage:
        out.write("npm WARN something not JSON at all\n")
        out.write(json.dumps({"type": "telemetry_v9", "weird": {"nested": [1, 2]}}) + "\n")
        out.write("[1, 2, 3]\n")
    if garbage and event["type"] == "result":
        out.write(line[: len(line) // 2])  # cut off mid-line, no newline
        out.flush()
        sys.exit(0)
    out.write(line + "\n")
    out.flush()
    if event["type"] == "assistant":
        for block in event["message"]["content"]:
            if block.get("type") == "tool_use" and block.get("name") == "Bash":
                subprocess.run(block["input"]["command"], shell=True, check=False)
    if die_after and n >= die_after:
        os.kill(os.getpid(), signal.SIGKILL)
