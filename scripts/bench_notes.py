"""Notes benchmark: agent output through the tail buffer, with and without redaction.

Run by hand:  python scripts/bench_notes.py [--sizes 10,100,1000] [--naive 10,100,1000]
              [--detect-secrets 2] [--text agent|code] [--repeat 3]

Each row runs in its own child process (so peak RSS is that row's alone): a producer
process writes N MB of agent-like output (with multi-byte characters) to a real pipe, and
the consumer is one of

- ``on``: ``TailBuffer`` with the 10 MiB capped stdout log and secret redaction, as a runner;
- ``off``: the same without redaction;
- ``naive``: read it all and keep ``stdout[-3000:]``, as the original octopoid did;
- ``detect-secrets``: detect-secrets' own per-line API (``scan_line``, the regex plugins
  octopoid reuses) redacting each line, for comparison with octopoid's combined scan.

``--text code`` writes code, diffs, tracebacks and URLs instead of the one repeated line, so
the scanner's anchors fire and its regexes run. Ratios compare rows of the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from orchestrator.fsutil import TailBuffer
from orchestrator.redaction import UPSTREAM, Redactor, shape_scanner

PRODUCER = r"""
import sys
if sys.argv[2] == "agent":
    text = "tool_use: edit src/app.py -> ok ✓ 🐙 " + "x" * 60 + "\n"
else:
    text = '''diff --git a/orchestrator/queue_utils.py b/orchestrator/queue_utils.py
index 3f786850e387550fdab836ed7e6dc881de23001b..89e6c98d92887913cadf06b2adb97f26cde4849b
@@ -12,7 +12,8 @@ def claim_task(role: str | None, agent: str) -> Task | None:
-    task = store.claim(role, agent, lease_seconds=LEASE_SECONDS)
+    task = store.claim(role, agent, lease_seconds=cfg["lease_seconds"])  # see TASK-42 ✓
     if task is None:
Traceback (most recent call last):
  File "/home/dev/project/tests/test_queue.py", line 88, in test_claim_respects_blockers
    assert q.claim_task(None, "impl-1").id == "task-12"
AssertionError: assert 'task-13' == 'task-12'
fetching https://github.com/octopoid/octopoid/pull/57 (id 123e4567-e89b-12d3-a456-426614174000) 🐙
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    AWS_REGION=eu-west-1 TASK_ACCESS=rw python -m pytest -q tests/e2e -k "not slow"
'''
block = (text * (65536 // len(text) + 1)).encode()
left = int(sys.argv[1])
out = sys.stdout.buffer
while left > 0:
    chunk = block[:left]
    out.write(chunk)
    left -= len(chunk)
"""

#: detect-secrets' plugins for the shapes octopoid redacts (the same regexes, run its way).
DETECT_SECRETS_PLUGINS = [
    {"name": name}
    for name in [cls for _, cls, _, _ in UPSTREAM]
    + ["PrivateKeyDetector", "BasicAuthDetector", "NpmDetector"]
]


def consume(mode: str, size: int, text: str, log_dir: str) -> dict[str, float]:
    build = time.perf_counter()
    if mode == "on":
        shape_scanner()  # import detect-secrets and compile once, timed on its own
    build = time.perf_counter() - build
    producer = [sys.executable, "-c", PRODUCER, str(size), text]
    proc = subprocess.Popen(producer, stdout=subprocess.PIPE)
    start = time.perf_counter()
    kept = CONSUMERS[mode](proc, Path(log_dir))
    proc.wait()
    elapsed = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "build_s": build,
        "seconds": elapsed,
        "mb_s": size / 1e6 / elapsed,
        "peak_mib": peak_kib / 1024,
        "kept": kept,
    }


def tail_buffer(proc: subprocess.Popen, log_dir: Path, redactor: Redactor | None) -> int:
    buf = TailBuffer(3000, log_dir / "TASK-1.stdout.log", 10 * 1024 * 1024, redactor)
    fd = proc.stdout.fileno()
    while chunk := os.read(fd, 1 << 16):
        buf.feed(chunk)
    buf.close()
    return len(buf.text())


def naive(proc: subprocess.Popen, log_dir: Path) -> int:
    stdout = proc.stdout.read().decode("utf-8", errors="replace")
    return len(stdout[-3000:])


def detect_secrets_lines(proc: subprocess.Popen, log_dir: Path) -> int:
    # imported here, so that only this row's RSS holds detect-secrets' scanning machinery
    from detect_secrets.core.scan import scan_line
    from detect_secrets.settings import transient_settings

    tail = ""
    with transient_settings({"plugins_used": DETECT_SECRETS_PLUGINS}):
        for raw in proc.stdout:
            line = raw.decode("utf-8", errors="replace")
            for secret in scan_line(line):
                line = line.replace(secret.secret_value, "[REDACTED]")
            tail = (tail + line)[-3000:]
    return len(tail)


CONSUMERS = {
    "on": lambda proc, log_dir: tail_buffer(proc, log_dir, Redactor()),
    "off": lambda proc, log_dir: tail_buffer(proc, log_dir, None),
    "naive": naive,
    "detect-secrets": detect_secrets_lines,
}
LABELS = {
    "on": "tail buffer + log, redaction on",
    "off": "tail buffer + log, redaction off",
    "naive": "naive stdout[-3000:]",
    "detect-secrets": "detect-secrets scan_line per line",
}


def run_row(mode: str, mb: float, text: str, repeat: int) -> dict[str, float]:
    """The fastest of ``repeat`` runs: on a shared machine the others measure the neighbours."""
    runs = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as log_dir:
            argv = [sys.executable, __file__, "--child", mode, str(int(mb * 10**6)), text, log_dir]
            out = subprocess.run(argv, capture_output=True, text=True, check=True)
        runs.append(json.loads(out.stdout))
    return max(runs, key=lambda run: run["mb_s"])


def sizes(value: str) -> list[float]:
    return [float(v) for v in value.split(",") if v]


def print_table(rows: dict[tuple[str, float], dict[str, float]]) -> None:
    print(f"{'consumer':<36}{'MB':>6}{'MB/s':>9}{'peak RSS MiB':>14}{'seconds':>9}")
    for (mode, mb), r in rows.items():
        print(
            f"{LABELS[mode]:<36}{mb:>6g}{r['mb_s']:>9.1f}{r['peak_mib']:>14.1f}{r['seconds']:>9.1f}"
        )


def print_ratios(rows: dict[tuple[str, float], dict[str, float]]) -> None:
    builds = [r["build_s"] * 1000 for (mode, _), r in rows.items() if mode == "on"]
    if builds:
        print(f"\nfirst use builds the scanner (import + compile): {min(builds):.0f} ms, not timed")
    print("same size, same run:")
    for (mode, mb), on in rows.items():
        if mode != "on":
            continue
        for other in ("off", "naive"):
            if (other, mb) in rows:
                speed = on["mb_s"] / rows[other, mb]["mb_s"]
                rss = on["peak_mib"] / rows[other, mb]["peak_mib"]
                print(
                    f"  {mb:g} MB, redaction on vs {other}: throughput x{speed:.2f}, RSS x{rss:.2f}"
                )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        mode, size, text, log_dir = sys.argv[2:6]
        print(json.dumps(consume(mode, int(size), text, log_dir)))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000", help="MB through the tail buffer")
    parser.add_argument("--naive", default="10,100,1000", help="MB for the naive approach")
    parser.add_argument("--detect-secrets", default="2", help="MB for scan_line (slow)")
    parser.add_argument("--text", choices=("agent", "code"), default="agent")
    parser.add_argument("--repeat", type=int, default=1, help="runs per row; the fastest counts")
    args = parser.parse_args()
    plan = [(mode, mb) for mb in sizes(args.sizes) for mode in ("on", "off")]
    plan += [("naive", mb) for mb in sizes(args.naive)]
    plan += [("detect-secrets", mb) for mb in sizes(args.detect_secrets)]
    rows = {(mode, mb): run_row(mode, mb, args.text, args.repeat) for mode, mb in plan}
    print_table(rows)
    print_ratios(rows)


if __name__ == "__main__":
    main()
