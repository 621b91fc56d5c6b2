"""Notes benchmark: agent output piped through the tail buffer vs the naive stdout[-3000:].

Run by hand:  python scripts/bench_notes.py [--sizes 10,100,1000] [--naive 100]
Each row runs in its own child process (so peak RSS is that row's alone): a producer
process writes N MB of agent-like output (with multi-byte characters) to a real pipe, and
the consumer either streams it through ``TailBuffer`` with the capped stdout log, or reads
it all and keeps ``stdout[-3000:]`` as the original octopoid did.
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
from orchestrator.redaction import Redactor

PRODUCER = r"""
import sys
line = ("tool_use: edit src/app.py -> ok ✓ 🐙 " + "x" * 60 + "\n").encode()
block = line * (65536 // len(line))
left = int(sys.argv[1])
out = sys.stdout.buffer
while left > 0:
    chunk = block[:left]
    out.write(chunk)
    left -= len(chunk)
"""


def consume(mode: str, size: int, log_dir: str) -> dict[str, float]:
    proc = subprocess.Popen([sys.executable, "-c", PRODUCER, str(size)], stdout=subprocess.PIPE)
    start = time.perf_counter()
    if mode == "tail":
        buf = TailBuffer(3000, Path(log_dir) / "TASK-1.stdout.log", 10 * 1024 * 1024, Redactor())
        fd = proc.stdout.fileno()
        while chunk := os.read(fd, 1 << 16):
            buf.feed(chunk)
        buf.close()
        kept = len(buf.text())
    else:
        stdout = proc.stdout.read().decode("utf-8", errors="replace")
        kept = len(stdout[-3000:])
    proc.wait()
    elapsed = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "seconds": elapsed,
        "mb_s": size / 1e6 / elapsed,
        "peak_mib": peak_kib / 1024,
        "kept": kept,
    }


def run_row(mode: str, mb: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as log_dir:
        out = subprocess.run(
            [sys.executable, __file__, "--child", mode, str(mb * 10**6), log_dir],
            capture_output=True,
            text=True,
            check=True,
        )
    return json.loads(out.stdout)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(consume(sys.argv[2], int(sys.argv[3]), sys.argv[4])))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000", help="MB through the tail buffer")
    parser.add_argument("--naive", type=int, default=100, help="MB for the naive approach")
    args = parser.parse_args()
    rows = [
        (f"tail buffer + 10 MiB log, {mb} MB", run_row("tail", mb))
        for mb in map(int, args.sizes.split(","))
    ]
    rows.append((f"naive stdout[-3000:], {args.naive} MB", run_row("naive", args.naive)))
    print(f"{'consumer':<38}{'MB/s':>8}{'peak RSS MiB':>14}{'seconds':>9}")
    for name, r in rows:
        print(f"{name:<38}{r['mb_s']:>8.0f}{r['peak_mib']:>14.1f}{r['seconds']:>9.1f}")


if __name__ == "__main__":
    main()
