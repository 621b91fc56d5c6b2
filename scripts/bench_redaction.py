"""Redaction benchmark: hostile text against ordinary text, per shape of secret detector.

Run by hand:  python scripts/bench_redaction.py [--kib 64] [--runs 3]

An agent controls what it prints, and every chunk of its output is redacted while the
runner renews its lease. A detector whose regex backtracks (a lazy gap to the end of the
line, tried at every anchor) turns one line of a repeated anchor into seconds of work. For
each anchor word below, ``--kib`` KiB of it repeated on one line is redacted whole; the
table prints the median milliseconds beside ordinary agent output of the same size (code,
a diff, a traceback), and the ratio. It costs only the printing agent's own attempt (the
redaction runs in its runner), so the bar is: no line quadratic in its length. Measured
2026-11-24 before the context shapes were bounded: `mysql ` 8.7 s, `curl ` 9.7 s per 64 KiB.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.redaction import Redactor
from tests.helpers.secrets_corpus import ordinary_output

HOSTILE = [
    "mysql ", "curl ", "SECRET", "PASSWORD=", '"token": "', "AKIA", "Authorization: ",
    "aws_session_token=", "sshpass -p ", "Bearer ", "-----BEGIN RSA PRIVATE KEY-----",
    "://u:", "xoxb-", "eyJ",
]  # fmt: skip


def median_ms(redact: Redactor, text: str, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        redact(text)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kib", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    size = args.kib * 1024
    redact = Redactor({})
    redact("warm up AKIA0000000000000000 and detect-secrets' import")
    plain = (ordinary_output() * (size // len(ordinary_output()) + 1))[:size]
    base = median_ms(redact, plain, args.runs)
    print(f"{'input (one line, repeated)':34} {'ms':>9} {'x ordinary':>11}")
    print(f"{'ordinary agent output':34} {base:9.1f} {1.0:11.1f}")
    for word in HOSTILE:
        text = (word * (size // len(word) + 1))[:size]
        ms = median_ms(redact, text, args.runs)
        print(f"{word!r:34} {ms:9.1f} {ms / base:11.1f}")


if __name__ == "__main__":
    main()
