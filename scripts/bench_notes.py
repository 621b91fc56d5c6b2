"""Notes benchmark: agent output through the tail buffer, with and without redaction.

Run by hand:  python scripts/bench_notes.py [--sizes 10,100,1000] [--naive 10,100,1000]
              [--detect-secrets 2] [--text agent|code|secrets] [--repeat 3]

Each row runs in its own child process (so peak RSS is that row's alone): a producer
process writes N MB of agent-like output (with multi-byte characters) to a real pipe, and
the consumer is one of

- ``on``: ``TailBuffer`` with the 10 MiB capped stdout log and secret redaction, as a runner;
- ``off``: the same without redaction;
- ``naive``: read it all and keep ``stdout[-3000:]``, as the original octopoid did;
- ``detect-secrets``: detect-secrets' own per-line API (``scan_line``, the regex plugins
  octopoid reuses) redacting each line, for comparison with octopoid's combined scan.

``--text code`` writes code, diffs, tracebacks and URLs instead of the one repeated line, so
the scanner's anchors fire and its regexes run; ``--text secrets`` the 70-shape secrets
corpus. Each row prints min/median/max MB/s of ``--repeat`` runs, the rows of one repeat run
one after another (interleaved), so ratios compare rows of the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.base.fsutil import TailBuffer
from orchestrator.base.redaction import UPSTREAM, Redactor, shape_scanner
from tests.helpers.secrets_corpus import code_like_output, corpus

TEXTS = {
    "agent": lambda: "tool_use: edit src/app.py -> ok ✓ 🐙 " + "x" * 60 + "\n",
    "code": code_like_output,
    "secrets": corpus,
}

PRODUCER = r"""
import sys
block = (sys.argv[2] * (65536 // len(sys.argv[2]) + 1)).encode()
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
    producer = [sys.executable, "-c", PRODUCER, str(size), TEXTS[text]()]
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


def run_once(mode: str, mb: float, text: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as log_dir:
        argv = [sys.executable, __file__, "--child", mode, str(int(mb * 10**6)), text, log_dir]
        out = subprocess.run(argv, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def summary(runs: list[dict[str, float]]) -> dict[str, float]:
    """Medians, and the spread of throughput: on a shared machine one run measures little."""
    speeds = sorted(run["mb_s"] for run in runs)
    row = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    return {**row, "min_mb_s": speeds[0], "max_mb_s": speeds[-1]}


def sizes(value: str) -> list[float]:
    return [float(v) for v in value.split(",") if v]


def print_table(rows: dict[tuple[str, float], dict[str, float]]) -> None:
    print(f"{'consumer':<36}{'MB':>6}{'MB/s min':>9}{'median':>8}{'max':>8}{'RSS MiB':>9}")
    for (mode, mb), r in rows.items():
        print(
            f"{LABELS[mode]:<36}{mb:>6g}{r['min_mb_s']:>9.1f}{r['mb_s']:>8.1f}"
            f"{r['max_mb_s']:>8.1f}{r['peak_mib']:>9.1f}"
        )


def print_ratios(rows: dict[tuple[str, float], dict[str, float]]) -> None:
    builds = [r["build_s"] * 1000 for (mode, _), r in rows.items() if mode == "on"]
    if builds:
        build = statistics.median(builds)
        print(f"\nfirst use builds the scanner (import + compile): {build:.0f} ms, not timed")
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
    parser.add_argument("--text", choices=tuple(TEXTS), default="agent")
    parser.add_argument("--repeat", type=int, default=3, help="runs per row; medians count")
    args = parser.parse_args()
    plan = [(mode, mb) for mb in sizes(args.sizes) for mode in ("on", "off")]
    plan += [("naive", mb) for mb in sizes(args.naive)]
    plan += [("detect-secrets", mb) for mb in sizes(args.detect_secrets)]
    runs: dict[tuple[str, float], list[dict[str, float]]] = {row: [] for row in plan}
    for _ in range(args.repeat):  # interleaved: a busy neighbour slows every row alike
        for mode, mb in plan:
            runs[mode, mb].append(run_once(mode, mb, args.text))
    rows = {row: summary(found) for row, found in runs.items()}
    print_table(rows)
    print_ratios(rows)


if __name__ == "__main__":
    main()
