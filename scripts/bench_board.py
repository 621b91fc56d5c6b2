"""Board benchmark: the review page's board with 10k waiting and 50k done tasks, against the
same page on an empty project, measured side by side in one run.

Run by hand:  python scripts/bench_board.py [--done 50000] [--incoming 10000] [--runs 15]

Both projects are filled as scripts/bench_status.py fills them (files written straight into
the folders, then `octopoid doctor --rebuild` so the claim index and usage ledger match).
Each gets a real `octopoid web` process; the script then GETs ``/`` (the whole board page)
and ``/board`` (the fragment htmx polls) alternately on both, after one warm-up each.
"server ms" is the app's own time from its ``Server-Timing`` header (request in to
response start: data, template, everything but the socket); "wall ms" is the client's.
Target (issue 15): the big board's server time <= 300 ms.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench_status import fill, octopoid_script

from orchestrator.scaffold import init_project
from orchestrator.web.security import cookie_name

TARGET_MS = 300
TOKEN = "bench-token-0123456789"
TIMING_RE = re.compile(r"app;dur=([0-9.]+)")


def start(script: str, root: Path) -> tuple[subprocess.Popen, str]:
    env = dict(os.environ, OCTOPOID_ROOT=str(root))
    proc = subprocess.Popen(
        [script, "web", "--port", "0", "--token", TOKEN],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    line = proc.stdout.readline()
    match = re.search(r"(http://[^/]+)/", line)
    if not match:
        proc.kill()
        sys.exit(f"octopoid web did not start: {line}{proc.stdout.read()}")
    return proc, match.group(1)


def get(base: str, path: str) -> tuple[float, float, int]:
    """(server ms, wall ms, bytes) of one GET with the token cookie."""
    req = urllib.request.Request(base + path, headers={"Cookie": f"{cookie_name(TOKEN)}={TOKEN}"})
    began = time.perf_counter()
    with urllib.request.urlopen(req, timeout=60) as resp:
        body = resp.read()
        timing = resp.headers.get("server-timing", "")
    wall = (time.perf_counter() - began) * 1000
    return float(TIMING_RE.search(timing).group(1)), wall, len(body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--done", type=int, default=50_000)
    parser.add_argument("--incoming", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    script = octopoid_script()
    with tempfile.TemporaryDirectory(prefix="octopoid-bench-board-") as scratch:
        roots = {}
        for name, done, incoming in (("empty", 0, 0), ("big", args.done, args.incoming)):
            root = Path(scratch) / name
            root.mkdir()
            subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
            init_project(root)
            seconds = fill(root, done, incoming)
            env = dict(os.environ, OCTOPOID_ROOT=str(root))
            rebuild = [script, "doctor", "--rebuild"]
            subprocess.run(rebuild, env=env, check=True, capture_output=True)
            print(f"{name}: {done:,} done + {incoming:,} waiting written in {seconds:.1f}s")
            roots[name] = root
        servers = {name: start(script, root) for name, root in roots.items()}
        try:
            samples: dict[tuple[str, str], list[tuple[float, float, int]]] = {}
            for path in ("/", "/board"):
                for _, base in servers.values():
                    get(base, path)  # warm-up: imports, templates, caches
                for _ in range(args.runs):
                    for name, (_, base) in servers.items():
                        samples.setdefault((name, path), []).append(get(base, path))
        finally:
            for proc, _ in servers.values():
                proc.terminate()
                proc.wait(10)
    print(f"\nBoard page, {args.runs} alternating runs each (median; p90 in brackets)")
    print(f"{'project':<8} {'path':<7} {'server ms':>16} {'wall ms':>16} {'KiB':>6}")
    for (name, path), rows in samples.items():
        server = sorted(r[0] for r in rows)
        wall = sorted(r[1] for r in rows)
        p90 = int(len(rows) * 0.9) - 1 if len(rows) >= 10 else -1
        print(
            f"{name:<8} {path:<7} {statistics.median(server):>8.1f} [{server[p90]:>5.1f}]"
            f" {statistics.median(wall):>8.1f} [{wall[p90]:>5.1f}] {rows[0][2] / 1024:>6.0f}"
        )
    big = statistics.median(r[0] for r in samples[("big", "/")])
    empty = statistics.median(r[0] for r in samples[("empty", "/")])
    verdict = "PASS" if big <= TARGET_MS else "FAIL"
    print(f"\nbig board / empty board, server time: {big / empty:.1f}x")
    print(f"big board server time {big:.1f} ms (target <= {TARGET_MS} ms): {verdict}")


if __name__ == "__main__":
    main()
